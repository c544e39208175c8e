from __future__ import annotations

from pathlib import Path

import pytest

from odradek.records.header import iter_headers
from odradek.storage import checkpoint as checkpoint_module
from odradek.storage.checkpoint import OffsetCheckpointFile
from odradek.storage.config import LogConfig
from odradek.storage.log_manager import CLEAN_SHUTDOWN_FILE, LogManager, validate_topic_name
from tests.storage.conftest import FakeClock, make_batch

CONFIG = LogConfig(segment_bytes=800, retention_ms=-1, file_delete_delay_ms=1000)


def manager(data_dir: Path, clock: FakeClock, **kwargs: object) -> LogManager:
    lm = LogManager(data_dir, CONFIG, clock=clock, **kwargs)  # type: ignore[arg-type]
    lm.startup()
    return lm


def write(lm: LogManager, topic: str, partition: int, batches: int) -> None:
    log = lm.get_or_create_log(topic, partition)
    for i in range(batches):
        log.append_as_leader(make_batch([b"%s-%d" % (topic.encode(), i)] * 2))


def test_clean_shutdown_and_restart(tmp_path: Path, clock: FakeClock) -> None:
    lm = manager(tmp_path, clock)
    assert not lm.had_clean_shutdown
    write(lm, "orders", 0, 30)
    write(lm, "orders", 1, 5)
    write(lm, "a.b-c", 12, 3)
    lm.get_log("orders", 0).maybe_increment_log_start_offset(7)
    contents = {
        (log.topic, log.partition): log.read(log.log_start_offset, 10**7).read_bytes()
        for log in lm.all_logs()
    }
    lm.shutdown()
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    recovery = OffsetCheckpointFile(tmp_path / "recovery-point-offset-checkpoint").read()
    assert recovery == {("orders", 0): 60, ("orders", 1): 10, ("a.b-c", 12): 6}
    starts = OffsetCheckpointFile(tmp_path / "log-start-offset-checkpoint").read()
    # Only logs starting past their first segment's base are listed, as in Kafka.
    assert starts == {("orders", 0): 7}

    again = manager(tmp_path, clock)
    assert again.had_clean_shutdown
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()  # a crash from now on is unclean
    logs = {(log.topic, log.partition): log for log in again.all_logs()}
    assert set(logs) == set(contents)
    for tp, log in logs.items():
        assert log.read(log.log_start_offset, 10**7).read_bytes() == contents[tp]
    assert logs[("orders", 0)].log_start_offset == 7
    again.shutdown()


def test_crash_restart_recovers_from_the_checkpoint(tmp_path: Path, clock: FakeClock) -> None:
    lm = manager(tmp_path, clock)
    write(lm, "t", 0, 20)
    lm.get_log("t", 0).flush()
    lm.checkpoint()
    write(lm, "t", 0, 5)  # after the checkpoint: must be recovered by scanning
    leo = lm.get_log("t", 0).log_end_offset
    # crash: no shutdown, no marker
    again = manager(tmp_path, clock)
    assert not again.had_clean_shutdown
    log = again.get_log("t", 0)
    assert log.log_end_offset == leo
    assert log.recovery_point == 40  # the checkpointed one; the rest is unflushed
    assert len(list(iter_headers(log.read(0, 10**7).read_bytes()))) == 25
    again.shutdown()


def test_corrupt_checkpoint_means_full_recovery(tmp_path: Path, clock: FakeClock) -> None:
    lm = manager(tmp_path, clock)
    write(lm, "t", 0, 10)
    lm.shutdown()
    (tmp_path / "recovery-point-offset-checkpoint").write_text("garbage")
    again = manager(tmp_path, clock)
    assert not again.had_clean_shutdown
    assert again.get_log("t", 0).log_end_offset == 20
    again.shutdown()


