"""Small file systems for full-disk tests: a tmpfs the test mounts (root only) and a
helper that fills it."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


class TmpfsUnavailable(RuntimeError):
    """A tmpfs cannot be mounted here (not root, or mount refused); the message says why."""


def mount_tmpfs(mount_point: Path, size: str) -> Path:
    """Mount a tmpfs of ``size`` at ``mount_point`` (created); undo with :func:`unmount`.
    Raises :class:`TmpfsUnavailable` where mounting is not allowed."""
    mount_point.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        raise TmpfsUnavailable("mounting a tmpfs needs root")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount_point)],
        capture_output=True, text=True,
    )  # fmt: skip
    if mounted.returncode != 0:
        raise TmpfsUnavailable(f"cannot mount a tmpfs: {mounted.stderr.strip()}")
    return mount_point


def unmount(mount_point: Path) -> None:
    """Unmount it; lazily if something still holds it (a broker that would not die)."""
    if subprocess.run(["umount", str(mount_point)], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", str(mount_point)], capture_output=True)


@contextlib.contextmanager
def small_tmpfs(mount_point: Path, size: str = "2m") -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``mount_point`` (created) for the block; the test
    is skipped where mounting is not allowed."""
    try:
        mount_tmpfs(mount_point, size)
    except TmpfsUnavailable as exc:
        pytest.skip(str(exc))
    try:
        yield mount_point
    finally:
        unmount(mount_point)


def fill(path: Path) -> None:
    """Write ``path`` until the file system is full."""
    chunk = b"\xff" * 65536
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while True:
            try:
                os.write(fd, chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                chunk = chunk[: len(chunk) // 2]
                if not chunk:
                    return
    finally:
        os.close(fd)
