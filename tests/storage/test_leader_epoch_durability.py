"""When the leader-epoch checkpoint is fsynced, and what recovery does when it was not.

The append paths (leader and follower) record a new epoch in memory only; the log's flush
writes and syncs the checkpoint before it advances the recovery point, and close before
a clean shutdown. After a crash the file may be old, or after a power cut in the middle
of a write empty, torn or missing: an unclean open rebuilds the entries from the
batches' leader epochs.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from odradek.records.header import iter_headers
from odradek.storage.config import LogConfig
from odradek.storage.leader_epoch import CHECKPOINT_FILE_NAME, LeaderEpochFileCache
from odradek.storage.log import Log
from tests.storage.conftest import FakeClock, make_batch

CONFIG = LogConfig(segment_bytes=1200, index_interval_bytes=150, retention_ms=-1)


class FsyncRecorder:
    """Records the file each os.fsync is called on, and the log's recovery point then."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, log: Log | None = None) -> None:
        self.calls: list[tuple[str, int | None]] = []
        self._log = log
        real = os.fsync

        def fsync(fd: int) -> None:
            name = os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
            point = self._log.recovery_point if self._log is not None else None
            self.calls.append((name, point))
            real(fd)

        monkeypatch.setattr(os, "fsync", fsync)

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def checkpoint_syncs(self) -> list[tuple[str, int | None]]:
        return [c for c in self.calls if c[0].startswith(CHECKPOINT_FILE_NAME)]


def open_log(directory: Path, **kwargs: object) -> Log:
    return Log.open(directory, CONFIG, clock=FakeClock(), **kwargs)


def on_disk(directory: Path) -> str:
    return (directory / CHECKPOINT_FILE_NAME).read_text()


def run_during_checkpoint_fsync(monkeypatch: pytest.MonkeyPatch, action: Callable[[], object]
                                ) -> list[bool]:  # fmt: skip
    """Patch os.fsync: the first fsync of a checkpoint file runs ``action`` in another
    thread (as the event loop would) and records whether it finished meanwhile."""
    real = os.fsync
    during: list[bool] = []

    def fsync(fd: int) -> None:
        name = os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
        if not during and name.startswith(CHECKPOINT_FILE_NAME):
            worker = threading.Thread(target=action)
            worker.start()
            worker.join(timeout=5)
            during.append(not worker.is_alive())
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return during


def test_leader_append_of_a_new_epoch_does_not_fsync_and_flush_syncs_it_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory)
    log.append_as_leader(make_batch([b"a", b"b"]), leader_epoch=0)
    log.flush()
    assert log.recovery_point == 2
    fsyncs = FsyncRecorder(monkeypatch, log)
    info = log.append_as_leader(make_batch([b"c"]), leader_epoch=3)  # a leader change
    assert fsyncs.calls == []
    assert log.leader_epoch_cache.entries == [(0, 0), (3, info.first_offset)]
    assert on_disk(directory) == "0\n1\n0 0\n"  # in memory only until the flush
    assert log.leader_epoch_cache.unsynced
    log.flush()
    # The checkpoint (its .tmp and the directory) is fsynced before the recovery point
    # moves past the epoch-3 batch.
    assert fsyncs.checkpoint_syncs() == [(CHECKPOINT_FILE_NAME + ".tmp", 2)]
    assert "t-0" in fsyncs.names()
    assert log.recovery_point == 3
    assert not log.leader_epoch_cache.unsynced
    assert on_disk(directory) == "0\n2\n0 0\n3 2\n"
    fsyncs.calls.clear()
    log.append_as_leader(make_batch([b"d"]), leader_epoch=3)  # same epoch: no rewrite
    log.flush()
    assert fsyncs.checkpoint_syncs() == []


