"""No single request or client stalls the broker for the others.

A well-behaved client (``Pinger``: one ApiVersions request at a time) keeps getting
answers within a bounded time while hostile peers do their worst: requests listing
hundreds of thousands of partitions or topics, 200 connections of slow-loris partial
frames, huge declared frames and floods of tiny requests. The bounds are generous (a
loaded 2-core machine); the measured figures are printed. Before the network layer
yielded and decoded large requests off the event loop, each of these stalled every
client for seconds.
"""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.helpers.broker import BrokerProcess
from tests.helpers.hostile import (
    Pinger,
    delete_topics_frame,
    fetch_frame,
    list_offsets_frame,
    offset_commit_frame,
    percentile,
    produce_frame,
    read_response,
    rss_mb,
)

pytestmark = pytest.mark.integration

ENTRIES = 400_000
# Generous bounds for a 2-core machine shared with other work (the figures measured are
# printed; before the fix the same load gave a p99 of seconds).
MAX_STALL_S = 2.0
P99_S = 1.0
RSS_GROWTH_MB = 700


@pytest.fixture
def pinger(broker: BrokerProcess) -> Iterator[Pinger]:
    client = Pinger(broker.port)
    client.sample(0.2)  # warm up
    yield client
    client.close()


def _while_hostile(
    broker: BrokerProcess, pinger: Pinger, frame: bytes
) -> tuple[list[float], float, bytes]:
    """Send ``frame`` on its own connection; time the pinger until it is answered.
    Returns the round trips, the broker's peak RSS growth in MiB, and the answer."""
    assert broker.proc is not None
    pid = broker.proc.pid
    before = rss_mb(pid)
    answer: list[bytes] = []
    failure: list[BaseException] = []

    def hostile() -> None:
        try:
            with socket.create_connection(("127.0.0.1", broker.port), timeout=240) as sock:
                sock.sendall(frame)
                answer.append(read_response(sock))
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=hostile, daemon=True)
    thread.start()
    times: list[float] = []
    peak = before
    deadline = time.monotonic() + 240
    while thread.is_alive() and time.monotonic() < deadline:
        times.append(pinger.round_trip())
        peak = max(peak, rss_mb(pid))
        time.sleep(0.01)
    thread.join(5)
    assert not failure, failure
    assert answer, "the hostile request got no answer"
    return times, peak - before, answer[0]


@pytest.mark.parametrize(
    ("name", "build"),
    [
        ("produce", lambda: produce_frame(ENTRIES)),
        ("delete_topics", lambda: delete_topics_frame(ENTRIES)),
        ("list_offsets", lambda: list_offsets_frame(ENTRIES)),
        ("fetch", lambda: fetch_frame(ENTRIES)),
        ("offset_commit", lambda: offset_commit_frame(ENTRIES)),
    ],
)
def test_a_huge_request_does_not_stall_other_clients(
    broker: BrokerProcess, pinger: Pinger, name: str, build: Callable[[], bytes]
) -> None:
    frame = build()
    times, growth, answer = _while_hostile(broker, pinger, frame)
    worst, p99 = max(times), percentile(times, 0.99)
    print(
        f"{name} x{ENTRIES} ({len(frame) / 1e6:.1f} MB): {len(times)} round trips meanwhile, "
        f"p50 {percentile(times, 0.5) * 1e3:.1f} ms, p99 {p99 * 1e3:.1f} ms, "
        f"max {worst * 1e3:.0f} ms; RSS +{growth:.0f} MiB"
    )
    assert len(answer) > ENTRIES  # answered in full: one entry per partition or topic
    assert worst < MAX_STALL_S
    assert growth < RSS_GROWTH_MB
    assert broker.is_running()


