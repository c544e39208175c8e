"""Unit tests of the fetch session cache and the contexts FetchManager picks (KIP-227)."""

from __future__ import annotations

from collections import OrderedDict

from kio.schema.errors import ErrorCode

from odradek.broker.fetch_session import (
    EVICTION_MS,
    INVALID_SESSION_ID,
    CachedPartition,
    FetchManager,
    FetchSessionCache,
    FullContext,
    IncrementalContext,
    PartitionRequest,
    SessionErrorContext,
    SessionlessContext,
    next_epoch,
)
from odradek.broker.replica_manager import ReadResult


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def _data(*keys: tuple[str, int], offset: int = 0):
    return [(key, PartitionRequest(offset, 1 << 20)) for key in keys]


def _read(items, hw: dict | None = None, size: dict | None = None):
    """Results as the handler would read them: (topic, partition, ReadResult)."""
    return [
        (t, p, ReadResult(high_watermark=(hw or {}).get(key, 0), size=(size or {}).get(key, 0)))
        for key in (k for k, _ in items)
        for t, p in [key]
    ]


def _start(manager: FetchManager, *keys, privileged: bool = False) -> int:
    context = manager.new_context(
        0, 0, _data(*keys), [], privileged=privileged, uses_topic_ids=False
    )
    assert isinstance(context, FullContext)
    _, session_id, _ = context.finish(_read(context.items))
    return session_id


def _partitions(n: int) -> OrderedDict:
    return OrderedDict(((f"t{i}", 0), CachedPartition(PartitionRequest(0, 1))) for i in range(n))


def test_next_epoch_wraps_to_one_and_final_stays_final() -> None:
    assert next_epoch(0) == 1
    assert next_epoch(41) == 42
    assert next_epoch(0x7FFFFFFF) == 1
    assert next_epoch(-1) == -1


def test_full_request_creates_session_and_incremental_reads_all_its_partitions() -> None:
    manager = FetchManager(FetchSessionCache())
    session_id = _start(manager, ("a", 0), ("a", 1), ("b", 0))
    assert session_id != INVALID_SESSION_ID
    assert manager.cache.total_partitions == 3
    context = manager.new_context(
        session_id, 1, _data(("a", 1), offset=7), [], privileged=False, uses_topic_ids=False
    )
    assert isinstance(context, IncrementalContext)
    offsets = {key: wanted.fetch_offset for key, wanted in context.items}
    assert offsets == {("a", 0): 0, ("a", 1): 7, ("b", 0): 0}
    assert manager.cache.get(session_id).epoch == 2


def test_incremental_answer_omits_unchanged_and_rotates_answered_last() -> None:
    manager = FetchManager(FetchSessionCache())
    session_id = _start(manager, ("a", 0), ("a", 1), ("a", 2))
    context = manager.new_context(session_id, 1, [], [], privileged=False, uses_topic_ids=False)
    results = _read(context.items, hw={("a", 1): 5}, size={("a", 1): 100})
    error, answered_id, answered = context.finish(results)
    assert (error, answered_id) == (ErrorCode.none, session_id)
    assert [(t, p) for t, p, _ in answered] == [("a", 1)]
    # The answered partition is read last next time (Kafka's fairness rotation).
    assert list(manager.cache.get(session_id).partitions) == [("a", 0), ("a", 2), ("a", 1)]
    # Same high watermark, no records: nothing to say about it any more.
    context = manager.new_context(session_id, 2, [], [], privileged=False, uses_topic_ids=False)
    _, _, answered = context.finish(_read(context.items, hw={("a", 1): 5}))
    assert answered == []


def test_errors_and_log_start_moves_are_always_answered() -> None:
    cached = CachedPartition(PartitionRequest(0, 1), high_watermark=5, local_log_start_offset=0)
    assert not cached.must_respond(ReadResult(high_watermark=5, log_start_offset=0), True)
    assert cached.must_respond(ReadResult(high_watermark=5, log_start_offset=2), True)
    assert not cached.must_respond(ReadResult(high_watermark=5, log_start_offset=2), True)
    assert cached.must_respond(ReadResult(error_code=6, high_watermark=5, log_start_offset=2), True)
    # After an error the high watermark is forgotten, so recovery is answered once.
    assert cached.high_watermark == -1
    assert cached.must_respond(ReadResult(high_watermark=5, log_start_offset=2), True)


def test_session_errors() -> None:
    manager = FetchManager(FetchSessionCache())
    unknown = manager.new_context(99, 1, [], [], privileged=False, uses_topic_ids=False)
    assert isinstance(unknown, SessionErrorContext)
    assert unknown.error == ErrorCode.fetch_session_id_not_found
    assert unknown.finish([]) == (ErrorCode.fetch_session_id_not_found, INVALID_SESSION_ID, [])

    session_id = _start(manager, ("a", 0))
    wrong = manager.new_context(session_id, 3, [], [], privileged=False, uses_topic_ids=False)
    assert wrong.error == ErrorCode.invalid_fetch_session_epoch
    assert manager.cache.get(session_id).epoch == 1  # a bad epoch does not move it

    ids = manager.new_context(session_id, 1, [], [], privileged=False, uses_topic_ids=True)
    assert ids.error == ErrorCode.fetch_session_topic_id_error
    assert manager.cache.session_errors == 3


