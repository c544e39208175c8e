"""A clean shutdown only skips recovery while the segment files are what it left.

The shutdown records every segment's (base offset, size); a file changed since -- a torn
or extended tail, a truncated older segment -- makes the next open recover from the
first changed segment, so the log end offset never points past the last whole batch.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from odradek.records.header import iter_headers
from odradek.storage.checkpoint import OffsetCheckpointFile
from odradek.storage.config import LogConfig
from odradek.storage.log import Log
from odradek.storage.log_manager import CLEAN_SHUTDOWN_FILE, LogManager
from tests.storage.conftest import FakeClock, make_batch

CONFIG = LogConfig(segment_bytes=1200, index_interval_bytes=150, retention_ms=-1)


def build(directory: Path, batches: int = 40) -> tuple[Log, list]:
    log = Log.open(directory, CONFIG, clock=FakeClock())
    for i in range(batches):
        log.append_as_leader(make_batch([b"record-%d" % i] * (1 + i % 3)))
    return log, [h for _, h in iter_headers(log.read(0, 10**8).read_bytes())]


def batch_positions(path: Path) -> list[int]:
    return [pos for pos, _ in iter_headers(path.read_bytes())]


def reopen(directory: Path, leo: int, sizes: list[tuple[int, int]] | None) -> Log:
    return Log.open(directory, CONFIG, recovery_point=leo, clean_shutdown=True,
                    segment_sizes=sizes, clock=FakeClock())  # fmt: skip


def check_usable(log: Log, expected_headers: list) -> None:
    """Everything below the end reads back whole; an append lands at the end and reads."""
    data = log.read(0, 10**8).read_bytes()
    assert [h for _, h in iter_headers(data)] == expected_headers
    end = log.log_end_offset
    info = log.append_as_leader(make_batch([b"after"]))
    assert info.first_offset == end
    again = log.read(end, 10**6).read_bytes()
    assert [h.base_offset for _, h in iter_headers(again)] == [end]


@pytest.mark.parametrize("recorded", [True, False], ids=["sizes", "legacy-empty-marker"])
def test_torn_last_batch_after_clean_shutdown_at_every_byte(tmp_path: Path, recorded: bool) -> None:
    pristine = tmp_path / "pristine" / "t-0"
    log, stored = build(pristine)
    leo = log.log_end_offset
    log.close()
    sizes = log.segment_sizes() if recorded else None
    path = sorted(pristine.glob("*.log"))[-1]
    start = batch_positions(path)[-1]
    end = path.stat().st_size
    prefix = path.read_bytes()[:start]
    work = tmp_path / "work" / "t-0"
    for cut in range(start, end):
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(pristine, work)
        with open(work / path.name, "r+b") as f:
            f.truncate(cut)
        opened = reopen(work, leo, sizes)
        assert opened.log_end_offset == stored[-1].base_offset, cut
        assert opened.recovery_point <= stored[-1].base_offset, cut
        assert (work / path.name).read_bytes() == prefix, cut
        check_usable(opened, stored[:-1])
        opened.close()


@pytest.mark.parametrize("tail", [b"\x00" * 4096, bytes(range(256)) * 7, b"\xff" * 61])
def test_zero_or_garbage_tail_after_clean_shutdown_is_cut(tmp_path: Path, tail: bytes) -> None:
    directory = tmp_path / "t-0"
    log, stored = build(directory)
    leo = log.log_end_offset
    log.close()
    sizes = log.segment_sizes()
    path = sorted(directory.glob("*.log"))[-1]
    original = path.read_bytes()
    with open(path, "ab") as f:
        f.write(tail)
    opened = reopen(directory, leo, sizes)
    assert opened.log_end_offset == leo
    assert path.read_bytes() == original
    check_usable(opened, stored)
    opened.close()


def test_truncated_older_segment_after_clean_shutdown_is_recovered(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log, stored = build(directory)
    leo = log.log_end_offset
    log.close()
    sizes = log.segment_sizes()
    files = sorted(directory.glob("*.log"))
    assert len(files) >= 4
    victim = files[1]
    torn_at = batch_positions(victim)[2]
    torn = dict(iter_headers(victim.read_bytes()))[torn_at]
    with open(victim, "r+b") as f:
        f.truncate(torn_at + 20)
    opened = reopen(directory, leo, sizes)
    kept = [h for h in stored if h.base_offset < torn.base_offset]
    # Like a crash recovery: cut at the tear, later segments dropped (Kafka does the same).
    assert opened.log_end_offset == torn.base_offset
    assert victim.stat().st_size == torn_at
    assert sorted(directory.glob("*.log")) == files[:2]
    check_usable(opened, kept)
    opened.close()


def test_unchanged_files_skip_recovery_and_a_missing_segment_does_not(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log, stored = build(directory)
    leo = log.log_end_offset
    log.close()
    sizes = log.segment_sizes()
    assert [base for base, _ in sizes] == [s.base_offset for s in log.segments]
    opened = reopen(directory, leo, sizes)
    assert opened.log_end_offset == leo and opened.recovery_point == leo
    opened.close()
    # The last segment vanished: the end comes from what is really there.
    last = sorted(directory.glob("*.log"))[-1]
    last.unlink()
    opened = reopen(directory, leo, sizes)
    assert opened.log_end_offset == sizes[-1][0]
    check_usable(opened, [h for h in stored if h.base_offset < sizes[-1][0]])
    opened.close()


def test_log_manager_records_sizes_and_recovers_a_torn_tail(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    lm = LogManager(tmp_path, CONFIG, clock=clock)
    lm.startup()
    log = lm.get_or_create_log("t", 0)
    for i in range(30):
        log.append_as_leader(make_batch([b"m-%d" % i] * 2))
    other = lm.get_or_create_log("u", 0)
    other.append_as_leader(make_batch([b"x"]))
    stored = [h for _, h in iter_headers(log.read(0, 10**8).read_bytes())]
    lm.shutdown()
    marker = (tmp_path / CLEAN_SHUTDOWN_FILE).read_text().splitlines()
    assert marker[:2] == ["0", "2"]
    assert marker[2].startswith("t 0 0:") and marker[3].startswith("u 0 0:")
    path = sorted((tmp_path / "t-0").glob("*.log"))[-1]
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size - 5)
    with caplog.at_level(logging.WARNING, logger="odradek.storage.log_loader"):
        again = LogManager(tmp_path, CONFIG, clock=clock)
        again.startup()
    assert again.had_clean_shutdown
    reopened = again.get_log("t", 0)
    assert reopened.log_end_offset == stored[-1].base_offset
    assert any("not trusting the clean shutdown" in r.getMessage() for r in caplog.records)
    assert not any("u-0" in r.getMessage() for r in caplog.records)  # untouched: no recovery
    assert again.get_log("u", 0).log_end_offset == 1
    check_usable(reopened, stored[:-1])
    again.shutdown()
    recovery = OffsetCheckpointFile(tmp_path / "recovery-point-offset-checkpoint").read()
    assert recovery[("t", 0)] == stored[-1].base_offset + 1


def test_malformed_marker_means_recovery(tmp_path: Path) -> None:
    clock = FakeClock()
    lm = LogManager(tmp_path, CONFIG, clock=clock)
    lm.startup()
    log = lm.get_or_create_log("t", 0)
    for i in range(10):
        log.append_as_leader(make_batch([b"m-%d" % i]))
    lm.shutdown()
    (tmp_path / CLEAN_SHUTDOWN_FILE).write_text("0\n1\nt 0 zero:ten\n")
    path = sorted((tmp_path / "t-0").glob("*.log"))[-1]
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size - 5)
    again = LogManager(tmp_path, CONFIG, clock=clock)
    again.startup()
    assert not again.had_clean_shutdown
    assert again.get_log("t", 0).log_end_offset == 9
    again.shutdown()


def test_marker_without_sizes_recovers_the_last_segment(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    lm = LogManager(tmp_path, CONFIG, clock=clock)
    lm.startup()
    log = lm.get_or_create_log("t", 0)
    for i in range(30):
        log.append_as_leader(make_batch([b"m-%d" % i]))
    lm.shutdown()
    (tmp_path / CLEAN_SHUTDOWN_FILE).write_bytes(b"")  # as an older odradek wrote it
    path = sorted((tmp_path / "t-0").glob("*.log"))[-1]
    size = path.stat().st_size
    with open(path, "ab") as f:
        f.write(b"\x00" * 100)
    with caplog.at_level(logging.WARNING, logger="odradek.storage.log_loader"):
        again = LogManager(tmp_path, CONFIG, clock=clock)
        again.startup()
    assert again.had_clean_shutdown
    assert again.get_log("t", 0).log_end_offset == 30
    assert path.stat().st_size == size  # the zeros are gone: appends follow the last batch
    assert any("no segment sizes recorded" in r.getMessage() for r in caplog.records)
    again.shutdown()
