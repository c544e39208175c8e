"""Log compaction: checked against an in-memory model, plus the rules around it.

The model test drives a real Log with random keys, values, tombstones, keyless records,
codecs and segment rolls, cleans it twice (the second time after delete.retention.ms) and
compares every surviving record with what Kafka's rules say must survive.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.records.batch import Record, build_batch, decode_batches
from odradek.records.compression import Compression
from odradek.records.control import ControlType, build_end_txn_marker
from odradek.records.header import DELETE_HORIZON_MASK, iter_headers
from odradek.storage.checkpoint import OffsetCheckpointFile
from odradek.storage.cleaner import clean_log
from odradek.storage.cleaner_plan import group_segments_by_size, plan_cleaning
from odradek.storage.cleaner_read import CleaningAbortedError
from odradek.storage.config import LogConfig
from odradek.storage.log import Log
from odradek.storage.log_cleaner import CLEANER_OFFSET_CHECKPOINT, LogCleaner
from odradek.storage.offset_map import OffsetMap

DAY_MS = 86_400_000
T0_MS = 1_700_000_000_000


class Clock:
    def __init__(self, now_ms: int = T0_MS) -> None:
        self.now_ms = now_ms

    def __call__(self) -> float:
        return self.now_ms / 1000


def compact_config(**overrides) -> LogConfig:
    settings_ = {
        "segment_bytes": 700,
        "cleanup_policy": "compact",
        "index_interval_bytes": 128,
        "delete_retention_ms": DAY_MS,
        "min_cleanable_dirty_ratio": 0.5,
    }
    settings_.update(overrides)
    return LogConfig(**settings_)


def open_log(directory: Path, config: LogConfig, clock: Clock) -> Log:
    return Log.open(directory, config, clock=clock)


def put(
    log: Log,
    items: list[tuple[bytes | None, bytes | None]],
    *,
    ts: int = T0_MS,
    compression: Compression = Compression.NONE,
    **kwargs,
) -> int:
    records = [Record(value=v, key=k, timestamp_ms=ts) for k, v in items]
    # A compacted topic refuses keyless records; they only exist in logs written before
    # the topic was switched to compact, which appending unvalidated stands in for.
    keyless = any(k is None for k, _ in items)
    info = log.append_as_leader(
        build_batch(records, compression=compression, **{k: v for k, v in kwargs.items()}),
        origin=kwargs.pop("origin", "client") if "origin" in kwargs else "client",
        validate=not keyless,
    )
    return info.first_offset


def read_all(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    """Every data record (control records left out) as (offset, key, value)."""
    data = log.read(log.log_start_offset, 1 << 30).read_bytes()
    return [
        (r.offset, r.key, r.value)
        for b in decode_batches(data)
        if not b.is_control
        for r in b.records
    ]


def read_batches(log: Log):
    return list(decode_batches(log.read(log.log_start_offset, 1 << 30).read_bytes()))


# -- the model ------------------------------------------------------------------------


class Model:
    """Every record the log should hold: offset -> (key, value, batch base offset)."""

    def __init__(self) -> None:
        self.records: dict[int, tuple[bytes | None, bytes | None, int]] = {}
        self.horizon: dict[int, int] = {}  # batch base offset -> delete horizon

    def append(self, base: int, items: list[tuple[bytes | None, bytes | None]]) -> None:
        for i, (key, value) in enumerate(items):
            self.records[base + i] = (key, value, base)

    def clean(self, first_dirty: int, first_uncleanable: int, now_ms: int, retention: int) -> bool:
        if first_uncleanable <= first_dirty:
            return False  # nothing dirty: the log is not rewritten at all
        latest: dict[bytes, int] = {}
        for offset in sorted(self.records):
            key = self.records[offset][0]
            if first_dirty <= offset < first_uncleanable and key is not None:
                latest[key] = offset
        kept: dict[int, tuple[bytes | None, bytes | None, int]] = {}
        for offset, (key, value, base) in self.records.items():
            if offset >= first_uncleanable:
                kept[offset] = (key, value, base)
                continue
            if key is None or offset < latest.get(key, -1):
                continue
            horizon = self.horizon.get(base)
            if value is None and horizon is not None and now_ms >= horizon:
                continue
            kept[offset] = (key, value, base)
        for offset, (_key, value, base) in kept.items():
            if offset < first_uncleanable and value is None and base not in self.horizon:
                self.horizon[base] = now_ms + retention
        self.records = kept
        return True

    def expected(self) -> list[tuple[int, bytes | None, bytes | None]]:
        return [(o, self.records[o][0], self.records[o][1]) for o in sorted(self.records)]


keys = st.sampled_from([b"a", b"b", b"c", b"d", b"e", b"f", None])
values = st.one_of(st.none(), st.binary(min_size=0, max_size=40))
batch_items = st.lists(st.tuples(keys, values), min_size=1, max_size=6)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("append"), batch_items, st.sampled_from(list(Compression))),
        st.tuples(st.just("roll"), st.none(), st.none()),
    ),
    min_size=1,
    max_size=40,
)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(first=operations, second=operations)
def test_compaction_matches_model(
    tmp_path_factory: pytest.TempPathFactory, first: list, second: list
) -> None:
    directory = tmp_path_factory.mktemp("cleaner") / "topic-0"
    clock = Clock()
    log = open_log(directory, compact_config(), clock)
    model = Model()
    try:

        def run(ops: list) -> None:
            for op, items, codec in ops:
                if op == "roll":
                    log.roll()
                    continue
                # Only records with keys may be produced to a compacted topic by clients;
                # keyless ones can still exist (the topic was switched to compact later).
                base = put(log, items, ts=clock.now_ms, compression=codec)
                model.append(base, items)

        def clean(checkpoint: int | None) -> tuple[int, bool]:
            active_before = log.segments[-1]
            active_bytes = active_before.read_bytes(0, active_before.size)
            plan = plan_cleaning(log, now_ms=clock.now_ms, cleaner_offset=checkpoint)
            result = clean_log(log, now_ms=clock.now_ms, cleaner_offset=checkpoint)
            assert result.end_offset == plan.first_uncleanable
            cleaned = model.clean(plan.first_dirty, plan.first_uncleanable, clock.now_ms, DAY_MS)
            # The active segment is never touched.
            assert log.segments[-1] is active_before
            assert active_before.read_bytes(0, active_before.size) == active_bytes
            got = read_all(log)
            assert got == model.expected()
            offsets = [o for o, _, _ in got]
            assert offsets == sorted(set(offsets))
            # Batches kept their offsets and stay readable one by one.
            batches = read_batches(log)
            assert [b.base_offset for b in batches] == sorted(b.base_offset for b in batches)
            return result.end_offset, cleaned

        run(first)
        end, _ = clean(None)
        # More data, then a pass after the tombstones' delete horizon.
        run(second)
        clock.now_ms += DAY_MS + 1
        _, cleaned = clean(end)
        # No tombstone that was cleaned a day ago survives a second pass.
        for _offset, (_key, value, base) in model.records.items():
            if cleaned and value is None and base in model.horizon:
                assert model.horizon[base] > clock.now_ms
        # Reopening finds the same content (swapped segments are durable files).
        log.close()
        reopened = open_log(directory, compact_config(), clock)
        assert read_all(reopened) == model.expected()
        reopened.close()
    finally:
        log.close()


# -- focused rules --------------------------------------------------------------------


@pytest.fixture
def clock() -> Clock:
    return Clock()


def fill(log: Log, n: int, clock: Clock, keys: int = 3) -> None:
    for i in range(n):
        put(log, [(f"k{i % keys}".encode(), f"v{i}".encode())], ts=clock.now_ms)


def test_tombstone_gets_horizon_then_goes(tmp_path: Path, clock: Clock) -> None:
    log = open_log(tmp_path / "t-0", compact_config(), clock)
    put(log, [(b"k", b"v1")])
    put(log, [(b"k", None)])  # tombstone
    log.roll()
    put(log, [(b"other", b"x")])
    result = clean_log(log, now_ms=clock.now_ms, cleaner_offset=None)
    assert read_all(log) == [(1, b"k", None), (2, b"other", b"x")]
    tombstone_batch = read_batches(log)[0]
    assert tombstone_batch.header.attributes & DELETE_HORIZON_MASK
    assert tombstone_batch.header.base_timestamp == clock.now_ms + DAY_MS
    # With nothing dirty, nothing is rewritten.
    assert clean_log(log, now_ms=clock.now_ms, cleaner_offset=result.end_offset).bytes_read == 0
    # New dirty data: just before the horizon the tombstone stays, at the horizon it goes.
    put(log, [(b"other", b"y")])
    log.roll()
    clean_log(log, now_ms=clock.now_ms + DAY_MS - 1, cleaner_offset=result.end_offset)
    assert (1, b"k", None) in read_all(log)
    clean_log(log, now_ms=clock.now_ms + DAY_MS, cleaner_offset=None)
    assert read_all(log) == [(3, b"other", b"y")]
    log.close()


def test_segment_emptied_by_cleaning_does_not_end_reads(tmp_path: Path, clock: Clock) -> None:
    # The minimal case hypothesis found: a segment whose records are all superseded, too
    # big to share a group with its neighbours, is swapped in empty (Kafka's
    # Cleaner.cleanSegments does the same). A read from the log start stopped at it, so the
    # model test saw the later segment's tombstones as lost.
    log = open_log(tmp_path / "t-0", compact_config(), clock)
    put(log, [(b"a", b"x" * 620)])
    log.roll()
    put(log, [(b"b", None), (b"c", b"old")])
    log.roll()
    put(log, [(b"b", None), (b"c", b"y" * 620)])
    log.roll()
    clean_log(log, now_ms=clock.now_ms, cleaner_offset=None)
    # Nothing of the middle segment survives; it stays, empty, like Kafka's swapped-in one.
    assert [(s.base_offset, s.size) for s in log.segments][1] == (1, 0)
    assert read_all(log) == [(0, b"a", b"x" * 620), (3, b"b", None), (4, b"c", b"y" * 620)]
    # A read starting inside the empty segment goes on to the next one too.
    from_inside = decode_batches(log.read(1, 1 << 30).read_bytes())
    assert [r.offset for b in from_inside for r in b.records] == [3, 4]
    log.close()
    reopened = open_log(tmp_path / "t-0", compact_config(), clock)
    assert read_all(reopened) == [(0, b"a", b"x" * 620), (3, b"b", None), (4, b"c", b"y" * 620)]
    reopened.close()


def test_rewritten_batch_keeps_producer_fields_and_codec(tmp_path: Path, clock: Clock) -> None:
    log = open_log(tmp_path / "t-0", compact_config(), clock)
    batch = build_batch(
        [Record(value=b"1", key=b"a"), Record(value=b"2", key=b"b"), Record(value=b"3", key=b"a")],
        producer_id=77,
        producer_epoch=3,
        base_sequence=0,
        compression=Compression.LZ4,
        now_ms=clock.now_ms,
    )
    log.append_as_leader(batch)
    log.roll()
    put(log, [(b"z", b"z")])
    clean_log(log, now_ms=clock.now_ms, cleaner_offset=None)
    first = read_batches(log)[0]
    assert [(r.offset, r.key) for r in first.records] == [(1, b"b"), (2, b"a")]
    header = first.header
    assert (header.base_offset, header.last_offset_delta) == (0, 2)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (77, 3, 0)
    assert first.compression == Compression.LZ4
    # The producer's sequence continues after compaction: no out-of-order error.
    nxt = build_batch(
        [Record(value=b"4", key=b"a")],
        producer_id=77,
        producer_epoch=3,
        base_sequence=3,
        now_ms=clock.now_ms,
    )
    assert log.append_as_leader(nxt).first_offset == 4
    log.close()


def test_last_batch_of_active_producer_kept_empty(tmp_path: Path, clock: Clock) -> None:
    log = open_log(tmp_path / "t-0", compact_config(), clock)
    log.append_as_leader(
        build_batch(
            [Record(value=b"old", key=b"k")],
            producer_id=5,
            producer_epoch=0,
            base_sequence=0,
            now_ms=clock.now_ms,
        )
    )
    put(log, [(b"k", b"new")])
    log.roll()
    put(log, [(b"z", b"z")])
    clean_log(log, now_ms=clock.now_ms, cleaner_offset=None)
    batches = read_batches(log)
    assert batches[0].header.producer_id == 5 and batches[0].records == []
    assert read_all(log) == [(1, b"k", b"new"), (2, b"z", b"z")]
    log.close()


def test_active_segment_untouched_and_min_lag(tmp_path: Path, clock: Clock) -> None:
    config = compact_config(min_compaction_lag_ms=60_000)
    log = open_log(tmp_path / "t-0", config, clock)
    fill(log, 10, clock)
    log.roll()
    old_end = log.log_end_offset
    clock.now_ms += 90_000  # the first segment is now 90 s old: past the lag
    fill(log, 10, clock)  # a brand new segment: inside the lag
    log.roll()
    fill(log, 3, clock)  # the active segment
    plan = plan_cleaning(log, now_ms=clock.now_ms, cleaner_offset=None)
    assert plan.first_uncleanable == old_end
    result = clean_log(log, now_ms=clock.now_ms, cleaner_offset=None)
    assert result.end_offset == old_end
    got = read_all(log)
    assert [o for o, _, _ in got if o < old_end] == [7, 8, 9]  # latest of k0..k2
    assert [o for o, _, _ in got if o >= old_end] == list(range(old_end, 23))
    # Once the lag has passed the younger segment is cleaned too.
    clock.now_ms += 60_000
    result = clean_log(log, now_ms=clock.now_ms, cleaner_offset=result.end_offset)
    assert result.end_offset == log.segments[-1].base_offset
    assert [o for o, _, _ in read_all(log)] == [17, 18, 19, 20, 21, 22]
    log.close()


def test_aborted_data_dropped_and_markers_kept(tmp_path: Path, clock: Clock) -> None:
    log = open_log(tmp_path / "t-0", compact_config(segment_bytes=4000), clock)
    put(log, [(b"k", b"base")])  # 0

    def data(pid: int, seq: int, key: bytes, value: bytes, txn: bool = True) -> bytearray:
        return build_batch(
            [Record(value=value, key=key)],
            producer_id=pid,
            producer_epoch=0,
            base_sequence=seq,
            transactional=txn,
            now_ms=clock.now_ms,
        )

    def marker(pid: int, kind: ControlType) -> bytearray:
        return build_end_txn_marker(
            kind, producer_id=pid, producer_epoch=0, coordinator_epoch=1, timestamp_ms=clock.now_ms
        )

    log.append_as_leader(data(1, 0, b"k", b"aborted"))  # 1
    log.append_as_leader(marker(1, ControlType.ABORT), origin="coordinator")  # 2
    log.append_as_leader(data(2, 0, b"k", b"committed"))  # 3
    log.append_as_leader(marker(2, ControlType.COMMIT), origin="coordinator")  # 4
    log.append_as_leader(data(1, 1, b"p1", b"later", txn=False))  # 5
    assert [t.producer_id for t in log.collect_aborted_transactions(0, 10)] == [1]
    log.roll()
    put(log, [(b"z", b"z")])  # 6, active

    def layout() -> list[tuple[int, bool, bool]]:
        return [(b.base_offset, b.is_control, b.has_delete_horizon) for b in read_batches(log)]

    result = clean_log(log, now_ms=clock.now_ms, cleaner_offset=None)
    assert result.aborted_batches_dropped == 1
    # "base" is superseded by the committed value (the aborted value never entered the
    # offset map, so it could not shadow it) and the aborted batch is gone. Both markers
    # stay on the first pass, the abort with its txn index entry.
    assert layout() == [
        (2, True, False),
        (3, False, False),
        (4, True, False),
        (5, False, False),
        (6, False, False),
    ]
    assert read_all(log) == [(3, b"k", b"committed"), (5, b"p1", b"later"), (6, b"z", b"z")]
    assert [t.producer_id for t in log.collect_aborted_transactions(0, 10)] == [1]

    # Second full pass: no data of the aborted transaction is left, so its index entry
    # goes and its marker gets a delete horizon. The commit still guards data at 3.
    clean_log(log, now_ms=clock.now_ms, cleaner_offset=None)
    assert log.collect_aborted_transactions(0, 10) == []
    assert layout()[:3] == [(2, True, True), (3, False, False), (4, True, False)]
    # After the horizon the abort marker is removed.
    clean_log(log, now_ms=clock.now_ms + DAY_MS, cleaner_offset=None)
    assert [o for o, control, _ in layout() if control] == [4]
    assert read_all(log) == [(3, b"k", b"committed"), (5, b"p1", b"later"), (6, b"z", b"z")]
    log.close()


def test_open_transaction_bounds_cleaning(tmp_path: Path, clock: Clock) -> None:
    log = open_log(tmp_path / "t-0", compact_config(), clock)
    fill(log, 4, clock)
    log.append_as_leader(
        build_batch(
            [Record(value=b"t", key=b"k0")],
            producer_id=9,
            producer_epoch=0,
            base_sequence=0,
            transactional=True,
            now_ms=clock.now_ms,
        )
    )
    fill(log, 20, clock)
    log.roll()
    put(log, [(b"z", b"z")])
    plan = plan_cleaning(log, now_ms=clock.now_ms, cleaner_offset=None)
    assert plan.first_uncleanable == 4  # the open transaction's first offset
    result = clean_log(log, now_ms=clock.now_ms, cleaner_offset=None)
    assert result.end_offset == 4
    assert (4, b"k0", b"t") in read_all(log)  # undecided data untouched
    log.close()


def test_dirty_ratio_and_cleaner_checkpoint(tmp_path: Path, clock: Clock) -> None:
    busy = open_log(tmp_path / "busy-0", compact_config(), clock)
    quiet = open_log(tmp_path / "quiet-0", compact_config(), clock)
    plain = open_log(tmp_path / "plain-0", compact_config(cleanup_policy="delete"), clock)
    for log in (busy, quiet, plain):
        fill(log, 40, clock)
        log.roll()
    cleaner = LogCleaner(
        lambda: [plain, quiet, busy], clock=clock, checkpoint_path=tmp_path / "ckpt"
    )
    first = cleaner.clean_once()
    assert len(first) == 1
    second = cleaner.clean_once()
    assert len(second) == 1
    assert {first[0].topic, second[0].topic} == {"busy", "quiet"}
    assert cleaner.clean_once() == []  # nothing dirty any more; "plain" is not compacted
    file = OffsetCheckpointFile(tmp_path / "ckpt").read()
    assert file == {("busy", 0): 40, ("quiet", 0): 40}
    # A little new data: the dirty ratio stays below 0.5, nothing to do.
    fill(busy, 2, clock)
    busy.roll()
    assert cleaner.clean_once() == []
    plan = plan_cleaning(busy, now_ms=clock.now_ms, cleaner_offset=40)
    assert 0 < plan.dirty_ratio <= 0.5
    # Lots of new data: the dirtiest log is picked first.
    fill(busy, 60, clock)
    busy.roll()
    fill(quiet, 30, clock)
    quiet.roll()
    assert cleaner.clean_once()[0].topic == "busy"
    # A fresh cleaner resumes from the persisted checkpoints.
    again = LogCleaner(lambda: [quiet, busy], clock=clock, checkpoint_path=tmp_path / "ckpt")
    assert again.checkpoint_offset("busy", 0) == busy.segments[-1].base_offset
    for log in (busy, quiet, plain):
        log.close()


def test_max_compaction_lag_forces_cleaning(tmp_path: Path, clock: Clock) -> None:
    log = open_log(
        tmp_path / "t-0",
        compact_config(min_cleanable_dirty_ratio=0.99, max_compaction_lag_ms=3_600_000),
        clock,
    )
    fill(log, 30, clock)
    log.roll()
    cleaner = LogCleaner(lambda: [log], clock=clock)
    assert cleaner.clean_once()[0].end_offset == 30  # first pass: all dirty, ratio 1.0
    fill(log, 3, clock)
    log.roll()
    assert cleaner.clean_once() == []  # ratio well below 0.99
    clock.now_ms += 3_600_001
    assert cleaner.clean_once()[0].end_offset == 33  # overdue: cleaned anyway
    log.close()


@pytest.mark.parametrize("abort_at", [10, 40, 55])
def test_abort_is_safe_at_any_point(tmp_path: Path, clock: Clock, abort_at: int) -> None:
    log = open_log(tmp_path / "t-0", compact_config(), clock)
    fill(log, 30, clock)
    log.roll()
    before = read_all(log)
    calls = 0

    def stop() -> None:
        nonlocal calls
        calls += 1
        if calls >= abort_at:
            raise CleaningAbortedError("test abort")

    with pytest.raises(CleaningAbortedError):
        clean_log(log, now_ms=clock.now_ms, cleaner_offset=None, check_done=stop)
    after = read_all(log)
    if abort_at <= 30:  # still building the offset map: nothing was written
        assert after == before
    # Groups swapped before the abort are compacted, the rest untouched: a subset of the
    # records that still holds the latest value of every key.
    assert set(after) <= set(before)
    assert {k: v for _, k, v in after} == {k: v for _, k, v in before}
    assert not [p for p in (tmp_path / "t-0").iterdir() if p.name.endswith(".cleaned")]
    log.close()


@pytest.mark.parametrize("truncate_at", [1, 35, 52])
def test_truncation_during_cleaning_aborts_swap(
    tmp_path: Path, clock: Clock, truncate_at: int
) -> None:
    log = open_log(tmp_path / "t-0", compact_config(), clock)
    fill(log, 30, clock)
    log.roll()
    fill(log, 3, clock)
    calls = 0

    def truncate_midway() -> None:
        nonlocal calls
        calls += 1
        if calls == truncate_at:
            log.truncate_to(20)  # a follower diverged: offsets 20.. go

    try:
        clean_log(log, now_ms=clock.now_ms, cleaner_offset=None, check_done=truncate_midway)
    except CleaningAbortedError:
        pass
    assert calls >= truncate_at
    # Whatever was swapped in before the truncation, nothing at or above 20 came back.
    assert all(offset < 20 for offset, _, _ in read_all(log))
    assert log.log_end_offset == 20
    log.close()


def test_small_offset_map_cleans_in_steps(tmp_path: Path, clock: Clock) -> None:
    log = open_log(tmp_path / "t-0", compact_config(), clock)
    for i in range(40):
        put(log, [(f"k{i % 8}".encode(), f"v{i}".encode())])
    log.roll()
    first = clean_log(log, now_ms=clock.now_ms, cleaner_offset=None, max_map_entries=3)
    assert 0 < first.end_offset < 40
    checkpoint = first.end_offset
    for _ in range(20):
        if checkpoint >= 40:
            break
        checkpoint = clean_log(
            log, now_ms=clock.now_ms, cleaner_offset=checkpoint, max_map_entries=3
        ).end_offset
    assert checkpoint == 40
    final = clean_log(log, now_ms=clock.now_ms, cleaner_offset=0)  # one full pass
    assert final.end_offset == 40
    assert [o for o, _, _ in read_all(log)] == list(range(32, 40))
    log.close()


def test_corrupt_segment_marks_partition_uncleanable(tmp_path: Path, clock: Clock) -> None:
    log = open_log(tmp_path / "t-0", compact_config(), clock)
    fill(log, 30, clock)
    log.roll()
    first = log.segments[0]
    with open(first.log_path, "r+b") as f:
        f.seek(70)
        f.write(b"\xff\xff")  # inside the first batch's records: CRC mismatch
    cleaner = LogCleaner(lambda: [log], clock=clock)
    assert cleaner.clean_once() == []
    assert ("t", 0) in cleaner.uncleanable
    assert cleaner.clean_once() == []  # not retried forever
    log.close()


def test_background_threads_clean_and_stop(tmp_path: Path, clock: Clock) -> None:
    log = open_log(tmp_path / "t-0", compact_config(), clock)
    fill(log, 40, clock)
    log.roll()
    cleaner = LogCleaner(lambda: [log], clock=clock, threads=2, backoff_ms=10)
    cleaner.start()
    try:
        deadline = time.monotonic() + 10
        while cleaner.checkpoint_offset("t", 0) is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert cleaner.checkpoint_offset("t", 0) == 40
        cleaner.abort_and_pause("t", 0)
        fill(log, 40, clock)
        log.roll()
        time.sleep(0.05)
        assert cleaner.checkpoint_offset("t", 0) == 40  # paused
        cleaner.resume("t", 0)
    finally:
        cleaner.stop()
    log.close()


def test_checkpoint_maintenance(tmp_path: Path, clock: Clock) -> None:
    cleaner = LogCleaner(
        lambda: [], clock=clock, checkpoint_path=tmp_path / CLEANER_OFFSET_CHECKPOINT
    )
    cleaner._checkpoints[("t", 0)] = 50
    cleaner.truncate_checkpoint("t", 0, 30)
    assert cleaner.checkpoint_offset("t", 0) == 30
    cleaner.truncate_checkpoint("t", 0, 40)  # never raised by truncation
    assert cleaner.checkpoint_offset("t", 0) == 30
    cleaner.remove_partition("t", 0)
    assert cleaner.checkpoint_offset("t", 0) is None
    assert OffsetCheckpointFile(tmp_path / CLEANER_OFFSET_CHECKPOINT).read() == {}
    with pytest.raises(TypeError):
        LogCleaner(42)
    with pytest.raises(ValueError):
        LogCleaner(lambda: [], threads=0)


def test_offset_map_bound() -> None:
    offsets = OffsetMap(2)
    assert offsets.put(b"a", 1) and offsets.put(b"b", 2)
    assert offsets.put(b"a", 3)  # an existing key always fits
    assert not offsets.put(b"c", 4)
    assert offsets.get(b"a") == 3 and offsets.get(b"c") == -1
    with pytest.raises(ValueError):
        OffsetMap(0)


def test_grouping_respects_sizes(tmp_path: Path, clock: Clock) -> None:
    log = open_log(tmp_path / "t-0", compact_config(segment_bytes=400), clock)
    fill(log, 30, clock)
    segments = log.segments[:-1]
    sizes = [s.size for s in segments]
    groups = group_segments_by_size(segments, max(sizes) * 2, 10_000_000, 30)
    assert [s for g in groups for s in g] == segments
    assert all(sum(s.size for s in g) <= max(sizes) * 2 for g in groups)
    assert all(len(g) >= 1 for g in groups)
    assert len(group_segments_by_size(segments, 1, 10_000_000, 30)) == len(segments)
    # Headers of every batch are still valid after grouping and cleaning.
    clean_log(log, now_ms=clock.now_ms, cleaner_offset=None)
    for segment in log.segments:
        data = segment.read_bytes(0, segment.size)
        assert sum(h.size for _, h in iter_headers(data)) == segment.size
    log.close()


def test_with_log_manager_checkpoint_file(tmp_path: Path, clock: Clock) -> None:
    from odradek.storage.log_manager import LogManager

    manager = LogManager(tmp_path, compact_config(), clock=clock)
    manager.startup()
    log = manager.get_or_create_log("orders", 0)
    fill(log, 30, clock)
    log.roll()
    manager.get_or_create_log("plain", 0, compact_config(cleanup_policy="delete"))
    cleaner = LogCleaner(manager, clock=clock)
    [result] = cleaner.clean_once()
    assert (result.topic, result.partition, result.end_offset) == ("orders", 0, 30)
    saved = OffsetCheckpointFile(tmp_path / CLEANER_OFFSET_CHECKPOINT).read()
    assert saved == {("orders", 0): 30}
    manager.shutdown()
    # After a restart the logs reopen cleanly and the cleaner resumes from its checkpoint.
    again = LogManager(tmp_path, compact_config(), clock=clock)
    again.startup()
    assert [o for o, _, _ in read_all(again.get_log("orders", 0))] == [27, 28, 29]
    assert LogCleaner(again, clock=clock).checkpoint_offset("orders", 0) == 30
    again.shutdown()


def test_deleted_log_is_not_marked_uncleanable(tmp_path: Path, clock: Clock) -> None:
    log = open_log(tmp_path / "t-0", compact_config(), clock)
    fill(log, 30, clock)
    log.roll()
    cleaner = LogCleaner(lambda: [log], clock=clock)
    original = cleaner._grab_filthiest

    def grab_then_close(now_ms: int):
        grabbed = original(now_ms)
        log.close()  # deleted by the controller right after the pass began
        return grabbed

    cleaner._grab_filthiest = grab_then_close  # type: ignore[method-assign]
    assert cleaner.clean_once() == []
    assert cleaner.uncleanable == set()


def test_tombstones_go_once_their_horizon_passes_without_new_dirt(tmp_path):
    """KIP-534: a pass that keeps a tombstone leaves a delete horizon; once it passes, the
    cleaner revisits the log even though nothing new made it dirty."""
    from odradek.records.batch import Record, build_batch
    from odradek.storage.config import LogConfig
    from odradek.storage.log import Log
    from odradek.storage.log_cleaner import LogCleaner

    now = [1_000.0]
    config = LogConfig.from_properties(
        {
            "cleanup.policy": "compact",
            "segment.bytes": "600",
            "delete.retention.ms": "5000",
            "min.cleanable.dirty.ratio": "0.01",
        }
    )
    log_ = Log.open(tmp_path / "t-0", config, clock=lambda: now[0])
    for i in range(30):
        value = None if i == 29 else b"v%d" % i
        log_.append_as_leader(build_batch([Record(key=b"k%d" % (i % 3), value=value)]))
    log_.roll()
    cleaner = LogCleaner(lambda: [log_], clock=lambda: now[0])

    def keyed() -> list[tuple[bytes, bytes | None]]:
        from odradek.records.batch import decode_batches

        data = log_.read(log_.log_start_offset, 1 << 20).read_bytes()
        return [(r.key, r.value) for b in decode_batches(data) for r in b.records]

    assert cleaner.clean_once()
    assert (b"k2", None) in keyed()  # kept: its horizon is now + 5 s
    assert cleaner.clean_once() == []  # not dirty, horizon not reached
    now[0] += 6
    assert cleaner.clean_once(), "the passed horizon should make the log cleanable"
    assert (b"k2", None) not in keyed()
    assert cleaner.clean_once() == []  # and it does not come back again
    log_.close()