def test_get_or_create_and_configs(tmp_path: Path, clock: FakeClock) -> None:
    lm = manager(tmp_path, clock)
    log = lm.get_or_create_log("t", 0)
    assert log.config == CONFIG
    assert lm.get_or_create_log("t", 0) is log
    new_config = LogConfig(segment_bytes=5000)
    assert lm.get_or_create_log("t", 0, new_config) is log
    assert log.config == new_config
    assert lm.get_log("t", 1) is None
    for bad in ("", ".", "..", "has space", "x" * 250, "a/b"):
        with pytest.raises(ValueError):
            lm.get_or_create_log(bad, 0)
    with pytest.raises(ValueError):
        lm.get_or_create_log("t", -1)
    validate_topic_name("Valid.topic_name-1")
    lm.shutdown()


def test_topic_configs_known_at_startup(tmp_path: Path, clock: FakeClock) -> None:
    lm = manager(tmp_path, clock)
    write(lm, "special", 0, 1)
    write(lm, "plain", 0, 1)
    lm.shutdown()
    special = LogConfig(segment_bytes=123456)
    again = manager(
        tmp_path, clock, topic_config=lambda t: special if t == "special" else None,
        recovery_threads=2,
    )  # fmt: skip
    assert again.get_log("special", 0).config == special
    assert again.get_log("plain", 0).config == CONFIG
    again.shutdown()


def test_delete_log_is_deferred(tmp_path: Path, clock: FakeClock) -> None:
    lm = manager(tmp_path, clock)
    write(lm, "gone", 0, 10)
    fetch = lm.get_log("gone", 0).read(0, 10**6)
    expected = fetch.read_bytes()
    lm.delete_log("gone", 0)
    assert lm.get_log("gone", 0) is None
    assert not (tmp_path / "gone-0").exists()
    pending = [p for p in tmp_path.iterdir() if p.name.endswith("-delete")]
    assert len(pending) == 1 and pending[0].name.startswith("gone-0.")
    write(lm, "gone", 0, 1)  # the name is free again at once
    assert lm.get_log("gone", 0).log_end_offset == 2
    lm.run_retention()
    assert pending[0].exists()
    clock.advance(1000)
    lm.run_retention()
    assert not pending[0].exists()
    assert fetch.read_bytes() == expected  # an in-flight read outlives the directory
    lm.delete_log("never-existed", 0)  # no-op
    lm.shutdown()
    assert not (tmp_path / "gone-0.x-delete").exists()


def test_leftover_delete_dirs_and_strangers_at_startup(tmp_path: Path, clock: FakeClock) -> None:
    (tmp_path / "old-0.abc-delete").mkdir()
    (tmp_path / "not a partition").mkdir()
    (tmp_path / "cluster-metadata.json").write_text("{}")
    lm = manager(tmp_path, clock)
    assert not (tmp_path / "old-0.abc-delete").exists()
    assert (tmp_path / "not a partition").exists()
    assert lm.all_logs() == []
    lm.shutdown()


def test_periodic_flush_and_retention(tmp_path: Path, clock: FakeClock) -> None:
    lm = LogManager(tmp_path, LogConfig(segment_bytes=800, flush_messages=4, retention_ms=1000),
                    clock=clock)  # fmt: skip
    lm.startup()
    log = lm.get_or_create_log("t", 0)
    for _ in range(30):
        log.append_as_leader(make_batch([b"x" * 30] * 2, timestamp=clock.now_ms))
    lm.run_flush()
    assert log.recovery_point == log.log_end_offset
    clock.advance(2000)
    before = len(log.segments)
    lm.run_retention()
    assert len(log.segments) == 1 < before
    lm.checkpoint()
    # Retention moved the start to the first remaining segment's base: nothing to list.
    assert log.log_start_offset == log.segments[0].base_offset > 0
    assert OffsetCheckpointFile(tmp_path / "log-start-offset-checkpoint").read() == {}
    lm.shutdown()


