"""Many partitions: batched creation, cheap clean restarts, descriptors only while in use."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from odradek.records.batch import Record, build_batch
from odradek.storage.config import LogConfig
from odradek.storage.log import Log
from odradek.storage.log_manager import LogManager
from odradek.storage.partition_metadata import FILE_NAME, PartitionMetadataFile


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


class FsyncCounter:
    """Counts os.fsync calls (the real fsync still runs)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        real = os.fsync

        def counting(fd: int) -> None:
            self.count += 1
            real(fd)

        monkeypatch.setattr(os, "fsync", counting)


def manager(directory: Path) -> LogManager:
    lm = LogManager(directory, LogConfig())
    lm.startup()
    return lm


def batch(value: bytes = b"v") -> bytearray:
    return build_batch([Record(value=value)])


def test_create_logs_makes_every_partition_with_one_fsync_and_no_descriptor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lm = manager(tmp_path)
    topic_id = uuid.uuid4()
    fsyncs = FsyncCounter(monkeypatch)
    before = open_fds()
    logs = lm.create_logs([("t", i, None, topic_id) for i in range(200)])
    assert fsyncs.count == 1  # the data directory, once for the whole batch
    assert open_fds() <= before + 1  # new logs keep no descriptor open
    assert [(log.topic, log.partition) for log in logs] == [("t", i) for i in range(200)]
    for i in (0, 57, 199):
        directory = tmp_path / f"t-{i}"
        # Only the directory: the empty .log is made on first use, partition.metadata
        # by the flush thread (as Kafka's scheduler writes it).
        assert os.listdir(directory) == []
        assert logs[i].topic_id == topic_id
        assert lm.get_log("t", i) is logs[i]
    fsyncs.count = 0
    lm.run_flush()
    assert fsyncs.count == 0  # written, not synced: the log's first flush does that
    for i in (0, 57, 199):
        directory = tmp_path / f"t-{i}"
        assert os.listdir(directory) == [FILE_NAME]
        assert PartitionMetadataFile(directory).read() == topic_id
    # Asking again returns the same logs and writes nothing.
    fsyncs.count = 0
    assert lm.create_logs([("t", 3, None, topic_id)]) == [logs[3]]
    assert fsyncs.count == 0
    # A log created without its file makes it on first use.
    info = logs[5].append_as_leader(batch(b"first"))
    assert info.first_offset == 0
    assert logs[5].read(0, 1 << 20).read_bytes()
    assert "00000000000000000000.log" in os.listdir(tmp_path / "t-5")
    lm.shutdown()


