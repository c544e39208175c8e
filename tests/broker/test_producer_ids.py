from pathlib import Path

from odradek.broker.producer_ids import BLOCK_SIZE, FILE_NAME, MAX_EPOCH, ProducerIdManager


def test_ids_are_unique_across_restarts_and_crashes(tmp_path: Path) -> None:
    first = ProducerIdManager(tmp_path)
    handed_out = [first.next_id() for _ in range(BLOCK_SIZE + 5)]
    # A "crash": a new manager on the same directory never repeats an id.
    second = ProducerIdManager(tmp_path)
    later = [second.next_id() for _ in range(10)]
    assert len(set(handed_out + later)) == len(handed_out) + len(later)
    assert min(later) > max(handed_out)


def test_epoch_bump_and_overflow(tmp_path: Path) -> None:
    manager = ProducerIdManager(tmp_path)
    pid, epoch = manager.init_producer(-1, -1)
    assert epoch == 0
    assert manager.init_producer(pid, epoch) == (pid, 1)
    new_pid, new_epoch = manager.init_producer(pid, MAX_EPOCH)
    assert new_pid != pid and new_epoch == 0


def test_unreadable_block_file_skips_far_ahead(tmp_path: Path) -> None:
    (tmp_path / FILE_NAME).write_text("garbage")
    assert ProducerIdManager(tmp_path).next_id() >= 1 << 40
