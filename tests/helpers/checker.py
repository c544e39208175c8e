"""A Jepsen-style checker for a replicated log: what was acknowledged against what is there.

The workload records a :class:`History`: every value it tried to write (with the
producer and that producer's send sequence), every acknowledgement (topic, partition,
offset, value), and every record a consumer read *during* the faults. After the faults
are healed the whole log is read back (``final``) and :func:`check` compares:

- **lost**: an acknowledged value that is not in the final log (acks=all promised it);
- **moved**: an acknowledged value found at another partition/offset than the one
  acknowledged (an offset handed out twice: the first write was truncated away);
- **duplicates**: a value written once appearing more than once (idempotence forbids it);
- **reordered**: two acknowledged writes of one producer to one partition whose final
  offsets are in the opposite order of their sends;
- **phantoms**: a value in the log that no producer ever tried to write;
- **dirty reads**: a record a consumer saw during the run that is not at that position
  in the final log: it was served above the high watermark and later truncated.

With transactions (a :class:`Write` names its ``txn``; :meth:`History.end_txn` records
whether the commit was acknowledged, the abort done, or the outcome unknown), a
``read_committed`` read of the log is checked too:

- **aborted reads**: a value of an aborted transaction is visible to read_committed;
- **partial transactions**: a transaction of which read_committed shows some values but
  not all (atomicity); a committed one must show all (a missing value is **lost** when the
  workload recorded the commit's values as acknowledged);
- **duplicates**: a value read_committed shows more than once (exactly once).

For consume-transform-produce (KIP-98/KIP-447: a transaction writes the outputs of a batch
of inputs and commits the consumer group's offsets), :func:`check_exactly_once` compares
the inputs with the outputs read_committed shows: each input transformed **exactly once**
(none **missing**, none **duplicated**, nothing **unexpected**), and the group's committed
offsets at the input log's end.

Unacknowledged writes are indeterminate (they may or may not be there), as in Jepsen.
Pure data in, a :class:`Report` out, so the checker itself is unit-tested with histories
that break each rule.
"""

from __future__ import annotations

import itertools
import threading
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

Position = tuple[str, int, int]  # topic, partition, offset


@dataclass(frozen=True)
class Write:
    producer: str
    seq: int  # the producer's send order
    topic: str
    partition: int
    value: bytes
    txn: str | None = None  # the transaction it was written in, if any


@dataclass(frozen=True)
class Record:
    topic: str
    partition: int
    offset: int | None  # None: acknowledged without an offset
    value: bytes


@dataclass
class History:
    """Thread-safe: producers and readers append from their own threads."""

    attempted: dict[bytes, Write] = field(default_factory=dict)
    acked: dict[bytes, Record] = field(default_factory=dict)
    ack_times: list[float] = field(default_factory=list)
    failed: dict[bytes, str] = field(default_factory=dict)
    observed: list[Record] = field(default_factory=list)
    txn_outcomes: dict[str, bool | None] = field(default_factory=dict)  # None: unknown
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def attempt(self, write: Write) -> None:
        with self._lock:
            self.attempted[write.value] = write

    def ack(self, record: Record, at: float) -> None:
        with self._lock:
            self.acked[record.value] = record
            self.ack_times.append(at)

    def fail(self, value: bytes, error: str) -> None:
        with self._lock:
            self.failed[value] = error

    def observe(self, record: Record) -> None:
        with self._lock:
            self.observed.append(record)

    def end_txn(self, txn: str, committed: bool | None) -> None:
        """True: commit acknowledged; False: aborted; None: the outcome is unknown."""
        with self._lock:
            self.txn_outcomes[txn] = committed


