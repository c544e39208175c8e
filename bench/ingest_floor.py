"""The least a Python server can spend ingesting 1 MiB Produce requests from one client.

``python bench/ingest_floor.py PORT DIR BATCH_OFFSET [--mode write|thread|splice]``
serves on 127.0.0.1:PORT until killed, one connection at a time. Every request frame holds
one record batch at ``BATCH_OFFSET`` (told by ``bench_ingest``, which built the frames):
no decoding. For every frame the server does only what a broker cannot skip, then writes
a ready-made Produce v9 answer with the request's correlation id:

* it reads the frame (``recv_into`` one reusable buffer, no allocation per frame),
* it checks the batch's CRC32C (the ``crc32c`` package; a mismatch is answered with
  CORRUPT_MESSAGE, so the client's checks would notice),
* it appends the batch to a file in DIR (a new file every GiB, as the broker's
  ``log.segment.bytes=1073741824`` in the bench), so the bytes land in the page cache.

The modes are three ways of paying for the page-cache write:

``write``
    ``os.write`` on the receiving thread (what the broker does by default).
``thread``
    the write of frame N runs on a second thread while frame N+1 is received (two
    buffers); frame N's answer is written once its write is done. What the broker's
    ``append.thread.min.bytes`` does, without the broker's other work.
``splice``
    the batch goes from the socket to the file through a pipe (``splice``), so it is
    never copied into user memory; the CRC is then read from the file's pages through a
    read-only ``mmap``, and a batch that fails it is cut off the file again.

``bench_ingest`` feeds this server the same frames, with the same client, as the broker:
the broker's ratio to raw loopback can then be read beside what the machine allows a
receiver that writes to a file.
"""

from __future__ import annotations

import argparse
import fcntl
import mmap
import os
import socket
import struct
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import crc32c

from odradek.protocol.produce_response import encode_produce_response

SEGMENT_BYTES = 1 << 30
CORRUPT_MESSAGE = 2
_SIZE = struct.Struct(">i")
_CRC = struct.Struct(">I")
# A v2 batch: baseOffset (8), batchLength (4), partitionLeaderEpoch (4), magic (1),
# crc (4), then the bytes the CRC covers.
_LENGTH_AT, _CRC_AT, _CRC_FROM = 8, 17, 21
F_SETPIPE_SZ = 1031


def _answer(error_code: int) -> bytes:
    partition = {"index": 0, "error_code": error_code, "base_offset": 0, "log_start_offset": 0}
    return encode_produce_response(0, 9, [("raw", [partition])]) or b""


_ANSWERS = {0: _answer(0), CORRUPT_MESSAGE: _answer(CORRUPT_MESSAGE)}


def _batch_size(frame: memoryview, batch_at: int) -> int:
    """The size of the batch at ``batch_at`` in ``frame``, from its batchLength."""
    return 12 + _SIZE.unpack_from(frame, batch_at + _LENGTH_AT)[0]


def _crc_ok(batch: memoryview) -> bool:
    return crc32c.crc32c(batch[_CRC_FROM:]) == _CRC.unpack_from(batch, _CRC_AT)[0]


def _reply(conn: socket.socket, frame: memoryview, crc_ok: bool) -> None:
    answer = bytearray(_ANSWERS[0 if crc_ok else CORRUPT_MESSAGE])
    answer[4:8] = frame[4:8]  # the correlation id (after the api key and version)
    conn.sendall(answer)


def _recv_exact(conn: socket.socket, view: memoryview) -> bool:
    got = 0
    while got < len(view):
        n = conn.recv_into(view[got:])
        if not n:
            return False
        got += n
    return True