def test_failed_checkpoint_keeps_the_previous_one(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    lm = manager(tmp_path, clock)
    write(lm, "t", 0, 3)
    lm.get_log("t", 0).flush()
    lm.checkpoint()
    path = tmp_path / "recovery-point-offset-checkpoint"
    before = path.read_bytes()
    write(lm, "t", 0, 3)
    lm.get_log("t", 0).flush()

    def fail(*_args: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(checkpoint_module.os, "replace", fail)
    lm.checkpoint()  # the failure takes the directory offline instead of raising
    monkeypatch.undo()
    assert lm.dir_failure.offline and "disk full" in (lm.dir_failure.cause or "")
    assert path.read_bytes() == before
    lm.checkpoint()  # skipped while offline
    assert path.read_bytes() == before
    assert lm.dir_failure.probe()
    lm.checkpoint()
    assert OffsetCheckpointFile(path).read() == {("t", 0): 12}
    lm.shutdown()


def test_corrupt_epoch_checkpoint_is_rebuilt(tmp_path: Path, clock: FakeClock) -> None:
    lm = manager(tmp_path, clock)
    log = lm.get_or_create_log("t", 0)
    for epoch in (1, 1, 4, 4, 6):
        log.append_as_leader(make_batch([b"x" * 40] * 2), leader_epoch=epoch)
    lm.shutdown()
    (tmp_path / "t-0" / "leader-epoch-checkpoint").write_text("not a checkpoint")
    again = manager(tmp_path, clock)
    assert again.get_log("t", 0).leader_epoch_cache.entries == [(1, 0), (4, 4), (6, 8)]
    again.shutdown()


def test_startup_logs_recovery_progress(
    tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    lm = manager(tmp_path, clock)
    write(lm, "big", 0, 30)  # several 800-byte segments
    write(lm, "small", 0, 1)
    write(lm, "small", 1, 1)
    for log in lm.all_logs():
        log.flush()
    lm.checkpoint()  # recovery points at the log ends...
    write(lm, "big", 0, 30)  # ...then more on "big" only, and a crash (no shutdown)
    big_segments = len(lm.get_log("big", 0).segments)
    caplog.set_level("INFO", logger="odradek.storage")
    again = manager(tmp_path, clock, progress_interval_s=0.0)
    lines = [r.getMessage() for r in caplog.records]
    assert (
        f"Attempting recovery of 3 logs from {tmp_path} since no clean shutdown file was found"
    ) in lines
    recovering = [
        line for line in lines
        if line.startswith("Recovering unflushed segment") and line.endswith("for big-0.")
    ]  # fmt: skip
    # Only what follows big-0's recovery point is read: the segments written after it.
    assert recovering
    assert len(recovering) < big_segments
    assert recovering[-1].endswith(f"{len(recovering) - 1}/{len(recovering)} recovered for big-0.")
    completed = [line for line in lines if line.startswith("Completed load of log")]
    log = again.get_log("big", 0)
    assert completed[0].startswith(
        f"Completed load of log big-0 with {len(log.segments)} segments, log start offset 0 and"
        f" log end offset {log.log_end_offset} in "
    )
    # Every log is read from its recovery point (the small ones: nothing past it).
    assert [line.split(" (")[-1] for line in completed] == [
        f"{n}/3 completed in {tmp_path})" for n in (1, 2, 3)
    ]
    # With a zero interval every log but the last gets a directory progress line.
    progress = [line for line in lines if line.startswith("Loaded ")]
    assert [p.split(" from ")[0] for p in progress] == [
        "Loaded 1/3 logs (33%)", "Loaded 2/3 logs (66%)"
    ]  # fmt: skip
    again.shutdown()

    caplog.clear()
    manager(tmp_path, clock).shutdown()  # clean: nothing is read, no per-log lines
    lines = [r.getMessage() for r in caplog.records]
    assert (
        f"Skipping recovery of 3 logs from {tmp_path} since clean shutdown file was found"
    ) in lines
    assert not [line for line in lines if line.startswith(("Recovering", "Completed", "Loaded "))]