@dataclass
class Report:
    acked: int
    attempted: int
    read: int
    lost: list[Record] = field(default_factory=list)
    moved: list[tuple[Record, Record]] = field(default_factory=list)  # (acked, found)
    duplicates: dict[bytes, int] = field(default_factory=dict)
    # Where the final log holds each duplicate (topic, partition, offset): their batches'
    # producer epochs and sequences in the kept logs tell who wrote the second copy.
    duplicate_positions: dict[bytes, list[Position]] = field(default_factory=dict)
    reordered: list[tuple[Record, Record]] = field(default_factory=list)
    phantoms: list[Record] = field(default_factory=list)
    dirty_reads: list[Record] = field(default_factory=list)
    aborted_reads: list[Record] = field(default_factory=list)
    partial_txns: dict[str, tuple[int, int]] = field(default_factory=dict)  # seen, written

    @property
    def valid(self) -> bool:
        return not (
            self.aborted_reads
            or self.partial_txns
            or self.lost
            or self.moved
            or self.duplicates
            or self.reordered
            or self.phantoms
            or self.dirty_reads
        )

    def lost_ranges(self) -> dict[tuple[str, int], list[tuple[int, int]]]:
        """The acknowledged offsets lost, as inclusive ranges per partition."""
        by_partition: dict[tuple[str, int], list[int]] = defaultdict(list)
        for record in self.lost:
            if record.offset is not None and record.offset >= 0:
                by_partition[(record.topic, record.partition)].append(record.offset)
        ranges: dict[tuple[str, int], list[tuple[int, int]]] = {}
        for key, offsets in sorted(by_partition.items()):
            offsets.sort()
            spans = [[offsets[0], offsets[0]]]
            for offset in offsets[1:]:
                if offset == spans[-1][1] + 1:
                    spans[-1][1] = offset
                else:
                    spans.append([offset, offset])
            ranges[key] = [(a, b) for a, b in spans]
        return ranges

    def summary(self) -> str:
        lines = [
            f"attempted {self.attempted}, acknowledged {self.acked}, read back {self.read}",
            f"lost {len(self.lost)}, moved {len(self.moved)}, "
            f"duplicated {len(self.duplicates)}, reordered {len(self.reordered)}, "
            f"phantoms {len(self.phantoms)}, dirty reads {len(self.dirty_reads)}, "
            f"aborted reads {len(self.aborted_reads)}, "
            f"partial transactions {len(self.partial_txns)}",
        ]
        for (topic, partition), spans in self.lost_ranges().items():
            text = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans)
            lines.append(f"  lost acknowledged offsets of {topic}-{partition}: {text}")
        for acked, found in self.moved[:5]:
            lines.append(f"  moved: {acked} now at {found}")
        for value, count in list(self.duplicates.items())[:5]:
            at = ", ".join(f"{t}-{p}@{o}" for t, p, o in self.duplicate_positions.get(value, []))
            lines.append(f"  duplicate: {value!r} x{count}" + (f" at {at}" if at else ""))
        for first, second in self.reordered[:5]:
            lines.append(f"  reordered: {first} sent before {second}")
        for record in self.phantoms[:5]:
            lines.append(f"  phantom: {record}")
        for record in self.dirty_reads[:5]:
            lines.append(f"  dirty read: {record}")
        for record in self.aborted_reads[:5]:
            lines.append(f"  aborted but read_committed sees: {record}")
        for txn, (seen, written) in list(self.partial_txns.items())[:5]:
            lines.append(f"  partial transaction {txn}: {seen} of {written} values visible")
        return "\n".join(lines)


class Readback:
    """The log as a consumer reads it back: one record per offset.

    A consumer may deliver an offset again (librdkafka re-fetches from an earlier
    position, e.g. after validating it against a new leader's epochs): that is the
    reader's at-least-once, not a second copy in the log, so it is counted once (and
    listed in ``again``). A different value at an offset already read is kept, so that
    :func:`check` reports it.
    """

    def __init__(self) -> None:
        self.records: list[Record] = []
        self.again: list[Position] = []
        self._seen: dict[Position, bytes | None] = {}

    def add(self, record: Record) -> None:
        position = (record.topic, record.partition, record.offset)
        if position in self._seen and self._seen[position] == record.value:
            self.again.append(position)
            return
        self._seen[position] = record.value
        self.records.append(record)


def check(
    history: History, final: list[Record], committed: list[Record] | None = None
) -> Report:
    """Compare the history with the log read back after healing (``final``, read
    uncommitted) and, with transactions, with a read_committed read (``committed``)."""
    report = Report(
        acked=len(history.acked), attempted=len(history.attempted), read=len(final)
    )
    counts = Counter(record.value for record in final)
    report.duplicates = {value: n for value, n in counts.items() if n > 1}
    for record in final:
        if record.value in report.duplicates:
            position = (record.topic, record.partition, record.offset)
            report.duplicate_positions.setdefault(record.value, []).append(position)
    where: dict[bytes, Record] = {}
    at: dict[Position, bytes] = {}
    for record in final:
        where.setdefault(record.value, record)
        at[(record.topic, record.partition, record.offset)] = record.value
        if record.value not in history.attempted:
            report.phantoms.append(record)

    for value, acked in history.acked.items():
        found = where.get(value)
        if found is None:
            report.lost.append(acked)
        elif acked.offset is None or acked.offset < 0:
            # Acknowledged without an offset: librdkafka infers "persisted" for a batch
            # whose answer it lost once a later batch of the same producer succeeded.
            continue
        elif at.get((acked.topic, acked.partition, acked.offset)) != value:
            # (A duplicate elsewhere is reported as a duplicate, not as moved.)
            report.moved.append((acked, found))
    report.lost.sort(key=lambda r: (r.topic, r.partition, -1 if r.offset is None else r.offset))

    # Per producer and partition, acknowledged sends keep their order in the log.
    streams: dict[tuple[str, str, int], list[tuple[int, Record]]] = defaultdict(list)
    for value in history.acked:
        write = history.attempted.get(value)
        found = where.get(value)
        if write is None or found is None:
            continue
        acked = history.acked[value]
        position = (acked.topic, acked.partition, acked.offset)
        if acked.offset is not None and at.get(position) == value:
            found = acked  # the acknowledged copy, where there are several
        streams[(write.producer, found.topic, found.partition)].append((write.seq, found))
    for stream in streams.values():
        stream.sort(key=lambda item: item[0])
        for (_, first), (_, second) in itertools.pairwise(stream):
            if first.offset > second.offset:
                report.reordered.append((first, second))

    for record in history.observed:
        if at.get((record.topic, record.partition, record.offset)) != record.value:
            report.dirty_reads.append(record)
    if committed is not None:
        _check_read_committed(history, committed, report)
    return report


