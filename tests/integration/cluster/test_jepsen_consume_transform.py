"""Exactly-once consume-transform-produce under faults (KIP-98 / KIP-447), Jepsen-style.

Three brokers on their own loopback aliases (tests/helpers/faults.py). An input topic is
pre-filled with uniquely numbered records; two "processors", each a read_committed
consumer in one consumer group and a transactional producer, read a batch, write one
transformed record per input to an output topic and commit the consumer's offsets in the
same transaction (``send_offsets_to_transaction`` with the consumer's group metadata, so
the group coordinator fences a processor of an older generation). Meanwhile the
transaction coordinator's broker, the group coordinator's broker and a partition leader
are SIGKILLed, a broker is SIGSTOPped and the transaction coordinator is cut from the
group coordinator. A processor aborts a failed transaction and rewinds to the group's
committed offsets; one that cannot go on is replaced by a new incarnation of its
transactional id (which fences the old one). Some transactions are aborted on purpose.
After healing and draining, read_committed must show every input transformed exactly
once and nothing else, and the group's committed offsets must be the input log's end.
"""

from __future__ import annotations

import os
import random
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from odradek.broker.group.partitioning import partition_for
from tests.helpers.checker import Readback, Record, check_exactly_once
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
OFFSETS = "__consumer_offsets"
INTERNAL_PARTITIONS = 50  # transaction.state.log.num.partitions, offsets.topic.num.partitions
IN, OUT = "ctp-in", "ctp-out"
PARTITIONS = 3
GROUP = "ctp"
INPUTS = 2000  # per round of faults
# JEPSEN_CTP_ROUNDS=4: a longer campaign, four rounds of the five faults (1 in CI)
ROUNDS = int(os.environ.get("JEPSEN_CTP_ROUNDS") or 1)
TXN_TIMEOUT_MS = 10000  # short: a transaction a fault strands is aborted soon
BATCH = 10  # inputs per transaction at most
PACE_S = 0.05  # pause between transactions: processing lasts through the faults
SEND_OFFSETS_TIMEOUT_S = 30
WATCHDOG_GRACE_S = 15
ABORT_RATE = 0.15  # transactions aborted on purpose (their outputs stay in the log)
GAP_S = (3.0, 6.0)  # between faults: the processors get going again (a rebalance, a
# coordinator found again), so the next fault hits them mid-transaction


def transform(value: bytes) -> bytes:
    return b"out-" + value


@pytest.fixture
def ctp_cluster(tmp_path: Path, zk_connect: str, request: pytest.FixtureRequest) -> Iterator[
    tuple[FaultyCluster, Firewall]
]:
    settings = {
        **CAMPAIGN_BROKER_SETTINGS,
        # Transactions a lost producer left open are aborted soon.
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
        # A rebalance needs no 3 s wait for more members (Kafka's default).
        "group.initial.rebalance.delay.ms": "0",
    }
    with jepsen_cluster(tmp_path, zk_connect, request.node.name, settings) as started:
        yield started