def test_never_written_logs_restart_without_files_and_take_data_afterwards(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lm = manager(tmp_path)
    lm.create_logs([("t", i, None, None) for i in range(30)])
    lm.shutdown()
    for crash in (False, True):
        again = manager(tmp_path)
        assert again.had_clean_shutdown is not crash
        assert not any(name.endswith(".log") for name in os.listdir(tmp_path / "t-4"))
        log = again.get_log("t", 4)
        assert log is not None and log.log_end_offset == 0
        if crash:  # written after the unclean start, then crashed again: data survives
            log.append_as_leader(batch(b"late"))
            log.flush()
            del again
            reopened = manager(tmp_path).get_log("t", 4)
            assert reopened is not None and reopened.log_end_offset == 1
            assert b"late" in reopened.read(0, 1 << 20).read_bytes()
        else:
            fsyncs = FsyncCounter(monkeypatch)
            again.shutdown()  # idle: no per-log fsync
            assert fsyncs.count <= 8
            (tmp_path / ".kafka_cleanshutdown").unlink()  # the next start is a crash's
            monkeypatch.undo()


def test_first_flush_syncs_the_new_directory_and_idle_new_logs_cost_no_fsync_at_shutdown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lm = manager(tmp_path)
    logs = lm.create_logs([("t", i, None, uuid.uuid4()) for i in range(50)])
    fsyncs = FsyncCounter(monkeypatch)
    logs[0].flush()
    assert fsyncs.count == 0  # empty: nothing to keep yet
    logs[1].append_as_leader(batch())  # (writes its leader-epoch checkpoint, no fsync)
    assert fsyncs.count == 0
    logs[1].flush()
    # segment .log, partition.metadata, the leader-epoch checkpoint left unsynced by the
    # append (file and directory), and the partition directory
    assert fsyncs.count == 5
    fsyncs.count = 0
    lm.shutdown()
    # Two checkpoints and the clean-shutdown marker (each file + directory), and log 1's
    # producer snapshot; none of the 49 idle logs fsyncs or writes a snapshot.
    assert fsyncs.count <= 8
    assert not any(name.endswith(".snapshot") for name in os.listdir(tmp_path / "t-7"))


def test_clean_restart_reopens_every_log_with_its_topic_id_and_data(tmp_path: Path) -> None:
    lm = manager(tmp_path)
    topic_id = uuid.uuid4()
    logs = lm.create_logs([("t", i, None, topic_id) for i in range(100)])
    logs[42].append_as_leader(batch(b"kept"))
    lm.shutdown()

    again = LogManager(tmp_path, LogConfig())
    before = open_fds()
    again.startup()
    assert again.had_clean_shutdown
    assert len(again.all_logs()) == 100
    assert open_fds() <= before + 1  # opening reads no segment: descriptors stay closed
    reopened = again.get_log("t", 42)
    assert reopened is not None and reopened.log_end_offset == 1
    assert reopened.topic_id == topic_id
    assert b"kept" in reopened.read(0, 1 << 20).read_bytes()
    assert again.get_log("t", 99).log_end_offset == 0  # type: ignore[union-attr]
    again.shutdown()


def test_a_pending_partition_metadata_is_written_by_the_close(tmp_path: Path) -> None:
    lm = manager(tmp_path)
    topic_id = uuid.uuid4()
    lm.create_logs([("t", i, None, topic_id) for i in range(3)])
    lm.delete_log("t", 2)  # deleted first: nothing written for it
    lm.shutdown()  # before any flush job ran
    for i in (0, 1):
        assert PartitionMetadataFile(tmp_path / f"t-{i}").read() == topic_id
    (deleted,) = [p for p in tmp_path.iterdir() if p.name.startswith("t-2.")] or [None]
    assert deleted is None or FILE_NAME not in os.listdir(deleted)


def test_a_clean_restart_takes_topic_ids_from_the_marker_an_unclean_one_reads_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lm = manager(tmp_path)
    topic_id = uuid.uuid4()
    lm.create_logs([("t", i, None, topic_id) for i in range(20)])
    lm.create_logs([("untagged", 0, None, None)])
    lm.shutdown()
    reads = []
    real_read = PartitionMetadataFile.read

    def counting(self: PartitionMetadataFile) -> uuid.UUID | None:
        reads.append(self.path)
        return real_read(self)

    monkeypatch.setattr(PartitionMetadataFile, "read", counting)
    again = manager(tmp_path)
    assert again.had_clean_shutdown
    assert all(again.get_log("t", i).topic_id == topic_id for i in range(20))  # type: ignore[union-attr]
    assert reads == []
    assert again.get_log("untagged", 0).topic_id is None  # type: ignore[union-attr]
    assert len(reads) == 1  # no id recorded: the file is consulted
    # A crash: no marker, so every log reads its file again.
    del again
    reads.clear()
    third = manager(tmp_path)
    assert not third.had_clean_shutdown
    assert third.get_log("t", 3).topic_id == topic_id  # type: ignore[union-attr]
    assert len(reads) == 1
    third.shutdown()


def test_an_emptied_partition_metadata_reads_as_no_id_and_is_written_again(tmp_path: Path) -> None:
    # What a power cut can leave of a file written without fsync.
    lm = manager(tmp_path)
    (log,) = lm.create_logs([("t", 0, None, uuid.uuid4())])
    lm.shutdown()
    (tmp_path / "t-0" / FILE_NAME).write_bytes(b"")
    (tmp_path / ".kafka_cleanshutdown").unlink()  # or the marker's recorded id is taken
    again = manager(tmp_path)
    log = again.get_log("t", 0)
    assert log is not None and log.topic_id is None
    new_id = uuid.uuid4()
    log.assign_topic_id(new_id)
    assert PartitionMetadataFile(tmp_path / "t-0").read() == new_id
    again.shutdown()


def test_a_leftover_directory_is_opened_not_recreated(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig())
    log.append_as_leader(batch(b"old"))
    log.close()
    lm = LogManager(tmp_path, LogConfig())  # not started: the directory is not loaded
    (opened,) = lm.create_logs([("t", 0, None, None)])
    assert opened.log_end_offset == 1


def test_idle_logs_release_their_descriptors_and_reopen_on_use(tmp_path: Path) -> None:
    lm = manager(tmp_path)
    logs = lm.create_logs([("t", i, None, None) for i in range(3)])
    for log in logs:
        log.append_as_leader(batch())
        log.read(0, 1 << 20)
    assert all(segment.holds_handles for log in logs for segment in log.segments)
    # First look: each was used since the last look, nothing is released.
    assert [log.release_idle_handles() for log in logs] == [0, 0, 0]
    logs[0].append_as_leader(batch(b"busy"))  # used again: keeps its descriptors
    released = [log.release_idle_handles() for log in logs]
    assert released[0] == 0 and released[1] > 0 and released[2] > 0
    assert not logs[1].active_segment.holds_handles
    # Unsynced data was flushed before its descriptor went.
    assert logs[1].recovery_point == logs[1].log_end_offset == 1
    # Used again: reopened transparently.
    assert logs[1].append_as_leader(batch(b"again")).first_offset == 1
    assert b"again" in logs[1].read(0, 1 << 20).read_bytes()
    lm.shutdown()


def test_run_flush_releases_idle_descriptors_only_above_the_threshold(tmp_path: Path) -> None:
    lm = manager(tmp_path)
    logs = lm.create_logs([("t", i, None, None) for i in range(4)])
    for log in logs:
        log.append_as_leader(batch())
    lm.run_flush()
    lm.run_flush()
    assert all(log.active_segment.holds_handles for log in logs)  # threshold unset
    lm.release_idle_above = 2
    lm.run_flush()
    lm.run_flush()
    assert not any(log.active_segment.holds_handles for log in logs)
    lm.shutdown()
