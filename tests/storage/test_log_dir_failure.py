"""LogDirFailureChannel: offline once (one ERROR), back online by a probe (one INFO)."""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path

import pytest

from odradek.storage import log_dir_failure as module
from odradek.storage.errors import InvalidRecordError, StorageError
from odradek.storage.log_dir_failure import PROBE_FILE, LogDirFailureChannel, is_io_failure

LOGGER = "odradek.storage.log_dir_failure"


def enospc(*_args: object) -> int:
    raise OSError(errno.ENOSPC, "No space left on device")


def test_offline_is_logged_once_with_its_cause(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    channel = LogDirFailureChannel(tmp_path)
    caplog.set_level(logging.INFO, LOGGER)
    assert channel.mark_offline(OSError(errno.ENOSPC, "No space left on device"))
    for _ in range(1100):
        assert not channel.mark_offline(OSError(errno.ENOSPC, "No space left on device"))
    assert channel.offline and channel.cause == "[Errno 28] No space left on device"
    records = [r for r in caplog.records if r.name == LOGGER]
    assert [r.levelname for r in records] == ["ERROR"]
    assert str(tmp_path) in records[0].getMessage()
    assert "No space left on device" in records[0].getMessage()


def test_probe_keeps_it_offline_until_a_test_write_succeeds(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    channel = LogDirFailureChannel(tmp_path, probe_bytes=200_000)
    caplog.set_level(logging.INFO, LOGGER)
    assert channel.probe()  # online: nothing to do
    channel.mark_offline("disk full")
    monkeypatch.setattr(module.os, "write", enospc)
    assert not channel.probe() and not channel.probe()
    assert channel.offline
    assert not (tmp_path / PROBE_FILE).exists()  # a failed probe leaves nothing behind
    monkeypatch.undo()
    written: list[int] = []
    real_write = os.write

    def counting_write(fd: int, data: bytes) -> int:
        n = real_write(fd, data)
        written.append(n)
        return n

    monkeypatch.setattr(module.os, "write", counting_write)
    assert channel.probe()
    assert sum(written) == 200_000  # the whole probe size was written
    assert not channel.offline and channel.cause is None
    assert not (tmp_path / PROBE_FILE).exists()
    assert channel.probe()
    levels = [r.levelname for r in caplog.records if r.name == LOGGER]
    assert levels == ["ERROR", "INFO"]
    assert "back online" in caplog.records[-1].getMessage()


def test_io_failures_are_told_from_data_errors() -> None:
    assert is_io_failure(OSError(errno.EIO, "I/O error"))
    try:
        raise StorageError("append failed") from OSError(errno.ENOSPC, "full")
    except StorageError as exc:
        assert is_io_failure(exc)
    assert not is_io_failure(StorageError("log is closed"))
    try:
        raise InvalidRecordError("bad crc") from OSError(errno.EIO, "x")
    except InvalidRecordError as exc:
        assert not is_io_failure(exc)  # the request's fault, not the directory's


def test_on_offline_is_called_once_each_time_it_goes_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    channel = LogDirFailureChannel(tmp_path)
    calls: list[str] = []
    channel.on_offline = calls.append
    channel.mark_offline(OSError(errno.ENOSPC, "No space left on device"))
    channel.mark_offline("again")  # already offline: no second call
    assert calls == ["[Errno 28] No space left on device"]
    assert channel.probe()  # the test write succeeds: online again
    channel.mark_offline("the device went away")
    assert calls == ["[Errno 28] No space left on device", "the device went away"]
