"""The Jepsen-style checker catches each kind of anomaly (it must be able to fail)."""

from __future__ import annotations

from tests.helpers.checker import (
    History,
    Readback,
    Record,
    Write,
    check,
    check_exactly_once,
    unavailability,
)


def _history(values: int = 4) -> tuple[History, list[Record]]:
    """A clean history: one producer wrote v0..v3 to t-0, all acknowledged at 0..3."""
    history = History()
    final = []
    for i in range(values):
        value = f"v{i}".encode()
        history.attempt(Write("p1", i, "t", 0, value))
        record = Record("t", 0, i, value)
        history.ack(record, at=float(i))
        final.append(record)
    return history, final


def test_a_clean_history_is_valid() -> None:
    history, final = _history()
    history.observe(Record("t", 0, 1, b"v1"))
    report = check(history, final)
    assert report.valid, report.summary()
    assert (report.acked, report.attempted, report.read) == (4, 4, 4)


def test_an_unacknowledged_write_may_or_may_not_be_there() -> None:
    history, final = _history()
    history.attempt(Write("p1", 4, "t", 0, b"maybe"))
    assert check(history, final).valid
    assert check(history, [*final, Record("t", 0, 4, b"maybe")]).valid


def test_a_lost_acknowledged_record_is_reported_with_its_offsets() -> None:
    history, final = _history()
    report = check(history, [final[0], final[3]])
    assert not report.valid
    assert [r.value for r in report.lost] == [b"v1", b"v2"]
    assert report.lost_ranges() == {("t", 0): [(1, 2)]}
    assert "lost acknowledged offsets of t-0: 1-2" in report.summary()


def test_a_duplicate_is_reported() -> None:
    history, final = _history()
    report = check(history, [*final, Record("t", 0, 4, b"v2")])
    assert not report.valid
    assert report.duplicates == {b"v2": 2}
    assert report.duplicate_positions == {b"v2": [("t", 0, 2), ("t", 0, 4)]}
    assert "duplicate: b'v2' x2 at t-0@2, t-0@4" in report.summary()
    assert not report.moved and not report.reordered
    # An earlier copy than the acknowledged one is a duplicate too, not a move.
    history.attempt(Write("p1", 4, "t", 0, b"v4"))
    history.ack(Record("t", 0, 5, b"v4"), at=5.0)
    report = check(history, [*final, Record("t", 0, 4, b"v4"), Record("t", 0, 5, b"v4")])
    assert report.duplicates == {b"v4": 2}
    assert not report.moved and not report.reordered and not report.lost


def test_a_phantom_is_reported() -> None:
    history, final = _history()
    report = check(history, [*final, Record("t", 0, 4, b"never-written")])
    assert not report.valid
    assert [r.value for r in report.phantoms] == [b"never-written"]


def test_a_reused_offset_is_reported_as_moved() -> None:
    # v3 was acknowledged at offset 3, but after a truncation the log has v3 at offset 2.
    history, final = _history()
    report = check(history, [final[0], final[1], Record("t", 0, 2, b"v2"), Record("t", 0, 3, b"x")])
    assert [r.value for r in report.phantoms] == [b"x"]
    assert [(a.value, f.offset) for a, f in report.moved] == [] and report.lost
    report = check(history, [final[0], final[1], final[2], Record("t", 0, 7, b"v3")])
    assert [(a.offset, f.offset) for a, f in report.moved] == [(3, 7)]
    assert not report.valid


def test_reordered_acknowledged_writes_are_reported() -> None:
    history, _ = _history()
    final = [
        Record("t", 0, 0, b"v0"),
        Record("t", 0, 1, b"v2"),
        Record("t", 0, 2, b"v1"),
        Record("t", 0, 3, b"v3"),
    ]
    report = check(history, final)
    assert [(a.value, b.value) for a, b in report.reordered] == [(b"v1", b"v2")]


def test_a_read_above_the_high_watermark_is_a_dirty_read() -> None:
    history, final = _history()
    history.attempt(Write("p1", 4, "t", 0, b"uncommitted"))
    history.observe(Record("t", 0, 4, b"uncommitted"))  # seen during the run...
    report = check(history, final)  # ...and truncated away afterwards
    assert [r.value for r in report.dirty_reads] == [b"uncommitted"]
    assert not report.valid


def test_unavailability_windows() -> None:
    assert unavailability([1.0, 1.5, 5.0, 5.2], 0.0, 6.0, gap_s=2.0) == [(1.5, 5.0)]
    assert unavailability([], 10.0, 13.0, gap_s=2.0) == [(0.0, 3.0)]


def _txn_history() -> tuple[History, list[Record]]:
    """t1 committed (c0, c1), t2 aborted (a0, a1): the log holds all four."""
    history = History()
    final = []
    for offset, (txn, value) in enumerate(
        [("t1", b"c0"), ("t2", b"a0"), ("t1", b"c1"), ("t2", b"a1")]
    ):
        history.attempt(Write("tp", offset, "t", 0, value, txn=txn))
        final.append(Record("t", 0, offset, value))
    for record in (final[0], final[2]):
        history.ack(record, at=1.0)
    history.end_txn("t1", True)
    history.end_txn("t2", False)
    return history, final


