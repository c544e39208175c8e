"""Transactions under faults, Jepsen-style: three brokers on their own loopback aliases
(tests/helpers/faults.py), a topic of 3 partitions (one led by each broker, RF 3,
min.insync.replicas=2), transactional confluent-kafka producers writing each transaction
over every partition, committing some and deliberately aborting others, while the
transaction coordinator's broker and partition leaders are SIGKILLed (restarted once
ZooKeeper expired their session), a broker is SIGSTOPped and two brokers are cut from
each other. After healing, read_committed and read_uncommitted consumers read every
partition and the checker (tests/helpers/checker.py) must find: no aborted record visible
to read_committed, every transaction all or nothing, every committed record exactly once,
nothing acknowledged lost. A commit that failed during a fault is "unknown": it may be
all there or not at all, never partly.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from odradek.broker.group.partitioning import partition_for
from tests.helpers.checker import History, Readback, Record, Write, check
from tests.helpers.cluster import SESSION_TIMEOUT_MS
from tests.helpers.faults import (
    CAMPAIGN_BROKER_SETTINGS,
    Fault,
    FaultyCluster,
    Firewall,
    Nemesis,
    jepsen_cluster,
)

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.jepsen]

STATE = "__transaction_state"
STATE_PARTITIONS = 50  # transaction.state.log.num.partitions
TOPIC = "ledger"
PARTITIONS = 3
# Short, so faults also make the coordinator abort transactions that outlive it (racing
# the producer's commit) and produce deliveries time out: the error paths are exercised.
TXN_TIMEOUT_MS = 10000


@pytest.fixture
def txn_cluster(tmp_path: Path, zk_connect: str, request: pytest.FixtureRequest) -> Iterator[
    tuple[FaultyCluster, Firewall]
]:
    settings = {
        **CAMPAIGN_BROKER_SETTINGS,
        # Timed-out transactions (a producer lost mid-transaction) are aborted soon.
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
    }
    with jepsen_cluster(tmp_path, zk_connect, request.node.name, settings) as started:
        yield started


class TxnWorkload:
    """Transactional producers in threads; each transaction writes ``per_txn`` values
    round-robin over every partition, then commits or (seeded) deliberately aborts.
    Outcomes go to ``history.end_txn``: True for an acknowledged commit, False for an
    abort (a transaction whose commit was never requested can only be aborted), None for
    a commit that failed (it may have happened)."""

    def __init__(self, bootstrap: str, seed: int, producers: int = 2, per_txn: int = 6) -> None:
        self.bootstrap = bootstrap
        self.seed = seed
        self.producers = producers
        self.per_txn = per_txn
        self.history = History()
        self.stop = threading.Event()
        self.errors: Counter[str] = Counter()  # what failed, by error name
        self.recreated = 0  # producers replaced after a fatal error or a failed abort
        self.crashed: list[str] = []  # a producer thread that died (a harness bug)
        self.live: list[Record] = []  # what read_committed showed during the faults
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def txn_ids(self) -> list[str]:
        return [f"jtx-{i}" for i in range(self.producers)]

    def start(self) -> TxnWorkload:
        for i, txn_id in enumerate(self.txn_ids()):
            thread = threading.Thread(target=self._run, args=(f"p{i}", txn_id, i), daemon=True)
            self._threads.append(thread)
        self._threads.append(threading.Thread(target=self._read_committed, daemon=True))
        for thread in self._threads:
            thread.start()
        return self

    def _read_committed(self) -> None:
        """A read_committed reader during the faults (into ``live``): what it saw must be
        committed for good (never aborted later, still visible after healing)."""
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": "jtx-live",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
            }
        )
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        try:
            while not self.stop.is_set():
                msg = consumer.poll(0.2)
                if msg is None or msg.error():
                    continue
                record = Record(msg.topic(), msg.partition(), msg.offset(), msg.value())
                self.live.append(record)
                self.history.observe(record)  # at that offset in the final log (dirty reads)
        finally:
            consumer.close()

    def finish(self, timeout: float = 120) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join(timeout)
        assert not any(t.is_alive() for t in self._threads), "a producer thread hangs"

    def _note(self, what: str) -> None:
        with self._lock:
            self.errors[what] += 1

    def _producer(self, txn_id: str) -> Producer:
        """A producer with its id initialised; retried while the coordinator is away (an
        InitProducerId also fences the previous instance and aborts its transaction)."""
        deadline = time.monotonic() + 120
        while True:
            producer = Producer(
                {
                    "bootstrap.servers": self.bootstrap,
                    "transactional.id": txn_id,
                    "transaction.timeout.ms": TXN_TIMEOUT_MS,
                    "message.timeout.ms": TXN_TIMEOUT_MS,
                    "linger.ms": 5,
                }
            )
            try:
                producer.init_transactions(30)
                return producer
            except KafkaException as exc:
                self._note(f"init:{exc.args[0].name()}")
                if time.monotonic() > deadline:
                    raise

    def _run(self, name: str, txn_id: str, index: int) -> None:
        try:
            self._transactions(name, txn_id, index)
        except Exception as exc:
            self.crashed.append(f"{name}: {type(exc).__name__}: {exc}")

    def _transactions(self, name: str, txn_id: str, index: int) -> None:
        rng = random.Random(self.seed * 31 + index)
        history = self.history

        def report(err: KafkaError | None, msg: Any) -> None:
            if err is None:
                history.ack(
                    Record(msg.topic(), msg.partition(), msg.offset(), msg.value()),
                    time.monotonic(),
                )
            else:
                history.fail(msg.value(), err.name())

        producer = self._producer(txn_id)
        seq = 0
        n = 0
        while not self.stop.is_set():
            txn = f"{name}-t{n}"
            n += 1
            abort = rng.random() < 0.35
            committing = False
            try:
                producer.begin_transaction()
                for i in range(self.per_txn):
                    value = f"{txn}-{i}".encode()
                    partition = i % PARTITIONS
                    producer.produce(TOPIC, value, partition=partition, on_delivery=report)
                    # Recorded once handed over: a value produce() refused was never sent.
                    history.attempt(Write(name, seq, TOPIC, partition, value, txn=txn))
                    seq += 1
                if abort:
                    producer.flush(TXN_TIMEOUT_MS / 1000)  # aborted records land in the log
                    producer.abort_transaction(TXN_TIMEOUT_MS / 1000)
                    history.end_txn(txn, False)
                else:
                    committing = True
                    self._commit(producer)
                    history.end_txn(txn, True)
                continue
            except KafkaException as exc:
                error = exc.args[0]
                self._note(f"{'commit' if committing else 'txn'}:{error.name()}")
                # Never asked to commit: it can only be aborted (now, by a successor's
                # InitProducerId, or by the coordinator's timeout).
                history.end_txn(txn, None if committing else False)
            if not self._abort_after_error(producer):
                self.recreated += 1
                producer = self._producer(txn_id)
        producer.flush(TXN_TIMEOUT_MS / 1000)

    def _commit(self, producer: Producer) -> None:
        """Commit, retrying a retriable failure as librdkafka asks (the commit may be
        under way); anything else is raised."""
        for attempt in range(3):
            try:
                producer.commit_transaction(TXN_TIMEOUT_MS / 1000)
                return
            except KafkaException as exc:
                error = exc.args[0]
                if not error.retriable() or attempt == 2:
                    raise
                self._note(f"commit-retry:{error.name()}")

    def _abort_after_error(self, producer: Producer) -> bool:
        """Abort the failed transaction; False when the producer cannot go on."""
        try:
            producer.abort_transaction(TXN_TIMEOUT_MS / 1000)
            return True
        except KafkaException as exc:
            self._note(f"abort:{exc.args[0].name()}")
            return False


def read_log(bootstrap: str, isolation: str, ends: dict[int, int], timeout: float) -> list[
    Record
]:
    """Every record ``isolation`` shows up to ``ends`` (the high watermarks): a partition
    is done when the consumer reports its end at or past that offset (control records
    and, for read_committed, aborted ones are skipped, so offsets alone cannot tell)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"jtx-final-{isolation}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
            "isolation.level": isolation,
        }
    )
    try:
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in ends])
        readback = Readback()  # an offset delivered again is still one record
        reached: dict[int, int] = {}
        deadline = time.monotonic() + timeout
        while any(reached.get(p, -1) < end for p, end in ends.items()):
            if time.monotonic() > deadline:
                raise AssertionError(f"{isolation} read stuck at {reached}, ends {ends}")
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    reached[msg.partition()] = msg.offset()
                continue
            readback.add(Record(msg.topic(), msg.partition(), msg.offset(), msg.value()))
        return readback.records
    finally:
        consumer.close()


