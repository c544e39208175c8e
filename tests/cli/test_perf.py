"""``odradek perf produce|consume`` against a real broker: Kafka's perf-test lines, counts,
throttling, group offsets and error paths. Output is piped, so it is Kafka's plain lines."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cli.helpers import odradek
from tests.helpers.broker import BrokerProcess, free_port

pytestmark = pytest.mark.timeout(180)

NUM = r"(-?\d+(?:\.\d+)?)"
WINDOW = re.compile(
    rf"^(\d+) records sent, {NUM} records/sec \({NUM} MB/sec\), {NUM} ms avg latency, "
    rf"{NUM} ms max latency\.$"
)
TOTAL = re.compile(
    r"^(\d+)( steady state)? records sent, (\d+\.\d{6}) records/sec \((\d+\.\d\d) MB/sec\), "
    r"(\d+\.\d\d) ms avg latency, (\d+\.\d\d) ms max latency, (\d+) ms 50th, (\d+) ms 95th, "
    r"(\d+) ms 99th, (\d+) ms 99\.9th\.$"
)
HEADER = (
    "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
    "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"
)
DETAILED_HEADER = (
    "time, threadId, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
    "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"
)
DATE = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d:\d{3}"
F4 = r"\d+\.\d{4}"
SUMMARY = re.compile(
    rf"^({DATE}), ({DATE}), ({F4}), ({F4}), (\d+), ({F4}), (\d+), (-?\d+), ({F4}), ({F4})$"
)
PROGRESS = re.compile(
    rf"^({DATE}), 0, ({F4}), ({F4}), (\d+), ({F4}), (\d+), (-?\d+), ({F4}), ({F4})$"
)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def bootstrap(shared_broker: BrokerProcess) -> str:
    return shared_broker.bootstrap


def create(bootstrap: str, topic: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=20)


def end_offsets(bootstrap: str, topic: str, partitions: int = 1) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "perf-test-probe"})
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        ]
    finally:
        consumer.close()


def values(bootstrap: str, topic: str, count: int) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("probe"),
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    out: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(out) < count and time.monotonic() < deadline:
        message = consumer.poll(1)
        if message is not None and message.error() is None:
            out.append(message.value())
    consumer.close()
    return out


def perf_produce(bootstrap: str, topic: str, *args: str):  # type: ignore[no-untyped-def]
    return odradek(
        "perf",
        "produce",
        "--topic",
        topic,
        "--producer-props",
        f"bootstrap.servers={bootstrap}",
        *args,
    )


def perf_consume(bootstrap: str, topic: str, *args: str):  # type: ignore[no-untyped-def]
    return odradek("perf", "consume", "--bootstrap-server", bootstrap, "--topic", topic, *args)


def test_produce_writes_exactly_n_records(bootstrap: str) -> None:
    topic = unique("pp")
    create(bootstrap, topic, partitions=2)
    result = perf_produce(
        bootstrap,
        topic,
        "--num-records",
        "3000",
        "--record-size",
        "100",
        "--throughput",
        "-1",
    ).check()
    assert sum(end_offsets(bootstrap, topic, 2)) == 3000
    total = TOTAL.match(result.lines[-1])
    assert total, result.lines[-1]
    count, steady, rate, mb, avg, max_latency, p50, p95, p99, p999 = total.groups()
    assert int(count) == 3000 and steady is None
    assert float(rate) > 0
    assert abs(float(mb) - float(rate) * 100 / 1024 / 1024) < 0.02
    assert int(p50) <= int(p95) <= int(p99) <= int(p999) <= float(max_latency)
    assert float(avg) <= float(max_latency)
    for line in result.lines[:-1]:
        assert WINDOW.match(line), line
    payloads = values(bootstrap, topic, 20)
    assert all(len(v) == 100 and re.fullmatch(rb"[A-Z]+", v) for v in payloads)


def test_throughput_cap_and_window_lines(bootstrap: str) -> None:
    topic = unique("pp-cap")
    create(bootstrap, topic)
    started = time.monotonic()
    result = perf_produce(
        bootstrap,
        topic,
        "--num-records",
        "300",
        "--record-size",
        "10",
        "--throughput",
        "150",
        "--reporting-interval",
        "300",
    ).check()
    elapsed = time.monotonic() - started
    assert elapsed >= 1.6, elapsed  # 300 records at 150/s take about 2 s
    total = TOTAL.match(result.lines[-1])
    assert total, result.lines[-1]
    assert float(total.group(3)) <= 150 * 1.25
    windows = [WINDOW.match(line) for line in result.lines[:-1]]
    assert len(windows) >= 3 and all(windows), result.lines
    assert sum(int(w.group(1)) for w in windows if w) <= 300
    assert end_offsets(bootstrap, topic) == [300]


def test_producer_props_config_file_and_payload_options(bootstrap: str, tmp_path: Path) -> None:
    topic = unique("pp-props")
    create(bootstrap, topic)
    config = tmp_path / "producer.properties"
    config.write_text(f"# a comment\nbootstrap.servers = {bootstrap}\nacks: 1\nlinger.ms=50\n")
    result = odradek(
        "perf",
        "produce",
        "--topic",
        topic,
        "--num-records",
        "40",
        "--payload-monotonic",
        "--throughput",
        "-1",
        "--producer.config",
        str(config),
        "--producer-props",
        "compression.type=gzip",
        "batch.size=100000",
        "key.serializer=x",
    ).check()
    assert TOTAL.match(result.lines[-1])
    assert sorted(values(bootstrap, topic, 40), key=int) == [str(i).encode() for i in range(40)]

    payloads = tmp_path / "payloads.txt"
    payloads.write_text("alpha|beta||gamma")
    topic2 = unique("pp-file")
    create(bootstrap, topic2)
    result = perf_produce(
        bootstrap,
        topic2,
        "--num-records",
        "30",
        "--payload-file",
        str(payloads),
        "--payload-delimiter",
        "|",
        "--throughput",
        "-1",
    ).check()
    assert result.lines[0] == f"Reading payloads from: {payloads}"
    assert result.lines[1] == "Number of messages read: 3"
    assert set(values(bootstrap, topic2, 30)) <= {b"alpha", b"beta", b"gamma"}


def test_compression_prop_reaches_the_log(shared_broker: BrokerProcess, bootstrap: str) -> None:
    topic = unique("pp-gzip")
    create(bootstrap, topic)
    perf_produce(
        bootstrap,
        topic,
        "--num-records",
        "50",
        "--record-size",
        "20",
        "--throughput",
        "-1",
        "--producer-props",
        "compression.type=gzip",
        "linger.ms=100",
    ).check()
    log = shared_broker.data_dir / f"{topic}-0" / f"{0:020d}.log"
    dumped = odradek("dump-log", "--files", str(log)).check()
    batches = [line for line in dumped.lines if line.startswith("baseOffset:")]
    assert batches and all("compresscodec: gzip" in line for line in batches)


def test_warmup_and_metrics(bootstrap: str) -> None:
    topic = unique("pp-warm")
    create(bootstrap, topic)
    result = perf_produce(
        bootstrap,
        topic,
        "--num-records",
        "200",
        "--record-size",
        "10",
        "--throughput",
        "-1",
        "--warmup-records",
        "50",
        "--print-metrics",
    ).check()
    lines = result.lines
    assert lines[0] == (
        "Warmup first 50 records. Steady state results will print after the complete test summary."
    )
    totals = [TOTAL.match(line) for line in lines if TOTAL.match(line)]
    assert [t.group(1) for t in totals if t] == ["200", "150"]
    assert [t.group(2) for t in totals if t] == [None, " steady state"]
    metric = re.compile(
        r"^producer-metrics:record-send-total:\{client-id=perf-producer-client\} +: 200\.000$"
    )
    assert any(metric.match(line) for line in lines), lines
    assert "Metric Name" in result.out


def test_produce_errors(bootstrap: str, tmp_path: Path) -> None:
    topic = unique("pp-err")
    base = ["--num-records", "5", "--throughput", "-1"]
    perf_produce(bootstrap, topic, *base).check_error(
        "exactly one of --record-size, --payload-file or --payload-monotonic"
    )
    perf_produce(bootstrap, topic, *base, "--record-size", "5", "--payload-monotonic").check_error(
        "got --record-size and --payload-monotonic"
    )
    perf_produce(
        bootstrap, topic, "--num-records", "0", "--throughput", "-1", "--record-size", "5"
    ).check_error("--num-records should be greater than zero")
    perf_produce(bootstrap, topic, *base, "--record-size", "0").check_error(
        "--record-size should be greater than zero"
    )
    perf_produce(
        bootstrap, topic, *base, "--record-size", "5", "--warmup-records", "5"
    ).check_error("--warmup-records must be strictly fewer")
    perf_produce(
        bootstrap, topic, *base, "--record-size", "5", "--producer-props", "acks"
    ).check_error("Invalid property: acks")
    perf_produce(
        bootstrap, topic, *base, "--record-size", "5", "--producer-props", "acks=7"
    ).check_error("Invalid value 7 for configuration acks")
    perf_produce(bootstrap, topic, *base, "--payload-file", str(tmp_path / "none")).check_error(
        "File does not exist or empty file provided."
    )
    odradek(
        "perf", "produce", "--topic", topic, *base, "--record-size", "5", "stray=1"
    ).check_error("unexpected argument")
    perf_produce(bootstrap, "bad topic!", *base, "--record-size", "5").check_error()
    unreachable = f"bootstrap.servers=127.0.0.1:{free_port()}"
    odradek(
        "perf",
        "produce",
        "--topic",
        topic,
        *base,
        "--record-size",
        "5",
        "--producer-props",
        unreachable,
    ).check_error("no broker reachable")
    # Records the producer refuses are not counted; the run fails with one line.
    create(bootstrap, topic)
    too_big = perf_produce(
        bootstrap,
        topic,
        *base,
        "--record-size",
        "2000",
        "--producer-props",
        "max.request.size=1000",
    ).check_error("5 records were not written", "MESSAGE_TOO_LARGE")
    # As in Kafka, an average over no records is Java's NaN.
    assert too_big.lines[-1].startswith(
        "0 records sent, 0.000000 records/sec (0.00 MB/sec), NaN ms"
    )
    assert end_offsets(bootstrap, topic) == [0]


def test_consume_reads_n_and_reports_them(bootstrap: str) -> None:
    topic = unique("pc")
    create(bootstrap, topic, partitions=3)
    perf_produce(
        bootstrap,
        topic,
        "--num-records",
        "2000",
        "--record-size",
        "512",
        "--throughput",
        "-1",
    ).check()
    result = perf_consume(bootstrap, topic, "--messages", "1500").check()
    assert result.lines[0] == HEADER
    assert len(result.lines) == 2, result.lines
    summary = SUMMARY.match(result.lines[1])
    assert summary, result.lines[1]
    start, end, mb, _, n, _, rebalance_ms, fetch_ms, _, _ = summary.groups()
    assert int(n) == 1500
    assert float(mb) == pytest.approx(1500 * 512 / 1024 / 1024, abs=1e-4)
    assert start <= end and int(rebalance_ms) >= 0 and int(fetch_ms) >= 0

    # A group resumes where its last run stopped, and commits on exit.
    group = unique("g")
    first = perf_consume(bootstrap, topic, "--messages", "1200", "--group", group).check()
    assert SUMMARY.match(first.lines[1]).group(5) == "1200"  # type: ignore[union-attr]
    second = perf_consume(
        bootstrap,
        topic,
        "--messages",
        "2000",
        "--group",
        group,
        "--timeout",
        "1500",
    ).check()
    assert second.lines[1].startswith("WARNING: Exiting before consuming the expected number")
    assert "timeout (1500 ms) exceeded" in second.lines[1]
    assert SUMMARY.match(second.lines[2]).group(5) == "800"  # type: ignore[union-attr]


def test_consume_detailed_stats_latest_and_include(bootstrap: str) -> None:
    topic = unique("pcd")
    create(bootstrap, topic)
    perf_produce(
        bootstrap,
        topic,
        "--num-records",
        "400",
        "--record-size",
        "100",
        "--throughput",
        "200",
    ).check()
    detailed = perf_consume(
        bootstrap,
        topic,
        "--messages",
        "400",
        "--show-detailed-stats",
        "--reporting-interval",
        "1",
        "--hide-header",
        "--fetch-size",
        "2000",
    ).check()
    assert detailed.lines, detailed.out
    assert all(PROGRESS.match(line) for line in detailed.lines), detailed.lines
    assert int(PROGRESS.match(detailed.lines[-1]).group(4)) <= 400  # type: ignore[union-attr]
    with_header = perf_consume(
        bootstrap, topic, "--messages", "10", "--show-detailed-stats"
    ).check()
    assert with_header.lines[0] == DETAILED_HEADER

    latest = perf_consume(bootstrap, topic, "--messages", "5", "--from-latest", "--timeout", "800")
    lines = latest.check().lines
    assert lines[1].startswith("WARNING: Exiting before")
    assert SUMMARY.match(lines[2]).group(5) == "0"  # type: ignore[union-attr]

    included = odradek(
        "perf",
        "consume",
        "--bootstrap-server",
        bootstrap,
        "--include",
        topic[:6] + ".*",
        "--messages",
        "400",
        "--date-format",
        "HH:mm",
    ).check()
    assert re.match(r"^\d\d:\d\d, \d\d:\d\d, ", included.lines[1]), included.lines

    metrics = perf_consume(bootstrap, topic, "--messages", "100", "--print-metrics").check()
    assert SUMMARY.match(metrics.lines[1]).group(5) == "100"  # type: ignore[union-attr]
    assert "Metric Name" in metrics.out
    assert re.search(
        r"^consumer-fetch-manager-metrics:records-consumed-total:"
        r"\{client-id=perf-consumer-client\} +: 100\.000$",
        metrics.out,
        re.MULTILINE,
    )


def test_consume_errors(bootstrap: str) -> None:
    assert odradek("perf", "consume", "--topic", "x").code == 2  # --messages is required
    odradek("perf", "consume", "--bootstrap-server", bootstrap, "--messages", "1").check_error(
        "exactly one of --topic or --include"
    )
    perf_consume(bootstrap, unique("absent"), "--messages", "1").check_error("does not exist")
    perf_consume(bootstrap, "t", "--messages", "1", "--group", "").check_error(
        "--group must not be empty"
    )
    perf_consume(bootstrap, "t", "--messages", "1", "--reporting-interval", "0").check_error(
        "Reporting interval must be greater than 0."
    )
    perf_consume(bootstrap, "t", "--messages", "1", "--date-format", "yyyy-QQ").check_error(
        "pattern letter 'Q'"
    )
    odradek(
        "perf",
        "consume",
        "--bootstrap-server",
        bootstrap,
        "--include",
        "(",
        "--messages",
        "1",
    ).check_error("bad regular expression")
    odradek(
        "perf",
        "consume",
        "--bootstrap-server",
        f"127.0.0.1:{free_port()}",
        "--topic",
        "t",
        "--messages",
        "1",
    ).check_error("no broker reachable")


def run_on_terminal(*args: str) -> tuple[int, list[str]]:
    """Run ``odradek`` with stdout on a pseudo-terminal; (exit code, lines without ANSI)."""
    master, slave = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k != "ODRADEK_BOOTSTRAP_SERVER"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "odradek", *args],
        stdout=slave,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        env=env,
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    code = proc.wait(timeout=60)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode(errors="replace"))
    return code, [line.strip() for line in re.split(r"[\r\n]+", text) if line.strip()]


def test_live_display_on_a_terminal(bootstrap: str) -> None:
    topic = unique("pp-tty")
    create(bootstrap, topic)
    code, lines = run_on_terminal(
        "perf",
        "produce",
        "--topic",
        topic,
        "--num-records",
        "300",
        "--record-size",
        "10",
        "--throughput",
        "200",
        "--bootstrap-server",
        bootstrap,
        "--reporting-interval",
        "300",
    )
    assert code == 0, lines
    assert any(line.startswith("producing") and "/300" in line for line in lines), lines
    assert any(WINDOW.match(line) for line in lines), lines  # printed above the bar
    assert TOTAL.match(lines[-1]), lines
    code, lines = run_on_terminal(
        "perf",
        "consume",
        "--topic",
        topic,
        "--messages",
        "300",
        "--bootstrap-server",
        bootstrap,
    )
    assert code == 0, lines
    assert any(line.startswith("consuming") for line in lines), lines
    assert lines[0] == HEADER and SUMMARY.match(lines[-1]), lines
