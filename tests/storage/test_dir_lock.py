"""The log directory's ``.lock``: one holder at a time, released on release or death."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from odradek.storage.dir_lock import LOCK_FILE, DirLock, LogDirInUseError


def test_second_lock_in_same_process_is_refused(tmp_path: Path) -> None:
    with DirLock.acquire(tmp_path / "d") as first:
        assert first.held and (tmp_path / "d" / LOCK_FILE).exists()
        with pytest.raises(LogDirInUseError, match=r"\.lock in .*/d\. A Kafka instance"):
            DirLock.acquire(tmp_path / "d")
    # Released: the next broker may take it.
    DirLock.acquire(tmp_path / "d").release()


def test_lock_held_by_another_process_is_refused_until_it_exits(tmp_path: Path) -> None:
    directory = tmp_path / "d"
    holder = subprocess.Popen(
        [
            sys.executable, "-c",
            "import sys, time\n"
            "from odradek.storage.dir_lock import DirLock\n"
            f"DirLock.acquire({str(directory)!r}); print('locked', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with pytest.raises(LogDirInUseError, match=str(directory)):
            DirLock.acquire(directory)
    finally:
        holder.kill()
        holder.wait(10)
    # The kernel dropped the dead process's lock: no stale lock to clean up by hand.
    DirLock.acquire(directory).release()


def test_release_is_idempotent(tmp_path: Path) -> None:
    lock = DirLock.acquire(tmp_path)
    lock.release()
    lock.release()
    assert not lock.held