def test_the_flush_job_writes_new_entries_without_fsync_between_flushes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory)
    log.append_as_leader(make_batch([b"a"]), leader_epoch=0)
    log.flush()
    log.append_as_leader(make_batch([b"b"]), leader_epoch=2)
    fsyncs = FsyncRecorder(monkeypatch, log)
    assert not log.maybe_flush()  # flush.ms / flush.messages not due: no flush
    assert on_disk(directory) == "0\n2\n0 0\n2 1\n"
    assert fsyncs.calls == [] and log.recovery_point == 1
    assert log.leader_epoch_cache.unsynced  # written, not synced: the flush still syncs
    (directory / CHECKPOINT_FILE_NAME).write_text("0\n0\n")
    assert not log.maybe_flush()
    assert on_disk(directory) == "0\n0\n"  # nothing new since: not written again
    log.flush()
    assert [name for name, _ in fsyncs.checkpoint_syncs()] == [CHECKPOINT_FILE_NAME + ".tmp"]
    assert on_disk(directory) == "0\n2\n0 0\n2 1\n"


def test_follower_append_of_a_new_epoch_does_not_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    leader = open_log(tmp_path / "leader-0")
    leader.append_as_leader(make_batch([b"a"]), leader_epoch=1)
    leader.append_as_leader(make_batch([b"b", b"c"]), leader_epoch=4)
    fetched = leader.read(0, 1 << 20).read_bytes()
    follower = open_log(tmp_path / "follower-0")
    fsyncs = FsyncRecorder(monkeypatch)
    follower.append_as_follower(fetched)
    assert fsyncs.calls == []
    assert follower.leader_epoch_cache.entries == [(1, 0), (4, 1)]
    follower.close()  # a clean shutdown: close syncs what the appends left unsynced
    assert [name for name, _ in fsyncs.checkpoint_syncs()] == [CHECKPOINT_FILE_NAME + ".tmp"]


