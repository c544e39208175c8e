"""Structured fuzzing of a live broker: every API and version it advertises, and record batches.

Run from the repository root::

    .venv/bin/python bench/fuzz_broker.py --cases 20000 --seed 1

It starts its own broker subprocess (127.0.0.1, free port, temporary data directory), then:

1. produces a known set of records with confluent-kafka (one producer per codec, acks=all)
   to topic ``fuzz-known`` and remembers what was acknowledged;
2. sends mutated requests class by class (bench/fuzz_cases.py: each (API, version) pair,
   then each record-batch mutation with each codec), round-robin in chunks of
   ``--chunk`` cases per class (by default small enough that every class gets its turn)
   until ``--cases`` or ``--time-limit`` is reached. Each case
   is followed on the same connection by an ApiVersions probe, so the case has been fully
   handled (answered, or the connection closed) before the next one;
3. after every chunk, checks that the broker process is alive, answers ApiVersions and a
   confluent-kafka produce/fetch round trip, and that its RSS (/proc/PID/status) stays
   within ``--rss-growth-mb`` of its value after warm-up; every ``--verify-every`` chunks
   and at the end, that every record of step 1 reads back unchanged.

A finding is a traceback in the broker log (the broker logs bad input on one line, without
one), a failed health check, too much RSS growth, or known data that changed. Each
traceback is reported once per distinct exception and location, with the case that
caused it (class, mutation kind, frame bytes in hex) so it can be replayed. Findings that
match ``KNOWN_FINDINGS`` (bugs owned by other work in progress) are reported as known and
do not fail the run unless ``--fail-on-known`` is given. Exit status: 0 without (new)
findings, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import struct
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH), str(BENCH.parent)]
from fuzz_cases import BATCH_TOPIC, batch_classes, request_classes  # noqa: E402
from tests.helpers.broker import BrokerProcess  # noqa: E402
from tests.helpers.raw import RawClient  # noqa: E402

from odradek.protocol.codec import decode_response  # noqa: E402
from odradek.protocol.versions import FETCH, PRODUCE, SUPPORTED  # noqa: E402
from odradek.records import decode_batch  # noqa: E402

KNOWN_TOPIC = "fuzz-known"
HEALTH_TOPIC = "fuzz-health"
CODEC_NAMES = ("none", "gzip", "snappy", "lz4", "zstd")
PROBE_CORRELATION = 0x7FFF0000
CASE_TIMEOUT_S = 5.0

# Tracebacks that belong to bugs other work is fixing: (text in the traceback, note).
KNOWN_FINDINGS: list[tuple[str, str]] = []


def _probe(correlation_id: int) -> bytes:
    payload = struct.pack(">hhih", 18, 0, correlation_id, 5) + b"probe"
    return struct.pack(">i", len(payload)) + payload


@dataclass
class Finding:
    signature: str
    kind: str  # "traceback", "health", "rss", "data"
    detail: str
    where: str = ""
    frame_hex: str = ""
    count: int = 1
    known: str = ""


@dataclass
class Stats:
    cases: int = 0
    outcomes: Counter = field(default_factory=Counter)
    kinds: Counter = field(default_factory=Counter)
    findings: dict[str, Finding] = field(default_factory=dict)
    health_checks: int = 0
    verifications: int = 0
    rss_kb: list[int] = field(default_factory=list)
    elapsed: float = 0.0

    def add(self, finding: Finding) -> None:
        old = self.findings.get(finding.signature)
        if old is not None:
            old.count += 1
            return
        for needle, note in KNOWN_FINDINGS:
            if needle in finding.detail:
                finding.known = note
        self.findings[finding.signature] = finding
        label = f"known ({finding.known})" if finding.known else "NEW"
        print(
            f"  finding [{label}] {finding.kind}: {finding.signature} at {finding.where}",
            flush=True,
        )


class Wire:
    """One connection to the broker; reopened whenever the broker closes it."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.sock: socket.socket | None = None
        self.correlation = 0

    def _connect(self) -> socket.socket:
        if self.sock is None:
            self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=CASE_TIMEOUT_S)
        return self.sock

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def send(self, frame: bytes) -> tuple[str, bytes | None]:
        """Send one case and a probe; return the outcome ("answered", "closed" or
        "timeout") and the case's own response frame, if one came."""
        sock = self._connect()
        self.correlation = (self.correlation + 1) & 0xFFFF
        probe_id = PROBE_CORRELATION + self.correlation
        answer = None
        try:
            sock.sendall(struct.pack(">i", len(frame)) + frame + _probe(probe_id))
            buffer = b""
            while True:
                while len(buffer) >= 8:
                    (size,) = struct.unpack_from(">i", buffer)
                    if len(buffer) < 4 + size:
                        break
                    (correlation,) = struct.unpack_from(">i", buffer, 4)
                    if correlation == probe_id:
                        return "answered", answer
                    answer = buffer[4 : 4 + size]
                    buffer = buffer[4 + size :]
                chunk = sock.recv(1 << 20)
                if not chunk:
                    self.close()
                    return "closed", answer
                buffer += chunk
        except TimeoutError:
            self.close()
            return "timeout", answer
        except ConnectionError:
            self.close()
            return "closed", answer