def test_read_committed_sees_committed_transactions_whole_and_no_aborted_one() -> None:
    history, final = _txn_history()
    assert check(history, final, committed=[final[0], final[2]]).valid


def test_an_aborted_record_visible_to_read_committed_is_reported() -> None:
    history, final = _txn_history()
    report = check(history, final, committed=[final[0], final[1], final[2]])
    assert [r.value for r in report.aborted_reads] == [b"a0"]
    assert report.partial_txns == {"t2": (1, 2)}
    assert not report.valid


def test_a_partly_visible_transaction_is_reported() -> None:
    history, final = _txn_history()
    report = check(history, final, committed=[final[0]])
    assert report.partial_txns == {"t1": (1, 2)}
    assert not report.valid
    # An unknown outcome may be all or nothing, never a part.
    history.end_txn("t1", None)
    assert check(history, final, committed=[]).valid
    assert not check(history, final, committed=[final[2]]).valid


def test_a_committed_record_read_twice_by_read_committed_is_a_duplicate() -> None:
    history, final = _txn_history()
    report = check(history, final, committed=[final[0], final[2], final[0]])
    assert report.duplicates == {b"c0": 2}
    assert not report.valid


def test_a_whole_aborted_transaction_visible_to_read_committed_is_reported() -> None:
    """An aborted transaction's record is aborted even when read_committed shows the
    whole transaction (all of it, so it is no partial one)."""
    history, final = _txn_history()
    report = check(history, final, committed=list(final))
    assert sorted(r.value for r in report.aborted_reads) == [b"a0", b"a1"]
    assert not report.partial_txns
    assert not report.valid


def test_an_acknowledgement_without_offset_only_needs_the_value_present() -> None:
    history, final = _history()
    history.attempt(Write("p1", 4, "t", 0, b"inferred"))
    history.ack(Record("t", 0, None, b"inferred"), at=5.0)
    assert check(history, [*final, Record("t", 0, 4, b"inferred")]).valid
    report = check(history, final)
    assert [r.value for r in report.lost] == [b"inferred"]
    assert report.lost_ranges() == {}


def test_an_offset_delivered_again_is_one_record_of_the_log() -> None:
    history, final = _history()
    readback = Readback()
    for record in [*final, final[1], final[2]]:  # a re-fetch from offset 1
        readback.add(record)
    assert readback.records == final
    assert readback.again == [("t", 0, 1), ("t", 0, 2)]
    assert check(history, readback.records).valid
    # Another value at an offset already read is no redelivery: kept for the checker.
    readback.add(Record("t", 0, 1, b"v2"))
    assert readback.again == [("t", 0, 1), ("t", 0, 2)]
    assert not check(history, readback.records).valid


def _transform(value: bytes) -> bytes:
    return b"out-" + value


def _processed(count: int = 4) -> tuple[list[bytes], list[Record]]:
    """Inputs in0..in3, each transformed once into out-in<i> at out-0, offsets 0..3."""
    inputs = [f"in{i}".encode() for i in range(count)]
    return inputs, [Record("out", 0, i, _transform(v)) for i, v in enumerate(inputs)]


def test_every_input_transformed_once_is_exactly_once() -> None:
    inputs, outputs = _processed()
    report = check_exactly_once(inputs, outputs, _transform, {("in", 0): 4}, {("in", 0): 4})
    assert report.valid, report.summary()
    assert (report.inputs, report.outputs) == (4, 4)


def test_an_input_transformed_twice_is_a_duplicate_with_its_offsets() -> None:
    inputs, outputs = _processed()
    again = Record("out", 1, 7, b"out-in2")  # a second transaction processed in2 again
    report = check_exactly_once(inputs, [*outputs, again], _transform)
    assert not report.valid
    assert report.duplicates == {b"out-in2": [("out", 0, 2), ("out", 1, 7)]}
    assert not (report.missing or report.unexpected)
    assert "duplicate: b'out-in2' x2 at out-0@2, out-1@7" in report.summary()


def test_an_input_never_transformed_is_missing() -> None:
    inputs, outputs = _processed()
    report = check_exactly_once(inputs, outputs[:1] + outputs[2:], _transform)
    assert not report.valid
    assert report.missing == [b"in1"]
    assert not (report.duplicates or report.unexpected)


def test_an_output_of_no_input_is_unexpected() -> None:
    inputs, outputs = _processed()
    stray = Record("out", 0, 4, b"out-in9")
    report = check_exactly_once(inputs, [*outputs, stray], _transform)
    assert report.unexpected == [stray] and not report.valid


def test_committed_offsets_must_reach_the_input_log_end() -> None:
    inputs, outputs = _processed()
    ends = {("in", 0): 3, ("in", 1): 1}
    report = check_exactly_once(inputs, outputs, _transform, {("in", 0): 2}, ends)
    assert report.offsets == {("in", 0): (2, 3), ("in", 1): (None, 1)}
    assert not report.valid
    assert "in-0: committed 2, log end 3" in report.summary()
