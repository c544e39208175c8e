"""``replication-offset-checkpoint``: high watermarks written in Kafka's format and read
back by the next replica manager on the same log directory, bounded by the log."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from odradek.broker.replica_manager import NONE, ReplicaManager
from odradek.storage.config import LogConfig
from odradek.storage.log_manager import LogManager
from tests.storage.conftest import make_batch

CONFIG = LogConfig()


def open_replicas(data_dir: Path) -> tuple[LogManager, ReplicaManager]:
    logs = LogManager(data_dir, CONFIG)
    logs.startup()
    return logs, ReplicaManager(1, logs)


def close(logs: LogManager, replicas: ReplicaManager) -> None:
    replicas.checkpoint_high_watermarks()
    logs.shutdown()


def lead_with_unreplicated_tail(replicas: ReplicaManager) -> None:
    """t-0 led by 1 with ISR {1, 2}: 3 records replicated to 2, then 2 more that are not."""
    replicas.become_leader("t", 0, CONFIG, leader_epoch=0, isr=[1, 2], replicas=[1, 2])
    assert replicas.append("t", 0, make_batch([b"a"] * 3), required_acks=1).error_code == NONE
    assert replicas.record_follower_fetch("t", 0, 2, 3, 0) == NONE
    assert replicas.append("t", 0, make_batch([b"b"] * 2), required_acks=1).error_code == NONE
    partition = replicas.partition("t", 0)
    assert partition is not None and partition.high_watermark == 3
    assert partition.log.log_end_offset == 5


def test_file_is_kafkas_format(tmp_path: Path) -> None:
    logs, replicas = open_replicas(tmp_path)
    lead_with_unreplicated_tail(replicas)
    replicas.become_follower("u", 1, CONFIG, leader=2, leader_epoch=0, replicas=[1, 2])
    close(logs, replicas)
    text = (tmp_path / "replication-offset-checkpoint").read_text()
    assert text == "0\n2\nt 0 3\nu 1 0\n"


def test_a_restarted_leader_keeps_its_high_watermark_not_its_log_end(tmp_path: Path) -> None:
    logs, replicas = open_replicas(tmp_path)
    lead_with_unreplicated_tail(replicas)
    close(logs, replicas)

    logs, replicas = open_replicas(tmp_path)
    # Its follower has not fetched since the restart: the two unreplicated records stay
    # invisible to consumers (an HW of 5 would show them).
    partition = replicas.become_leader("t", 0, CONFIG, leader_epoch=1, isr=[1, 2], replicas=[1, 2])
    assert partition.high_watermark == 3
    assert partition.log.log_end_offset == 5
    assert replicas.record_follower_fetch("t", 0, 2, 5, 1) == NONE
    assert partition.high_watermark == 5
    close(logs, replicas)


def test_a_restarted_follower_starts_from_its_checkpoint(tmp_path: Path) -> None:
    logs, replicas = open_replicas(tmp_path)
    lead_with_unreplicated_tail(replicas)
    close(logs, replicas)
    logs, replicas = open_replicas(tmp_path)
    partition = replicas.become_follower("t", 0, CONFIG, leader=2, leader_epoch=1, replicas=[1, 2])
    assert partition.high_watermark == 3
    close(logs, replicas)


def test_high_watermark_is_bounded_by_the_log(tmp_path: Path) -> None:
    logs, replicas = open_replicas(tmp_path)
    lead_with_unreplicated_tail(replicas)
    close(logs, replicas)
    # A checkpoint beyond the log end (the log lost its tail): capped at the log end.
    (tmp_path / "replication-offset-checkpoint").write_text("0\n1\nt 0 99\n")
    logs, replicas = open_replicas(tmp_path)
    partition = replicas.become_follower("t", 0, CONFIG, leader=2, leader_epoch=1, replicas=[1, 2])
    assert partition.high_watermark == 5
    close(logs, replicas)


def test_logs_not_hosted_yet_keep_their_entry(tmp_path: Path) -> None:
    logs, replicas = open_replicas(tmp_path)
    lead_with_unreplicated_tail(replicas)
    close(logs, replicas)
    # The periodic checkpoint runs before the controller's LeaderAndIsr arrived.
    logs, replicas = open_replicas(tmp_path)
    replicas.checkpoint_high_watermarks()
    assert (tmp_path / "replication-offset-checkpoint").read_text() == "0\n1\nt 0 3\n"
    # A deleted partition's entry goes.
    replicas.become_leader("t", 0, CONFIG, leader_epoch=1, isr=[1], replicas=[1])
    replicas.remove_partition("t", 0, delete=True)
    replicas.checkpoint_high_watermarks()
    assert (tmp_path / "replication-offset-checkpoint").read_text() == "0\n0\n"
    logs.shutdown()


def test_a_corrupt_checkpoint_starts_from_zero(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    logs, replicas = open_replicas(tmp_path)
    lead_with_unreplicated_tail(replicas)
    close(logs, replicas)
    (tmp_path / "replication-offset-checkpoint").write_text("0\n3\nt 0 3\n")
    with caplog.at_level(logging.ERROR):
        logs, replicas = open_replicas(tmp_path)
    assert "replication-offset-checkpoint" in caplog.text
    partition = replicas.become_follower("t", 0, CONFIG, leader=2, leader_epoch=1, replicas=[1, 2])
    assert partition.high_watermark == 0
    close(logs, replicas)


def test_concurrent_checkpoints_do_not_race_on_the_temporary_file(tmp_path: Path) -> None:
    # The periodic job may still be writing when the shutdown writes its own: both use
    # one temporary name, so unserialised one renamed the other's away (FileNotFoundError,
    # which took the log directory offline and made the clean stop an unclean one).
    import threading

    logs, replicas = open_replicas(tmp_path)
    for i in range(50):
        replicas.become_leader("t", i, CONFIG, leader_epoch=0)
    errors: list[BaseException] = []

    def write_many() -> None:
        try:
            for _ in range(100):
                replicas._hw_checkpoint.write({("t", i): i for i in range(50)})
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=write_many) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert replicas._hw_checkpoint.read()[("t", 7)] == 7
    close(logs, replicas)


def test_removing_a_partition_gives_frozen_objects_back_to_the_collector(tmp_path: Path) -> None:
    import gc

    logs, replicas = open_replicas(tmp_path)
    replicas.become_leader("t", 0, CONFIG, leader_epoch=0)
    gc.freeze()  # what a broker hosting 1,000+ partitions does after start-up
    try:
        assert gc.get_freeze_count() > 0
        replicas.remove_partition("t", 0, delete=True)
        assert gc.get_freeze_count() == 0
    finally:
        gc.unfreeze()
    close(logs, replicas)