class Processors:
    """Consume-transform-produce workers in threads (one transactional id each).

    Each transaction's outcome and inputs go to ``txns``: (worker, incarnation, number,
    first input, inputs, outcome) with outcome "committed", "aborted" (on purpose or after
    an error), "failed" (never asked to commit, and the abort failed or a call hung: the
    next incarnation's InitProducerId aborts it) or "unknown" (the commit failed: it may
    have happened). A duplicate in the output is then traced to the committed or unknown
    transactions that claimed its input.
    """

    def __init__(self, bootstrap: str, seed: int, workers: int = 2) -> None:
        self.bootstrap = bootstrap
        self.seed = seed
        self.workers = workers
        self.stop = threading.Event()
        self.errors: Counter[str] = Counter()  # what failed, by where and error name
        self.incarnations = 0  # producer/consumer pairs replaced after a fatal error
        self.rewinds = 0  # aborts followed by a seek to the committed offsets
        self.crashed: list[str] = []  # a worker thread that died (a harness bug)
        self.txns: list[tuple[str, int, int, bytes, int, str]] = []
        self.claimed: dict[bytes, list[str]] = {}  # input -> committed/unknown txn names
        self.phase: dict[str, tuple[str, float]] = {}  # worker -> what it does, since when
        self.abandoned: list[Producer] = []  # stuck in librdkafka (see _send_offsets)
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def txn_ids(self) -> list[str]:
        return [f"ctp-{i}" for i in range(self.workers)]

    def start(self) -> Processors:
        for i, txn_id in enumerate(self.txn_ids()):
            thread = threading.Thread(
                target=self._run, args=(txn_id, i), name=txn_id, daemon=True
            )
            self._threads.append(thread)
            thread.start()
        return self

    def finish(self, timeout: float = 90) -> list[str]:
        """Stop the workers; the stacks of those still running after ``timeout``."""
        self.stop.set()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        frames = sys._current_frames()
        return [
            f"{t.name} hangs in {self.phase.get(t.name)}:\n"
            + "".join(traceback.format_stack(frames[t.ident])[-6:])
            for t in self._threads
            if t.is_alive() and t.ident in frames
        ]

    def _at(self, what: str) -> None:
        self.phase[threading.current_thread().name] = (what, time.monotonic())

    def phases(self) -> str:
        now = time.monotonic()
        return ", ".join(f"{w} {what} for {now - t:.0f} s" for w, (what, t) in self.phase.items())

    def outcomes(self) -> Counter[str]:
        return Counter(txn[5] for txn in self.txns)

    def committing_workers(self) -> set[str]:
        with self._lock:
            return {txn[0] for txn in self.txns if txn[5] == "committed"}

    def committed_inputs(self) -> int:
        with self._lock:
            return sum(txn[4] for txn in self.txns if txn[5] == "committed")

    def _note(self, what: str) -> None:
        with self._lock:
            self.errors[what] += 1

    def _run(self, txn_id: str, index: int) -> None:
        try:
            self._process(txn_id, index)
        except Exception as exc:
            self.crashed.append(f"{txn_id}: {type(exc).__name__}: {exc}")

    # --- one incarnation: a producer, then a consumer ----------------------------------

    def _producer(self, txn_id: str) -> Producer:
        """A producer with its id initialised; retried while the coordinator is away (the
        InitProducerId fences the previous incarnation and aborts its transaction)."""
        deadline = time.monotonic() + 120
        self._at("init")
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
                if time.monotonic() > deadline or self.stop.is_set():
                    raise

    def _consumer(self, txn_id: str) -> Consumer:
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": GROUP,
                "client.id": txn_id,
                "isolation.level": "read_committed",  # committed offsets fetched stable
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                # Short, so a paused or cut processor's partitions move to the other one.
                "session.timeout.ms": 10000,
                "heartbeat.interval.ms": 1000,
                # The rebalance timeout: a member that does not rejoin (its worker stuck
                # in a transaction) holds the group's rebalance at most this long.
                "max.poll.interval.ms": 30000,
            }
        )
        consumer.subscribe([IN])
        return consumer

    def _process(self, txn_id: str, index: int) -> None:
        rng = random.Random(self.seed * 31 + index)
        incarnation = 0
        producer = self._producer(txn_id)
        consumer = self._consumer(txn_id)
        n = 0
        while not self.stop.is_set():
            self._at("consume")
            batch = [
                m for m in consumer.consume(BATCH, 0.5) if m.error() is None
            ]  # a rebalance happens in here, never inside a transaction
            if not batch:
                continue
            n += 1
            name = f"{txn_id}.{incarnation}.t{n}"
            inputs = [m.value() for m in batch]
            self._at(f"transaction {name}")
            try:
                state = self._transaction(producer, consumer, batch, rng.random() < ABORT_RATE)
            except KafkaException as exc:
                error = exc.args[0]
                state = "unknown" if isinstance(exc, _Committing) else "failed"
                self._note(f"{'commit' if state == 'unknown' else 'txn'}:{error.name()}")
                if not isinstance(exc, _Stuck) and not error.fatal() and self._abort(producer):
                    if state != "unknown":
                        state = "aborted"
                    if self._rewind(consumer):
                        self._log(name, txn_id, incarnation, n, inputs, state)
                        continue
                # Fenced, fatal, or the abort failed: a new incarnation fences this one.
                self._log(name, txn_id, incarnation, n, inputs, state)
                self._at("close")
                self._close(consumer)
                incarnation += 1
                self.incarnations += 1
                producer = self._producer(txn_id)
                consumer = self._consumer(txn_id)
                continue
            self._log(name, txn_id, incarnation, n, inputs, state)
            if state == "aborted" and not self._rewind(consumer):
                self._close(consumer)
                consumer = self._consumer(txn_id)
            time.sleep(PACE_S)
        self._close(consumer)
        producer.flush(TXN_TIMEOUT_MS / 1000)

    def _transaction(
        self, producer: Producer, consumer: Consumer, batch: list[Any], abort: bool
    ) -> str:
        """One transaction over ``batch``; returns "committed" or "aborted" (on purpose).
        Raises KafkaException (:class:`_Committing` once the commit was asked for)."""
        producer.begin_transaction()
        nexts: dict[tuple[str, int], int] = {}
        for msg in batch:
            # The output partition is the input's: an input processed twice would show in
            # one partition, whichever processor did it.
            producer.produce(OUT, transform(msg.value()), msg.value(), partition=msg.partition())
            nexts[(msg.topic(), msg.partition())] = msg.offset() + 1
        offsets = [TopicPartition(t, p, o) for (t, p), o in nexts.items()]
        self._send_offsets(producer, offsets, consumer.consumer_group_metadata())
        if abort:
            producer.flush(TXN_TIMEOUT_MS / 1000)  # aborted outputs land in the log
            producer.abort_transaction(TXN_TIMEOUT_MS / 1000)
            return "aborted"
        self._commit(producer)
        return "committed"

    def _send_offsets(self, producer: Producer, offsets: list[TopicPartition], group: Any) -> None:
        """``send_offsets_to_transaction`` with a watchdog: librdkafka (2.16) may block in it
        past its timeout when the group coordinator it cached is gone (the coordinator
        request's timeout is never checked: confluentinc/librdkafka#5456, #5511). A call
        still blocked after the watchdog is abandoned with its producer (kept referenced,
        never closed), and the worker goes on as a new incarnation, which fences it."""
        self._at("send offsets")
        failed: list[BaseException] = []

        def call() -> None:
            try:
                producer.send_offsets_to_transaction(offsets, group, SEND_OFFSETS_TIMEOUT_S)
            except BaseException as exc:  # handed to the worker
                failed.append(exc)

        caller = threading.Thread(target=call, name="send-offsets", daemon=True)
        caller.start()
        caller.join(SEND_OFFSETS_TIMEOUT_S + WATCHDOG_GRACE_S)
        if caller.is_alive():
            self.abandoned.append(producer)
            raise _Stuck(KafkaError(KafkaError._TIMED_OUT, "send_offsets_to_transaction hangs"))
        if failed:
            raise failed[0]

    def _commit(self, producer: Producer) -> None:
        """Commit, retrying a retriable failure as librdkafka asks; anything else (or the
        third failure) is raised with the phase "committing"."""
        self._at("commit")
        for attempt in range(3):
            try:
                producer.commit_transaction(TXN_TIMEOUT_MS / 1000)
                return
            except KafkaException as exc:
                error = exc.args[0]
                if not error.retriable() or attempt == 2:
                    raise _Committing(error) from exc
                self._note(f"commit-retry:{error.name()}")

    def _abort(self, producer: Producer) -> bool:
        self._at("abort")
        try:
            producer.abort_transaction(TXN_TIMEOUT_MS / 1000)
            return True
        except KafkaException as exc:
            self._note(f"abort:{exc.args[0].name()}")
            return False

    def _rewind(self, consumer: Consumer) -> bool:
        """Back to the group's committed offsets (the aborted transaction's inputs are read
        again), as confluent-kafka's EOS example does; False if that failed."""
        self._at("rewind")
        try:
            assigned = consumer.assignment()
            if not assigned:
                return True
            found = consumer.committed(assigned, timeout=30)
            if any(tp.error is not None for tp in found):
                self._note("rewind:partition-error")
                return False
            for tp in found:
                # No committed offset yet: the input's start (it is never truncated here).
                consumer.seek(TopicPartition(tp.topic, tp.partition, max(tp.offset, 0)))
            self.rewinds += 1
            return True
        except KafkaException as exc:
            self._note(f"rewind:{exc.args[0].name()}")
            return False

    def _close(self, consumer: Consumer) -> None:
        try:
            consumer.close()
        except (KafkaException, RuntimeError) as exc:
            self._note(f"close:{type(exc).__name__}")

    def _log(
        self, name: str, txn_id: str, incarnation: int, n: int, inputs: list[bytes], state: str
    ) -> None:
        with self._lock:
            self.txns.append((txn_id, incarnation, n, inputs[0], len(inputs), state))
            if state in ("committed", "unknown"):
                for value in inputs:
                    self.claimed.setdefault(value, []).append(f"{name}({state})")