def _check_read_committed(history: History, committed: list[Record], report: Report) -> None:
    written: dict[str, set[bytes]] = defaultdict(set)
    for write in history.attempted.values():
        if write.txn is not None:
            written[write.txn].add(write.value)
    visible: dict[str, set[bytes]] = defaultdict(set)
    for value, n in Counter(record.value for record in committed).items():
        if n > 1:
            report.duplicates[value] = max(n, report.duplicates.get(value, 0))
    for record in committed:
        write = history.attempted.get(record.value)
        if write is None or write.txn is None:
            continue
        if history.txn_outcomes.get(write.txn) is False:
            report.aborted_reads.append(record)
        visible[write.txn].add(record.value)
    for txn, values in written.items():
        seen = len(visible.get(txn, ()))
        must_show_all = history.txn_outcomes.get(txn) is True
        if (0 < seen < len(values)) or (must_show_all and seen < len(values)):
            report.partial_txns[txn] = (seen, len(values))


def unavailability(ack_times: list[float], start: float, end: float, gap_s: float) -> list[
    tuple[float, float]
]:
    """Windows longer than ``gap_s`` with no acknowledgement, relative to ``start``."""
    times = sorted(t for t in ack_times if start <= t <= end)
    edges = [start, *times, end]
    return [
        (a - start, b - start) for a, b in itertools.pairwise(edges) if b - a > gap_s
    ]


@dataclass
class ExactlyOnceReport:
    """Consume-transform-produce: each input must be transformed exactly once."""

    inputs: int
    outputs: int
    missing: list[bytes] = field(default_factory=list)  # an input with no output
    duplicates: dict[bytes, list[Position]] = field(default_factory=dict)  # output -> copies
    unexpected: list[Record] = field(default_factory=list)  # an output of no input
    # (topic, partition) -> (committed offset, log end offset), where they differ
    offsets: dict[tuple[str, int], tuple[int | None, int]] = field(default_factory=dict)

    @property
    def valid(self) -> bool:
        return not (self.missing or self.duplicates or self.unexpected or self.offsets)

    def summary(self) -> str:
        lines = [
            f"inputs {self.inputs}, outputs read back {self.outputs}: missing "
            f"{len(self.missing)}, duplicated {len(self.duplicates)}, unexpected "
            f"{len(self.unexpected)}, committed offsets off the log end {len(self.offsets)}"
        ]
        lines += [f"  missing: {value!r}" for value in self.missing[:5]]
        for value, copies in list(self.duplicates.items())[:5]:
            at = ", ".join(f"{t}-{p}@{o}" for t, p, o in copies)
            lines.append(f"  duplicate: {value!r} x{len(copies)} at {at}")
        lines += [f"  unexpected: {record}" for record in self.unexpected[:5]]
        for (topic, partition), (committed, end) in sorted(self.offsets.items()):
            lines.append(f"  {topic}-{partition}: committed {committed}, log end {end}")
        return "\n".join(lines)


def check_exactly_once(
    inputs: list[bytes],
    outputs: list[Record],
    transform: Callable[[bytes], bytes],
    committed: Mapping[tuple[str, int], int | None] | None = None,
    ends: Mapping[tuple[str, int], int] | None = None,
) -> ExactlyOnceReport:
    """Compare the inputs with the outputs a read_committed consumer read back (one record
    per offset, see :class:`Readback`): every ``transform(input)`` exactly once, nothing
    else; and, when given, the group's ``committed`` offsets equal the input's log ``ends``
    (the processors claim to have consumed everything, no more, no less)."""
    report = ExactlyOnceReport(inputs=len(inputs), outputs=len(outputs))
    expected = {transform(value) for value in inputs}
    copies: dict[bytes, list[Position]] = defaultdict(list)
    for record in outputs:
        if record.value in expected:
            copies[record.value].append((record.topic, record.partition, record.offset))
        else:
            report.unexpected.append(record)
    report.missing = [value for value in inputs if transform(value) not in copies]
    report.duplicates = {value: at for value, at in copies.items() if len(at) > 1}
    for tp, end in (ends or {}).items():
        offset = (committed or {}).get(tp)
        if offset != end:
            report.offsets[tp] = (offset, end)
    return report