def test_entries_of_both_append_paths_survive_a_crash_after_the_flush(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Log.flush is what makes the appends' entries durable (the cache has no other
    flushing method): after it, a crash loses none and recovery reads them from the file."""
    leader = open_log(tmp_path / "leader-0")
    leader.append_as_leader(make_batch([b"a"]), leader_epoch=1)
    leader.append_as_leader(make_batch([b"b", b"c"]), leader_epoch=4)
    leader.flush()
    follower = open_log(tmp_path / "follower-0")
    follower.append_as_follower(leader.read(0, 1 << 20).read_bytes())
    follower.flush()
    for log, name in ((leader, "leader-0"), (follower, "follower-0")):
        assert on_disk(tmp_path / name) == "0\n2\n1 0\n4 1\n"
        # A crash: never closed; the recovery point checkpoint says what the flush reached.
        with caplog.at_level(logging.WARNING, logger="odradek.storage.log"):
            reopened = open_log(tmp_path / name, recovery_point=log.recovery_point)
        assert reopened.leader_epoch_cache.entries == [(1, 0), (4, 1)]
        assert "stale" not in caplog.text  # read from the file, not rebuilt


def test_truncation_still_fsyncs_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(make_batch([b"a"]), leader_epoch=1)
    log.append_as_leader(make_batch([b"b"]), leader_epoch=2)
    fsyncs = FsyncRecorder(monkeypatch)
    log.truncate_to(1)
    assert [name for name, _ in fsyncs.checkpoint_syncs()] == [CHECKPOINT_FILE_NAME + ".tmp"]
    assert on_disk(tmp_path / "t-0") == "0\n1\n1 0\n"
    assert not log.leader_epoch_cache.unsynced


def test_empty_log_close_costs_no_checkpoint_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log(tmp_path / "t-0")
    log.leader_epoch_cache.assign(5, 0, sync=False)  # a become-leader of an empty log
    fsyncs = FsyncRecorder(monkeypatch)
    log.flush()
    log.close()
    assert fsyncs.checkpoint_syncs() == []
    assert on_disk(tmp_path / "t-0") == "0\n1\n5 0\n"  # written, kept over a restart


def build_epochs(directory: Path) -> tuple[Log, int]:
    """A log over several segments and leader changes; returns it and its flushed point."""
    log = open_log(directory)
    for epoch, count in ((0, 6), (2, 5), (3, 1), (7, 6)):
        for i in range(count):
            log.append_as_leader(make_batch([b"e%d-%d" % (epoch, i) * 20] * (1 + i % 2)),
                                 leader_epoch=epoch)  # fmt: skip
    log.flush()
    flushed = log.recovery_point
    # Unflushed tail: one more leader change after the last flush.
    for i in range(3):
        log.append_as_leader(make_batch([b"tail-%d" % i * 20]), leader_epoch=9)
    assert len(list(directory.glob("*.log"))) > 2
    return log, flushed


def answers(log: Log) -> list[tuple[int, int]]:
    leo = log.log_end_offset
    return [log.leader_epoch_cache.end_offset_for(e, leo) for e in range(-1, 12)]


@pytest.mark.parametrize(
    "damage", ["empty", "missing", "older", "torn", "kept", "nul"]
)
def test_power_cut_with_an_unsynced_checkpoint_rebuilds_epochs_from_batches(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    directory = tmp_path / "t-0"
    log, flushed = build_epochs(directory)
    expected_entries = log.leader_epoch_cache.entries
    expected_answers = answers(log)
    leo = log.log_end_offset
    assert [e for e, _ in expected_entries] == [0, 2, 3, 7, 9]
    path = directory / CHECKPOINT_FILE_NAME
    # What a power cut may leave of a file replaced without fsync (rename on disk, data
    # not; rename not on disk; half written), or nothing lost at all (a process crash).
    if damage == "empty":
        path.write_bytes(b"")
    elif damage == "missing":
        path.unlink()
    elif damage == "older":
        path.write_text("0\n1\n0 0\n")
    elif damage == "torn":
        path.write_bytes(path.read_bytes()[:9])
    elif damage == "nul":
        path.write_bytes(b"\0" * 24)
    # A crash: the first Log is never closed, the recovery point is the last flushed one.
    with caplog.at_level(logging.WARNING, logger="odradek.storage.log_loader"):
        recovered = open_log(directory, recovery_point=flushed)
    rebuilt = "leader epoch checkpoint is stale" in caplog.text
    assert rebuilt == (damage in ("empty", "missing", "older"))  # torn/nul: corrupt, full
    assert recovered.log_end_offset == leo
    assert recovered.leader_epoch_cache.entries == expected_entries
    assert answers(recovered) == expected_answers
    batches = list(iter_headers(recovered.read(0, 1 << 20).read_bytes()))
    for _, header in batches:
        assert recovered.leader_epoch_cache.epoch_for_offset(header.base_offset) == (
            header.partition_leader_epoch
        )
    del log


def test_stale_checkpoint_below_a_later_log_start_is_rebuilt_and_cut(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log, flushed = build_epochs(directory)
    start = dict(log.leader_epoch_cache.entries)[2] + 2  # inside epoch 2
    log.maybe_increment_log_start_offset(start)  # DeleteRecords (in memory only)
    expected = log.leader_epoch_cache.entries
    assert expected[0] == (2, start)
    (directory / CHECKPOINT_FILE_NAME).write_bytes(b"")
    recovered = open_log(directory, recovery_point=flushed, log_start_offset=start)
    assert recovered.leader_epoch_cache.entries == expected
    del log


def test_a_rebuild_is_written_with_fsync_and_a_clean_reopen_reads_it(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log, flushed = build_epochs(directory)
    expected = log.leader_epoch_cache.entries
    (directory / CHECKPOINT_FILE_NAME).write_bytes(b"")
    recovered = open_log(directory, recovery_point=flushed)
    recovered.close()
    again = open_log(directory, recovery_point=recovered.recovery_point, clean_shutdown=True,
                     segment_sizes=recovered.segment_sizes())  # fmt: skip
    assert again.leader_epoch_cache.entries == expected
    del log


def test_sync_fsyncs_outside_the_lock_appends_take(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An append recording an epoch while the flush thread fsyncs the checkpoint does not
    wait for the disk, and its entry is not lost to the sync that was under way."""
    cache = LeaderEpochFileCache(tmp_path / CHECKPOINT_FILE_NAME)
    cache.assign(1, 0, sync=False)
    during = run_during_checkpoint_fsync(monkeypatch, lambda: cache.assign(2, 10, sync=False))
    assert cache.sync()
    assert during == [True]  # the assign finished while the sync was in its fsync
    assert cache.entries == [(1, 0), (2, 10)]
    assert cache.unsynced  # the file holds the copy taken before the assign
    assert (tmp_path / CHECKPOINT_FILE_NAME).read_text() == "0\n1\n1 0\n"
    assert cache.sync()
    assert not cache.unsynced
    assert (tmp_path / CHECKPOINT_FILE_NAME).read_text() == "0\n2\n1 0\n2 10\n"