class _Committing(KafkaException):
    """A commit that failed: its outcome is unknown."""


class _Stuck(KafkaException):
    """A librdkafka call that outlived its timeout: its producer cannot be used again."""


def fill_input(bootstrap: str, count: int) -> list[bytes]:
    """``count`` uniquely numbered records, round-robin over the partitions (idempotent,
    acks=all); every one acknowledged before the processors start."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20}
    )
    values = [f"in-{i}".encode() for i in range(count)]
    failed: list[str] = []

    def report(err: KafkaError | None, _msg: Any) -> None:
        if err is not None:
            failed.append(err.name())

    for i, value in enumerate(values):
        producer.produce(IN, value, partition=i % PARTITIONS, on_delivery=report)
        producer.poll(0)
    assert producer.flush(60) == 0 and not failed, failed
    return values


def end_offsets(bootstrap: str, topic: str) -> dict[tuple[str, int], int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ctp-hw"})
    try:
        return {
            (topic, p): consumer.get_watermark_offsets(
                TopicPartition(topic, p), timeout=60, cached=False
            )[1]
            for p in range(PARTITIONS)
        }
    finally:
        consumer.close()


def committed_offsets(bootstrap: str) -> dict[tuple[str, int], int | None]:
    """The group's committed input offsets, fetched stable (read_committed asks with
    require_stable: a transactional commit still pending is waited for)."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": GROUP, "isolation.level": "read_committed"}
    )
    try:
        found = consumer.committed([TopicPartition(IN, p) for p in range(PARTITIONS)], 30)
        return {
            (tp.topic, tp.partition): tp.offset if tp.offset >= 0 and tp.error is None else None
            for tp in found
        }
    finally:
        consumer.close()