def corrupt(records: bytes) -> str | None:
    """Why odradek's own strict decoder refuses this record set, or None if it accepts it."""
    position = 0
    try:
        while position < len(records):
            position += decode_batch(records, position).size
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def produce_error(frame: bytes, answer: bytes) -> int:
    (version,) = struct.unpack_from(">h", frame, 2)
    _correlation, response = decode_response(PRODUCE, version, answer)
    return int(response.responses[0].partition_responses[0].error_code)


class LogWatch:
    """Reads what the broker appended to its log since the last look."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.position = path.stat().st_size if path.exists() else 0

    def new_text(self) -> str:
        size = self.path.stat().st_size
        if size == self.position:
            return ""
        with open(self.path, "rb") as log:
            log.seek(self.position)
            data = log.read(size - self.position)
        self.position = size
        return data.decode(errors="replace")


def tracebacks(text: str) -> list[tuple[str, str]]:
    """(signature, traceback text) for each traceback in ``text``."""
    found = []
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if not line.startswith("Traceback"):
            continue
        block = [lines[index - 1] if index else "", line]
        for follow in lines[index + 1 :]:
            block.append(follow)
            if follow and not follow.startswith(" "):
                break
        files = [b.strip() for b in block if b.strip().startswith("File ")]
        exception = block[-1].split(":")[0]
        signature = f"{exception} @ {files[-1] if files else '?'}"
        found.append((signature, "\n".join(block)))
    return found


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class Health:
    """A real client's view: ApiVersions, produce + fetch round trip, known data intact."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "fuzz-health",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 10,
            }
        )
        self.known: dict[tuple[int, int], tuple[bytes, bytes]] = {}
        self.rounds = 0
        self.batches_end = 0

    def produce_known(self, count: int) -> None:
        for codec in CODEC_NAMES:
            producer = Producer(
                {
                    "bootstrap.servers": self.bootstrap,
                    "acks": "all",
                    "compression.type": codec,
                    "linger.ms": 5,
                }
            )

            def delivered(err, msg) -> None:
                if err is None:
                    self.known[(msg.partition(), msg.offset())] = (msg.key(), msg.value())

            for i in range(count // len(CODEC_NAMES)):
                key = f"{codec}-{i}".encode()
                value = key * (1 + i % 7) + bytes(range(i % 256))
                producer.produce(KNOWN_TOPIC, key=key, value=value, on_delivery=delivered)
            producer.flush(60)

    def round_trip(self) -> str | None:
        """None if a record produced now can be fetched back, else what went wrong."""
        self.rounds += 1
        value = f"health-{self.rounds}".encode()
        result: list = []
        self.producer.produce(
            HEALTH_TOPIC,
            value=value,
            partition=0,
            on_delivery=lambda err, msg: result.append((err, msg)),
        )
        self.producer.flush(15)
        if not result or result[0][0] is not None:
            return f"produce failed: {result[0][0] if result else 'no acknowledgement in 15 s'}"
        offset = result[0][1].offset()
        self.consumer.assign([TopicPartition(HEALTH_TOPIC, 0, offset)])
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            msg = self.consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            if msg.value() == value:
                return None
            return f"fetched {msg.value()!r} at offset {offset}, produced {value!r}"
        return "the record produced could not be fetched in 15 s"

    def verify_known(self) -> str | None:
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": "fuzz-verify",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
            }
        )
        partitions = sorted({p for p, _ in self.known})
        consumer.assign([TopicPartition(KNOWN_TOPIC, p, 0) for p in partitions])
        seen: dict[tuple[int, int], tuple[bytes, bytes]] = {}
        at_end: set[int] = set()
        deadline = time.monotonic() + 60
        try:
            while len(at_end) < len(partitions) and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is None:
                    continue
                if msg.error():
                    if msg.error().code() == -191:  # _PARTITION_EOF
                        at_end.add(msg.partition())
                    continue
                seen[(msg.partition(), msg.offset())] = (msg.key(), msg.value())
        finally:
            consumer.close()
        missing = [k for k in self.known if k not in seen]
        altered = [k for k, v in self.known.items() if k in seen and seen[k] != v]
        if missing or altered:
            return f"{len(missing)} acknowledged records missing, {len(altered)} altered"
        return None

    def fetch_batches(self, raw: RawClient, rng: random.Random) -> None:
        """Fetch what the batch cases stored (from a random offset): the read path must
        cope with whatever the produce path let through."""
        version = SUPPORTED[FETCH][1]
        response = raw.call(
            FETCH,
            version,
            {
                "max_wait": 10,
                "min_bytes": 1,
                "max_bytes": 1 << 20,
                "topics": [
                    {
                        "topic": BATCH_TOPIC,
                        "partitions": [
                            {
                                "partition": 0,
                                "fetch_offset": rng.randrange(self.batches_end + 1),
                                "partition_max_bytes": 1 << 20,
                            }
                        ],
                    }
                ],
            },
        )
        self.batches_end = max(0, int(response.responses[0].partitions[0].high_watermark))

    def close(self) -> None:
        self.consumer.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=20_000, help="mutated requests to send")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--time-limit", type=float, default=None, metavar="SECONDS")
    parser.add_argument(
        "--chunk",
        type=int,
        default=None,
        help="cases per class between checks (default: --cases spread over every class, "
        "at most 200)",
    )
    parser.add_argument("--verify-every", type=int, default=50, metavar="CHUNKS")
    parser.add_argument("--known-records", type=int, default=2000)
    parser.add_argument("--rss-growth-mb", type=float, default=150.0)
    parser.add_argument("--only", default="", help="run only classes whose name has this text")
    parser.add_argument(
        "--fail-on-known",
        action="store_true",
        help="known findings (see KNOWN_FINDINGS) fail the run too",
    )
    parser.add_argument("--report", type=Path, default=None, help="write findings as JSON here")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="odradek-fuzz-") as tmp:
        broker = BrokerProcess(Path(tmp) / "data", log_path=Path(tmp) / "broker.log").start()
        try:
            stats = campaign(args, broker)
        finally:
            alive = broker.is_running()
            broker.stop() if alive else broker.kill()
    return summarize(args, stats)