def test_duplicate_request_in_flight_gets_invalid_epoch() -> None:
    manager = FetchManager(FetchSessionCache())
    session_id = _start(manager, ("a", 0))
    first = manager.new_context(session_id, 1, [], [], privileged=False, uses_topic_ids=False)
    second = manager.new_context(session_id, 2, [], [], privileged=False, uses_topic_ids=False)
    assert second.finish(_read(second.items))[0] == ErrorCode.none
    error, answered_id, answered = first.finish(_read(first.items))
    assert (error, answered_id, answered) == (ErrorCode.invalid_fetch_session_epoch, session_id, [])


def test_forgetting_every_partition_closes_the_session() -> None:
    manager = FetchManager(FetchSessionCache())
    session_id = _start(manager, ("a", 0), ("a", 1))
    context = manager.new_context(
        session_id, 1, [], [("a", 0), ("a", 1)], privileged=False, uses_topic_ids=False
    )
    assert isinstance(context, SessionlessContext)
    assert manager.cache.get(session_id) is None
    assert manager.cache.total_partitions == 0


def test_full_request_closes_named_session_and_final_epoch_is_sessionless() -> None:
    manager = FetchManager(FetchSessionCache())
    old = _start(manager, ("a", 0))
    context = manager.new_context(
        old, 0, _data(("a", 0)), [], privileged=False, uses_topic_ids=False
    )
    assert manager.cache.get(old) is None
    _, new, _ = context.finish(_read(context.items))
    assert new not in (old, INVALID_SESSION_ID)
    final = manager.new_context(
        new, -1, _data(("a", 0)), [], privileged=False, uses_topic_ids=False
    )
    assert isinstance(final, SessionlessContext)
    assert final.finish([])[1] == INVALID_SESSION_ID
    assert len(manager.cache) == 0
    # What the metrics count: three requests with epoch 0, one with epoch -1.
    assert (manager.cache.full_fetches, manager.cache.sessionless_fetches) == (2, 1)


def test_full_cache_refuses_new_sessions_while_all_are_young() -> None:
    clock = Clock()
    cache = FetchSessionCache(max_entries=2, clock_ms=clock)
    assert cache.maybe_create(False, _partitions(1), False) != INVALID_SESSION_ID
    assert cache.maybe_create(False, _partitions(1), False) != INVALID_SESSION_ID
    assert cache.maybe_create(False, _partitions(10), False) == INVALID_SESSION_ID
    assert len(cache) == 2 and cache.evictions == 0


def test_stale_session_is_evicted_first() -> None:
    clock = Clock()
    cache = FetchSessionCache(max_entries=2, clock_ms=clock)
    stale = cache.maybe_create(False, _partitions(50), False)
    clock.now += 10
    fresh = cache.maybe_create(False, _partitions(50), False)
    clock.now += EVICTION_MS + 1 - 10
    cache.touch(cache.get(fresh), clock.now)
    newcomer = cache.maybe_create(False, _partitions(1), False)
    assert newcomer != INVALID_SESSION_ID
    assert cache.get(stale) is None and cache.get(fresh) is not None
    assert cache.evictions == 1


def test_privileged_session_evicts_young_consumer_session() -> None:
    clock = Clock()
    cache = FetchSessionCache(max_entries=1, clock_ms=clock)
    consumer = cache.maybe_create(False, _partitions(100), False)
    # A consumer may not evict another young consumer, whatever its size...
    assert cache.maybe_create(False, _partitions(500), False) == INVALID_SESSION_ID
    # ...but a follower may, even with fewer partitions.
    follower = cache.maybe_create(True, _partitions(1), False)
    assert follower != INVALID_SESSION_ID and cache.get(consumer) is None
    # And a young follower session is safe from other followers.
    assert cache.maybe_create(True, _partitions(500), False) == INVALID_SESSION_ID


def test_bigger_session_evicts_smaller_one_that_was_old_when_last_used() -> None:
    clock = Clock()
    cache = FetchSessionCache(max_entries=2, clock_ms=clock)
    small = cache.maybe_create(False, _partitions(2), False)
    large = cache.maybe_create(False, _partitions(20), False)
    clock.now += EVICTION_MS + 1
    for session_id in (small, large):  # both in use: not stale, but old enough to evict
        cache.touch(cache.get(session_id), clock.now)
    assert cache.maybe_create(False, _partitions(1), False) == INVALID_SESSION_ID
    medium = cache.maybe_create(False, _partitions(5), False)
    assert medium != INVALID_SESSION_ID
    assert cache.get(small) is None and cache.get(large) is not None
    assert cache.total_partitions == 25