def _txn(history: History, record: Record) -> str | None:
    write = history.attempted.get(record.value)
    return write.txn if write is not None else None


def high_watermarks(bootstrap: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "jtx-hw"})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=60, cached=False)[
                1
            ]
            for p in range(PARTITIONS)
        }
    finally:
        consumer.close()


def draw_schedule(rng: random.Random, rounds: int) -> list[tuple[str, float]]:
    """(role, duration) per fault: each round has every role once, in a seeded order."""
    session_s = SESSION_TIMEOUT_MS / 1000
    roles = ["kill-coordinator", "kill-leader", "pause", "partition"]
    schedule = []
    for _ in range(rounds):
        rng.shuffle(roles)
        for role in roles:
            if role == "pause":  # a GC pause, or one outliving the ZooKeeper session
                duration = rng.choice([rng.uniform(0.5, 3.0), rng.uniform(session_s + 1, 9.0)])
            elif role == "partition":
                duration = rng.uniform(2.0, session_s + 3)
            else:
                duration = rng.uniform(0.5, 3.0)  # down for; restart waits for the session
            schedule.append((role, duration))
    return schedule


def target_of(role: str, cluster: FaultyCluster, rng: random.Random, txn_ids: list[str]) -> tuple[
    int, ...
]:
    ids = sorted(cluster.brokers)
    coordinator = cluster.leader_of(STATE, partition_for(rng.choice(txn_ids), STATE_PARTITIONS))
    leader = cluster.leader_of(TOPIC, rng.randrange(PARTITIONS))
    if role == "kill-coordinator" and coordinator is not None:
        return (coordinator,)
    if role == "kill-leader" and leader is not None:
        return (leader,)
    if role == "partition":
        # The coordinator cut from a partition leader: its markers cannot reach them.
        first = coordinator if coordinator is not None else rng.choice(ids)
        others = [b for b in ids if b != first]
        second = leader if leader in others else rng.choice(others)
        return (first, second)
    return (coordinator if coordinator is not None and rng.random() < 0.5 else rng.choice(ids),)