def read_topic(
    bootstrap: str, isolation: str, ends: dict[tuple[str, int], int], timeout: float
) -> list[Record]:
    """Every record ``isolation`` shows of ``ends``' partitions: a partition is done when
    the consumer reports its end at or past its high watermark (aborted and control
    records are skipped, so offsets alone cannot tell)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"ctp-final-{isolation}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
        }
    )
    try:
        consumer.assign([TopicPartition(t, p, 0) for t, p in ends])
        readback = Readback()  # an offset delivered again is still one record
        reached: dict[tuple[str, int], int] = {}
        deadline = time.monotonic() + timeout
        while any(reached.get(tp, -1) < end for tp, end in ends.items()):
            if time.monotonic() > deadline:
                raise AssertionError(f"{isolation} read stuck at {reached}, ends {ends}")
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    reached[(msg.topic(), msg.partition())] = msg.offset()
                continue
            readback.add(Record(msg.topic(), msg.partition(), msg.offset(), msg.value()))
        return readback.records
    finally:
        consumer.close()


ROLES = ("kill-txn-coordinator", "kill-group-coordinator", "kill-leader", "pause", "partition")


def draw_fault(
    role: str, cluster: FaultyCluster, rng: random.Random, txn_ids: list[str]
) -> Fault:
    """The fault of ``role``, aimed at where the brokers are now."""
    ids = sorted(cluster.brokers)
    session_s = SESSION_TIMEOUT_MS / 1000
    txn = cluster.leader_of(STATE, partition_for(rng.choice(txn_ids), INTERNAL_PARTITIONS))
    group = cluster.leader_of(OFFSETS, partition_for(GROUP, INTERNAL_PARTITIONS))
    leader = cluster.leader_of(rng.choice([IN, OUT]), rng.randrange(PARTITIONS))
    down = rng.uniform(0.5, 3.0)  # a killed broker restarts once its session expired
    if role == "kill-txn-coordinator":
        return Fault("kill", (txn or rng.choice(ids),), down)
    if role == "kill-group-coordinator":
        return Fault("kill", (group or rng.choice(ids),), down)
    if role == "kill-leader":
        return Fault("kill", (leader or rng.choice(ids),), down)
    if role == "pause":  # a GC pause, or one outliving the ZooKeeper session
        target = txn if txn is not None and rng.random() < 0.5 else rng.choice(ids)
        duration = rng.choice([rng.uniform(0.5, 3.0), rng.uniform(session_s + 1, 9.0)])
        return Fault("pause", (target,), duration)
    # The transaction coordinator cut from the group coordinator (or from a leader): its
    # markers cannot reach the pending offsets (or outputs) they complete.
    first = txn if txn is not None else rng.choice(ids)
    others = [b for b in ids if b != first]
    second = group if group in others else (leader if leader in others else rng.choice(others))
    return Fault("partition", (first, second), rng.uniform(2.0, session_s + 3))


@pytest.mark.timeout(240 + 180 * ROUNDS)
def test_consume_transform_produce_is_exactly_once_under_faults(
    ctp_cluster: tuple[FaultyCluster, Firewall],
) -> None:
    cluster, firewall = ctp_cluster
    seed = int(os.environ.get("JEPSEN_SEED") or random.randrange(1 << 30))
    rounds = ROUNDS
    rng = random.Random(seed)
    admin = cluster.admin()
    config = {"min.insync.replicas": "2"}
    futures = admin.create_topics(
        [NewTopic(t, PARTITIONS, 3, config=config) for t in (IN, OUT)], operation_timeout=30
    )
    for future in futures.values():
        future.result(60)
    assert cluster.wait_fully_replicated(IN, PARTITIONS, 60)
    assert cluster.wait_fully_replicated(OUT, PARTITIONS, 60)
    bootstrap = cluster.bootstrap()
    inputs = fill_input(bootstrap, INPUTS * rounds)
    input_ends = end_offsets(bootstrap, IN)
    assert sum(input_ends.values()) == len(inputs), input_ends

    processors = Processors(bootstrap, seed).start()
    # The first InitProducerIds and JoinGroups create the internal topics: let them settle.
    assert cluster.wait_fully_replicated(STATE, INTERNAL_PARTITIONS, 90)
    assert cluster.wait_fully_replicated(OFFSETS, INTERNAL_PARTITIONS, 90)
    # Faults once both processors commit (the group has both members): they hit a
    # running pipeline, not its start-up.
    warm_up = time.monotonic()
    deadline = warm_up + 90
    while time.monotonic() < deadline and not processors.crashed:
        if processors.committing_workers() == set(processors.txn_ids()):
            break
        time.sleep(0.5)
    warm_up = time.monotonic() - warm_up
    nemesis = Nemesis(cluster, firewall, seed, OUT, PARTITIONS)
    roles: list[str] = []
    for _ in range(rounds):  # each round has every role once, in a seeded order
        order = list(ROLES)
        rng.shuffle(order)
        roles += order
    error = None
    started = time.monotonic()
    done_before = processors.committed_inputs()
    try:
        for role in roles:
            fault = draw_fault(role, cluster, rng, processors.txn_ids())
            try:
                nemesis.apply(fault)
                time.sleep(fault.duration)
            finally:
                nemesis.heal(fault)
            time.sleep(rng.uniform(*GAP_S))
    except Exception as exc:  # the harness failed: still heal, check and report
        error = f"{type(exc).__name__}: {str(exc)[:300]}"
    finally:
        nemesis.heal()
    during = time.monotonic() - started
    done_during = processors.committed_inputs()
    settled = all(cluster.wait_fully_replicated(t, PARTITIONS, 90) for t in (IN, OUT))

    # Drain: the processors go on until the group has committed the whole input.
    committed: dict[tuple[str, int], int | None] = {}
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline and not processors.crashed:
        try:
            committed = committed_offsets(bootstrap)
        except KafkaException:
            committed = {}
        if committed == input_ends:
            break
        time.sleep(1)
    drained = time.monotonic() - started - during
    phases = processors.phases()
    hung = processors.finish()
    committed = committed_offsets(bootstrap)

    output_ends = end_offsets(bootstrap, OUT)
    outputs = read_topic(bootstrap, "read_committed", output_ends, 90 + TXN_TIMEOUT_MS / 1000)
    everything = read_topic(bootstrap, "read_uncommitted", output_ends, 90)
    report = check_exactly_once(inputs, outputs, transform, committed, input_ends)
    outcomes = processors.outcomes()
    traced = [
        f"{value!r} claimed by {processors.claimed.get(value[len(b'out-'):], [])}"
        for value in list(report.duplicates)[:5]
    ]
    summary = "\n".join(
        [
            f"seed {seed} (rerun with JEPSEN_SEED={seed}): warm-up {warm_up:.0f} s "
            f"({done_before} inputs), {len(nemesis.log)} faults in {during:.0f} s "
            f"({done_during} of {len(inputs)} inputs committed by their end), drained in "
            f"{drained:.0f} s more; transactions {dict(outcomes)}; output log "
            f"{len(everything)} records (read_uncommitted), {len(outputs)} read_committed",
            report.summary(),
            *(f"  traced: {line}" for line in traced),
            f"client errors: {dict(processors.errors) or 'none'}; new incarnations "
            f"{processors.incarnations}; rewinds {processors.rewinds}; producers abandoned "
            f"in send_offsets_to_transaction {len(processors.abandoned)}; crashed: "
            f"{processors.crashed or 'none'}; fully replicated after healing: {settled}; "
            f"harness error: {error or 'none'}",
            f"workers at the end of the drain: {phases}",
            *hung,
            "schedule:",
            *(f"{f} ({role})" for f, role in zip(nemesis.log, roles, strict=False)),
        ]
    )
    print(summary)
    assert error is None, summary
    assert not processors.crashed, summary
    assert not hung, summary
    assert len(nemesis.log) == len(ROLES) * rounds, summary
    assert not report.duplicates, summary  # no input transformed twice
    assert not report.missing, summary  # no input skipped
    assert not report.unexpected, summary  # no aborted or foreign output visible
    assert not report.offsets, summary  # the group committed exactly the whole input
    assert settled, summary
    # Not a vacuous pass: transactions were aborted with their outputs in the log, so a
    # read_committed that showed everything would be caught as duplicates.
    assert outcomes["aborted"] >= 3 and outcomes["committed"] >= 20, summary
    dirty = check_exactly_once(inputs, everything, transform)
    assert dirty.duplicates, summary