class SegmentFiles:
    """Append-only files in ``directory``, a new one every ``SEGMENT_BYTES``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.fd = -1
        self.position = SEGMENT_BYTES

    def reserve(self, size: int) -> tuple[int, int]:
        """(fd, position) where the next ``size`` bytes go."""
        if self.position + size > SEGMENT_BYTES:
            if self.fd >= 0:
                os.close(self.fd)
            path = self.directory / f"{len(os.listdir(self.directory)):020d}.log"
            self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            self.position = 0
        position = self.position
        self.position += size
        return self.fd, position

    def undo(self, position: int) -> None:
        """Drop what was written from ``position`` on (a batch that failed its CRC)."""
        self.position = position
        os.ftruncate(self.fd, position)


def serve_write(conn: socket.socket, files: SegmentFiles, batch_at: int) -> None:
    buffer = bytearray(2 << 20)
    size_view = memoryview(bytearray(4))
    while _recv_exact(conn, size_view):
        (size,) = _SIZE.unpack(size_view)
        if size > len(buffer):
            buffer = bytearray(size)
        frame = memoryview(buffer)[:size]
        if not _recv_exact(conn, frame):
            return
        batch = frame[batch_at : batch_at + _batch_size(frame, batch_at)]
        ok = _crc_ok(batch)
        if ok:
            fd, position = files.reserve(len(batch))
            os.pwrite(fd, batch, position)
        _reply(conn, frame, ok)


def serve_thread(conn: socket.socket, files: SegmentFiles, batch_at: int) -> None:
    buffers = [bytearray(2 << 20), bytearray(2 << 20)]
    in_use: list[Future[None] | None] = [None, None]
    size_view = memoryview(bytearray(4))
    turn = 0
    # One writer thread: writes, and so answers, stay in the frames' order.
    with ThreadPoolExecutor(1, thread_name_prefix="floor-write") as writer:
        while _recv_exact(conn, size_view):
            (size,) = _SIZE.unpack(size_view)
            turn ^= 1
            previous = in_use[turn]
            if previous is not None:  # the buffer's last frame is written and answered
                previous.result()
            if size > len(buffers[turn]):
                buffers[turn] = bytearray(size)
            frame = memoryview(buffers[turn])[:size]
            if not _recv_exact(conn, frame):
                break
            batch = frame[batch_at : batch_at + _batch_size(frame, batch_at)]
            ok = _crc_ok(batch)
            fd, position = files.reserve(len(batch)) if ok else (-1, 0)
            in_use[turn] = writer.submit(_write_and_reply, conn, fd, batch, position, frame, ok)


def _write_and_reply(
    conn: socket.socket, fd: int, batch: memoryview, position: int, frame: memoryview, ok: bool
) -> None:
    if ok:
        os.pwrite(fd, batch, position)
    _reply(conn, frame, ok)


def serve_splice(conn: socket.socket, files: SegmentFiles, batch_at: int) -> None:
    """The batch's first 12 bytes (to learn its length) and the frame's other bytes are
    read into user memory; the rest of the batch is spliced from the socket to the file."""
    head = bytearray(batch_at + 12)
    size_view = memoryview(bytearray(4))
    pipe_read, pipe_write = os.pipe()
    fcntl.fcntl(pipe_write, F_SETPIPE_SZ, 1 << 20)
    try:
        while _recv_exact(conn, size_view):
            (size,) = _SIZE.unpack(size_view)
            frame = memoryview(head)
            if not _recv_exact(conn, frame):
                return
            batch_size = _batch_size(frame, batch_at)
            fd, position = files.reserve(batch_size)
            os.pwrite(fd, frame[batch_at:], position)
            moved = 12
            while moved < batch_size:
                n = os.splice(conn.fileno(), pipe_write, batch_size - moved)
                if not n:
                    return
                drained = 0
                while drained < n:
                    drained += os.splice(
                        pipe_read, fd, n - drained, offset_dst=position + moved + drained
                    )
                moved += n
            rest = size - batch_at - batch_size
            if rest and not _recv_exact(conn, memoryview(bytearray(rest))):
                return
            ok = _file_crc_ok(fd, position, batch_size)
            if not ok:
                files.undo(position)
            _reply(conn, frame, ok)
    finally:
        os.close(pipe_read)
        os.close(pipe_write)


def _file_crc_ok(fd: int, position: int, size: int) -> bool:
    start = position - position % mmap.ALLOCATIONGRANULARITY
    flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
    with mmap.mmap(fd, position + size - start, flags, mmap.PROT_READ, offset=start) as pages:
        view = memoryview(pages)
        try:
            return _crc_ok(view[position - start :])
        finally:
            view.release()


SERVERS = {"write": serve_write, "thread": serve_thread, "splice": serve_splice}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("port", type=int)
    parser.add_argument("directory", type=Path)
    parser.add_argument("batch_offset", type=int, help="where the batch starts in a frame")
    parser.add_argument("--mode", choices=sorted(SERVERS), default="write")
    args = parser.parse_args(argv)
    args.directory.mkdir(parents=True, exist_ok=True)
    serve = SERVERS[args.mode]
    with socket.create_server(("127.0.0.1", args.port)) as server:
        while True:  # one connection at a time, each into new files
            conn, _ = server.accept()
            with conn:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                serve(conn, SegmentFiles(args.directory), args.batch_offset)


if __name__ == "__main__":
    sys.exit(main())