def advertised_versions(port: int) -> set[tuple[int, int]]:
    """(API key, version) pairs the broker lists in its ApiVersions response."""
    client = RawClient(port)
    try:
        response = client.call(18, 3, {})
    finally:
        client.sock.close()
    return {
        (int(key.api_key), version)
        for key in response.api_keys
        for version in range(key.min_version, key.max_version + 1)
    }


def campaign(args: argparse.Namespace, broker: BrokerProcess) -> Stats:
    stats = Stats()
    pid = broker.proc.pid
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topics = [
        NewTopic(KNOWN_TOPIC, 3, 1),
        NewTopic(HEALTH_TOPIC, 1, 1),
        NewTopic(BATCH_TOPIC, 1, 1),
    ]
    for future in admin.create_topics(topics).values():
        future.result(30)
    health = Health(broker.bootstrap)
    health.produce_known(args.known_records)
    if health.round_trip() is not None or len(health.known) != args.known_records:
        raise RuntimeError("the broker does not work before fuzzing started")
    log = LogWatch(broker.log_path)
    rng = random.Random(args.seed)
    classes: list = [(name, c, False) for name, c in request_classes()]
    classes += [(name, c, True) for name, c in batch_classes()]
    advertised = advertised_versions(broker.port)
    classes = [
        c
        for c in classes
        if args.only in c[0] and (c[2] or (c[1].api_key, c[1].version) in advertised)
    ]
    if args.chunk is None:
        args.chunk = max(1, min(200, args.cases // max(1, len(classes))))
    wire = Wire(broker.port)
    start = time.monotonic()
    deadline = start + args.time_limit if args.time_limit else float("inf")
    baseline_kb = 0
    chunks = 0
    print(
        f"fuzzing broker pid {pid} on port {broker.port}: {len(classes)} classes, "
        f"up to {args.cases} cases, seed {args.seed}",
        flush=True,
    )
    try:
        while stats.cases < args.cases and time.monotonic() < deadline:
            for name, cases, is_batch in classes:
                if stats.cases >= args.cases or time.monotonic() >= deadline:
                    break
                for _ in range(min(args.chunk, args.cases - stats.cases)):
                    records = None
                    if is_batch:
                        kind, frame, records = cases.case(rng, int(time.time() * 1000))
                    else:
                        kind, frame = cases.case(rng)
                    outcome, answer = wire.send(frame)
                    if records is not None and answer is not None:
                        judge_batch(stats, name, kind, frame, records, answer)
                    stats.cases += 1
                    stats.outcomes[outcome] += 1
                    stats.kinds[kind] += 1
                    text = log.new_text()
                    if "Traceback" in text:
                        for signature, block in tracebacks(text):
                            stats.add(
                                Finding(
                                    signature,
                                    "traceback",
                                    block,
                                    f"{name} {kind}",
                                    frame.hex()[:4000],
                                )
                            )
                    if outcome == "timeout" and not broker.is_running():
                        break
                chunks += 1
                if not check(stats, log, rng, broker, health, wire, pid, name, baseline_kb, args):
                    return stats
                if not baseline_kb:
                    baseline_kb = stats.rss_kb[-1]  # after one class: caches warm
                if chunks % args.verify_every == 0:
                    verify(stats, health, name)
                if chunks % 20 == 0:
                    rate = stats.cases / (time.monotonic() - start)
                    print(
                        f"  {stats.cases} cases, {rate:.0f}/s, RSS {stats.rss_kb[-1] / 1024:.1f}"
                        f" MB, findings {len(stats.findings)}",
                        flush=True,
                    )
        verify(stats, health, "end")
    finally:
        stats.elapsed = time.monotonic() - start
        wire.close()
        if broker.is_running():
            health.close()
        final = log.new_text()
        for signature, block in tracebacks(final):
            stats.add(Finding(signature, "traceback", block, "after the last case"))
    return stats


def judge_batch(
    stats: Stats, name: str, kind: str, frame: bytes, records: bytes, answer: bytes
) -> None:
    """Kafka validates every record of a produced batch (LogValidator) and refuses the
    request with CORRUPT_MESSAGE / INVALID_RECORD; a batch that odradek's own decoder
    refuses must not be acknowledged."""
    why = corrupt(records)
    code = produce_error(frame, answer)
    if why is not None and code == 0:
        stats.add(
            Finding(
                f"accepted a corrupt record batch ({name})",
                "records",
                f"accepted a record batch that fails decoding: {why}",
                f"{name} {kind}",
                frame.hex()[:4000],
            )
        )
    elif why is None and kind == "valid" and code != 0:
        stats.add(Finding(f"refused a valid batch ({name}): error {code}", "records", "", name))


def check(
    stats: Stats,
    log: LogWatch,
    rng: random.Random,
    broker: BrokerProcess,
    health: Health,
    wire: Wire,
    pid: int,
    name: str,
    baseline_kb: int,
    args: argparse.Namespace,
) -> bool:
    """Health after a chunk of cases; False if the broker is gone."""
    stats.health_checks += 1
    if not broker.is_running():
        stats.add(Finding("broker died", "health", broker.log_text()[-3000:], name))
        return False
    if wire.send(b"")[0] == "timeout":  # an empty frame: the broker must close, not hang
        stats.add(Finding("no answer to an empty frame", "health", "", name))
    problem = health.round_trip()
    if problem is not None:
        stats.add(Finding(f"round trip: {problem}", "health", problem, name))
    try:
        raw = RawClient(broker.port)
        try:
            health.fetch_batches(raw, rng)
        finally:
            raw.sock.close()
    except Exception as exc:
        stats.add(
            Finding(f"fetch of fuzzed batches: {type(exc).__name__}", "health", str(exc), name)
        )
    for signature, block in tracebacks(log.new_text()):
        stats.add(Finding(signature, "traceback", block, f"{name}: fetch of fuzzed batches"))
    current = rss_kb(pid)
    stats.rss_kb.append(current)
    if baseline_kb and current > baseline_kb + args.rss_growth_mb * 1024:
        stats.add(
            Finding(
                "RSS growth", "rss", f"{baseline_kb / 1024:.1f} MB -> {current / 1024:.1f} MB", name
            )
        )
    return True


def verify(stats: Stats, health: Health, name: str) -> None:
    stats.verifications += 1
    problem = health.verify_known()
    if problem is not None:
        stats.add(Finding(f"known data: {problem}", "data", problem, name))


def summarize(args: argparse.Namespace, stats: Stats) -> int:
    elapsed = stats.elapsed or 1e-9
    print()
    print(
        f"cases: {stats.cases} in {elapsed:.0f} s ({stats.cases / elapsed:.0f}/s), seed {args.seed}"
    )
    print("outcomes: " + ", ".join(f"{k} {v}" for k, v in stats.outcomes.most_common()))
    print("mutations: " + ", ".join(f"{k} {v}" for k, v in stats.kinds.most_common()))
    if stats.rss_kb:
        print(
            f"broker RSS: first check {stats.rss_kb[0] / 1024:.1f} MB, max "
            f"{max(stats.rss_kb) / 1024:.1f} MB, last {stats.rss_kb[-1] / 1024:.1f} MB"
        )
    print(f"health checks: {stats.health_checks}, known-data verifications: {stats.verifications}")
    new = [f for f in stats.findings.values() if not f.known]
    known = [f for f in stats.findings.values() if f.known]
    print(f"findings: {len(new)} new, {len(known)} known")
    for finding in [*new, *known]:
        label = f"known: {finding.known}" if finding.known else "NEW"
        print(f"\n[{label}] {finding.kind} x{finding.count}: {finding.signature}")
        print(f"  first seen at: {finding.where}")
        if finding.frame_hex:
            print(f"  frame (hex, without size prefix): {finding.frame_hex[:400]}")
        print("  " + finding.detail[-1500:].replace("\n", "\n  "))
    if args.report is not None:
        args.report.write_text(
            json.dumps(
                {
                    "cases": stats.cases,
                    "seconds": elapsed,
                    "outcomes": dict(stats.outcomes),
                    "findings": [vars(f) for f in stats.findings.values()],
                },
                indent=1,
            )
        )
    failing = new + (known if args.fail_on_known else [])
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