def test_delete_records_fsyncs_the_cut_checkpoint_off_the_logs_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DeleteRecords runs on the event loop under the log's lock: the epoch cache is cut
    there in memory, and the flush job writes and fsyncs the file with that lock free."""
    directory = tmp_path / "t-0"
    log, _ = build_epochs(directory)
    log.flush()  # nothing left to flush: the flush job's next run is an idle one
    before = on_disk(directory)
    start = dict(log.leader_epoch_cache.entries)[2] + 2  # inside epoch 2

    def take_the_lock() -> None:  # as an append on the event loop would
        with log.lock:
            pass

    lock_free = run_during_checkpoint_fsync(monkeypatch, take_the_lock)
    log.maybe_increment_log_start_offset(start)
    assert lock_free == []  # no checkpoint fsync in the request's path
    expected = log.leader_epoch_cache.entries
    assert expected[0] == (2, start)
    assert on_disk(directory) == before
    assert log.leader_epoch_cache.truncation_unsynced
    assert not log.maybe_flush()  # the flush job: idle as to data, it syncs the cut
    assert lock_free == [True]
    assert not log.leader_epoch_cache.truncation_unsynced
    lines = [f"{epoch} {offset}" for epoch, offset in expected]
    assert on_disk(directory) == "\n".join(["0", str(len(expected)), *lines]) + "\n"


def test_truncate_from_start_in_memory_does_not_wait_for_a_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A DeleteRecords while the flush thread fsyncs the checkpoint returns at once; the
    cut is still to be synced after that sync, which wrote the copy taken before it."""
    cache = LeaderEpochFileCache(tmp_path / CHECKPOINT_FILE_NAME)
    cache.assign(1, 0, sync=False)
    cache.assign(2, 10, sync=False)
    during = run_during_checkpoint_fsync(
        monkeypatch, lambda: cache.truncate_from_start(12, sync=False)
    )
    assert cache.sync()
    assert during == [True]
    assert cache.entries == [(2, 12)]
    assert cache.truncation_unsynced
    assert on_disk(tmp_path) == "0\n2\n1 0\n2 10\n"
    assert cache.sync()
    assert not cache.truncation_unsynced
    assert on_disk(tmp_path) == "0\n1\n2 12\n"


@pytest.mark.parametrize("flush_job_ran", [False, True])
def test_a_crash_after_delete_records_reopens_with_its_start_and_valid_epochs(
    tmp_path: Path, flush_job_ran: bool
) -> None:
    directory = tmp_path / "t-0"
    log, _ = build_epochs(directory)
    log.flush()
    start = dict(log.leader_epoch_cache.entries)[3] + 1  # inside epoch 3
    log.maybe_increment_log_start_offset(start)
    expected = log.leader_epoch_cache.entries
    expected_answers = answers(log)
    if flush_job_ran:
        log.maybe_flush()
        assert not log.leader_epoch_cache.truncation_unsynced
    # A crash: never closed; the log start offset checkpoint holds the new start.
    reopened = open_log(directory, recovery_point=log.recovery_point, log_start_offset=start)
    assert reopened.log_start_offset == start
    assert reopened.leader_epoch_cache.entries == expected
    assert answers(reopened) == expected_answers
    for _, header in iter_headers(reopened.read(start, 1 << 20).read_bytes()):
        assert reopened.leader_epoch_cache.epoch_for_offset(header.base_offset) == (
            header.partition_leader_epoch
        )
    reopened.close()  # a clean shutdown then writes the cut for good
    assert on_disk(directory).splitlines()[2] == f"{expected[0][0]} {start}"
    del log


def test_delete_records_keeps_a_new_leaders_entry_at_the_log_end(tmp_path: Path) -> None:
    """Moving the log start offset cuts the cache from the start only (Kafka's
    maybeIncrementLogStartOffset): a become-leader's entry at the log end stays."""
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(make_batch([b"a", b"b"]), leader_epoch=1)
    log.leader_epoch_cache.assign(4, log.log_end_offset, sync=False)  # became leader
    log.maybe_increment_log_start_offset(1)
    assert log.leader_epoch_cache.entries == [(1, 1), (4, 2)]