def test_two_hundred_hostile_connections_do_not_slow_a_normal_client(
    broker: BrokerProcess, pinger: Pinger
) -> None:
    alone = pinger.sample(1.0)
    load = subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.hostile", str(broker.port), "200", "6"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        assert load.stdout is not None
        assert load.stdout.readline().strip() == "ready", load.stderr.read() if load.stderr else ""
        loaded = pinger.sample(4.0)
        out, err = load.communicate(timeout=60)
    finally:
        if load.poll() is None:
            load.kill()
            load.wait(10)
    floods = int(out.split()[-1])
    print(
        f"normal client alone: p50 {percentile(alone, 0.5) * 1e3:.2f} ms, "
        f"p99 {percentile(alone, 0.99) * 1e3:.2f} ms; with 200 hostile connections: "
        f"p50 {percentile(loaded, 0.5) * 1e3:.2f} ms, p99 {percentile(loaded, 0.99) * 1e3:.2f} ms "
        f"({floods} flood requests answered meanwhile)"
    )
    assert floods > 0, err  # the floods were served too, not just refused
    assert percentile(loaded, 0.99) < P99_S
    assert broker.is_running()


def test_slow_clients_hold_no_more_than_the_request_memory_pool(tmp_path: Path) -> None:
    """20 peers each declare a 16 MB frame and send half of it; with
    queued.max.request.bytes=16 MB the broker holds one such frame at a time, and the
    others stop being read until it is answered."""
    frame_size = 16 * 1024 * 1024
    broker = BrokerProcess(
        tmp_path / "data",
        overrides={
            "socket.request.max.bytes": str(frame_size),
            "queued.max.request.bytes": str(frame_size),
        },
    ).start()
    peers: list[socket.socket] = []
    try:
        assert broker.proc is not None
        before = rss_mb(broker.proc.pid)
        chunk = bytes(256 * 1024)
        for _ in range(20):
            peer = socket.create_connection(("127.0.0.1", broker.port), timeout=5)
            peer.setblocking(False)
            peer.send(struct.pack(">i", frame_size))
            peers.append(peer)
        deadline = time.monotonic() + 8
        sent = [0] * len(peers)
        while time.monotonic() < deadline and min(sent) < frame_size // 2:
            progressed = False
            for i, peer in enumerate(peers):
                if sent[i] >= frame_size // 2:
                    continue
                try:
                    sent[i] += peer.send(chunk)
                    progressed = True
                except BlockingIOError:
                    pass
            if not progressed:
                time.sleep(0.05)
        time.sleep(0.5)
        growth = rss_mb(broker.proc.pid) - before
        print(f"sent {sum(sent) / 2**20:.0f} MiB over 20 connections; broker RSS +{growth:.0f} MiB")
        # Without the pool every byte sent is held: 20 x 8 MiB = 160 MiB.
        assert growth < 64
        # A normal client is still served at once: small requests never wait for the pool.
        pinger = Pinger(broker.port)
        times = pinger.sample(0.5)
        pinger.close()
        assert max(times) < MAX_STALL_S
    finally:
        for peer in peers:
            peer.close()
        broker.stop()


def test_the_blocked_large_request_proceeds_once_memory_is_released(tmp_path: Path) -> None:
    """With a pool of one frame, a second large request waits for the first, then is served."""
    frame_size = 2 * 1024 * 1024
    broker = BrokerProcess(
        tmp_path / "data",
        overrides={
            "socket.request.max.bytes": str(frame_size),
            "queued.max.request.bytes": str(frame_size),
        },
    ).start()
    try:
        first = produce_frame(150_000, correlation=1)  # 1.2 MB: larger than half the pool
        second = produce_frame(150_000, correlation=2)
        socks = [socket.create_connection(("127.0.0.1", broker.port), timeout=120) for _ in "ab"]
        socks[0].sendall(first)
        socks[1].sendall(second)
        for sock, correlation in zip(socks, (1, 2), strict=True):
            response = read_response(sock)
            assert struct.unpack(">i", response[:4])[0] == correlation
            # The answer lists every partition (each with an error: no such topic).
            assert len(response) > 150_000
            sock.close()
        assert broker.is_running()
    finally:
        broker.stop()