@pytest.mark.timeout(420)
def test_read_committed_never_shows_aborted_data_under_faults(
    txn_cluster: tuple[FaultyCluster, Firewall],
) -> None:
    cluster, firewall = txn_cluster
    seed = int(os.environ.get("JEPSEN_SEED") or random.randrange(1 << 30))
    rounds = int(os.environ.get("JEPSEN_TXN_ROUNDS") or 2)
    rng = random.Random(seed)
    admin = cluster.admin()
    admin.create_topics(
        [NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})],
        operation_timeout=30,
    )[TOPIC].result(60)
    assert cluster.wait_fully_replicated(TOPIC, PARTITIONS, 60)
    workload = TxnWorkload(cluster.bootstrap(), seed).start()
    # The first InitProducerIds create __transaction_state; let it settle before faults.
    assert cluster.wait_fully_replicated(STATE, STATE_PARTITIONS, 90)
    nemesis = Nemesis(cluster, firewall, seed, TOPIC, PARTITIONS)
    roles: list[str] = []
    error = None
    started = time.monotonic()
    try:
        for role, duration in draw_schedule(rng, rounds):
            targets = target_of(role, cluster, rng, workload.txn_ids())
            kind = {"partition": "partition", "pause": "pause"}.get(role, "kill")
            fault = Fault(kind, targets, duration)
            roles.append(role)
            try:
                nemesis.apply(fault)
                time.sleep(duration)
            finally:
                nemesis.heal(fault)
            time.sleep(rng.uniform(1.0, 3.0))
    except Exception as exc:  # the harness failed: still heal, check and report
        error = f"{type(exc).__name__}: {str(exc)[:300]}"
    finally:
        nemesis.heal()
    during = time.monotonic() - started
    settled = cluster.wait_fully_replicated(TOPIC, PARTITIONS, 90)
    time.sleep(3)  # transactions committed after healing show the cluster serves again
    workload.finish()

    bootstrap = cluster.bootstrap()
    ends = high_watermarks(bootstrap)
    final = read_log(bootstrap, "read_uncommitted", ends, 90)
    # read_committed stops at the last stable offset: transactions left open by a lost
    # producer end within the transaction timeout.
    committed = read_log(bootstrap, "read_committed", ends, 90 + TXN_TIMEOUT_MS / 1000)
    history = workload.history
    report = check(history, final, committed)
    outcomes = Counter(
        {True: "committed", False: "aborted", None: "unknown"}[o]
        for o in history.txn_outcomes.values()
    )
    # What read_committed showed during the faults: never an aborted value, and nothing
    # that is not visible to read_committed after healing (a commit is for good).
    visible = {record.value for record in committed}
    live_aborted = [
        r for r in workload.live if history.txn_outcomes.get(_txn(history, r)) is False
    ]
    live_gone = [r for r in workload.live if r.value not in visible]
    schedule = "\n".join(f"{f} ({role})" for f, role in zip(nemesis.log, roles, strict=False))
    summary = "\n".join(
        [
            f"seed {seed} (rerun with JEPSEN_SEED={seed}): {len(nemesis.log)} faults in "
            f"{during:.0f} s; transactions {dict(outcomes)}; read_committed shows "
            f"{len(committed)} of {len(final)} records; during the faults "
            f"{len(workload.live)}, of them aborted {len(live_aborted)} "
            f"{live_aborted[:3]}, not visible after healing {len(live_gone)} {live_gone[:3]}",
            report.summary(),
            f"client errors: {dict(workload.errors) or 'none'}; producers recreated "
            f"{workload.recreated}; crashed: {workload.crashed or 'none'}; "
            f"fully replicated after healing: {settled}; "
            f"harness error: {error or 'none'}",
            "schedule:",
            schedule,
        ]
    )
    print(summary)
    assert error is None, summary
    assert not workload.crashed, summary
    assert len(nemesis.log) == 4 * rounds, summary
    assert {"kill-coordinator", "kill-leader", "pause", "partition"} <= set(roles), summary
    assert not report.aborted_reads, summary  # read_committed never shows aborted data
    assert not report.partial_txns, summary  # all or nothing; committed ones whole
    assert not report.duplicates, summary  # every record once, in both reads
    assert not (live_aborted or live_gone or report.dirty_reads), summary
    assert not report.lost, summary  # nothing acknowledged lost
    assert not (report.moved or report.phantoms or report.reordered), summary
    assert settled, summary
    # Not a vacuous pass: both outcomes happened, and aborted records are in the log (a
    # read_committed consumer that showed everything would be caught).
    assert outcomes["committed"] >= 10 and outcomes["aborted"] >= 5, summary
    assert check(history, final, committed=final).aborted_reads, summary
