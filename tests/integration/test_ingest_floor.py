"""bench/ingest_floor.py, the floor beside the broker's 1 MiB ingest figure, in its three
modes: it answers every request in order, refuses a batch whose CRC is wrong, and its
file holds exactly the batches it accepted. A floor that skipped the CRC or the write
would flatter nothing but itself, yet the bench reads the broker against it."""

from __future__ import annotations

import os
import random
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.broker import free_port, wait_for_port
from tests.helpers.raw import RawClient

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

from bench_ingest import produce_error_code, produce_frame_and_batch_offset  # noqa: E402


def _batch(frame: bytes, offset: int) -> bytes:
    start = 4 + offset
    (length,) = struct.unpack_from(">i", frame, start + 8)
    return frame[start : start + 12 + length]


def _read_answer(client: RawClient) -> bytes:
    (size,) = struct.unpack(">i", client.read(4))
    return client.read(size)


@pytest.mark.parametrize("mode", ["write", "thread", "splice"])
def test_floor_checks_the_crc_and_writes_what_it_accepts(mode: str, tmp_path: Path) -> None:
    rng = random.Random(16)
    frames = []
    for _ in range(4):
        frame, offset = produce_frame_and_batch_offset(
            "raw", [rng.randbytes(70_000) for _ in range(3)]
        )
        frames.append((bytearray(frame), offset))
    frames[1][0][-10] ^= 0xFF  # a byte of the last record's value: the CRC no longer holds
    port = free_port()
    data = tmp_path / "data"
    offset = frames[0][1]
    assert all(o == offset for _, o in frames)
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "bench" / "ingest_floor.py"), str(port), str(data),
         str(offset), "--mode", mode],
        env={**os.environ, "PYTHONPATH": str(REPO / "src")},
    )  # fmt: skip
    try:
        wait_for_port(port, 30, proc)
        client = RawClient(port)
        with client.sock:
            for frame, _ in frames:  # pipelined: every frame before any answer
                client.sock.sendall(frame)
            codes = [produce_error_code(bytearray(_read_answer(client))) for _ in frames]
    finally:
        proc.terminate()
        proc.wait(10)
    assert codes == [0, 2, 0, 0]  # CORRUPT_MESSAGE for the damaged batch only
    (segment,) = data.iterdir()
    accepted = [_batch(bytes(f), o) for i, (f, o) in enumerate(frames) if i != 1]
    assert segment.read_bytes() == b"".join(accepted)
