"""Incremental fetch sessions (KIP-227): the broker remembers what a fetcher asks for.

A fetcher that sends ``session_id`` 0 and epoch 0 (a *full* request) gets a session id
back; from then on it sends epoch 1, 2, ... with only the partitions whose fetch offset or
limits changed, plus ``forgotten_topics_data`` for the ones it no longer wants. The
broker reads every partition of the session, and answers only the partitions that have
something new (records, a moved high watermark or log start offset, an error), so a
consumer of a thousand idle partitions sends and receives a few bytes per fetch.

The rules follow Kafka's ``FetchSession.scala`` (``FetchManager.newContext`` and the
contexts it returns, ``FetchSessionCache``):

* epoch -1 (``FINAL_EPOCH``) with any session id: close that session and answer this
  request without one (a *sessionless* fetch, session id 0 in the answer);
* epoch 0 (``INITIAL_EPOCH``): close the named session, if any, and start a new one when
  the cache has room or may evict one;
* epoch > 0: an incremental request. An unknown id is ``FETCH_SESSION_ID_NOT_FOUND``, an
  epoch other than the session's is ``INVALID_FETCH_SESSION_EPOCH``, and switching between
  topic names (Fetch < 13) and topic ids (Fetch >= 13) inside one session is
  ``FETCH_SESSION_TOPIC_ID_ERROR``; those answers carry no partitions and session id 0.
  A session left with no partitions is closed and the request answered sessionless.

The cache holds ``max.incremental.fetch.session.cache.slots`` sessions (Kafka's default
1000). When it is full a new session may evict one that is stale (unused for two minutes,
Kafka's fixed ``MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS``); otherwise a follower's
session may evict a consumer's, and a session with more partitions one with fewer, but
only a session that was older than two minutes when it was last used.

Everything here runs on the event loop, so there are no locks; the one race Kafka guards
against (two requests of one session in flight, the first finishing after the second
started) is checked the same way: the answer compares the session's epoch with the one
the request moved it to.
"""

from __future__ import annotations

import random
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from odradek.broker.replica_manager import ReadResult

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
DEFAULT_CACHE_SLOTS = 1000
# Kafka's KafkaServer.MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS: not a config.
EVICTION_MS = 120_000
_MAX_INT32 = 0x7FFFFFFF

Key = tuple[str, int]  # (topic name, partition)


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch``: FINAL stays FINAL, and the counter wraps to 1, not 0."""
    if epoch < 0:
        return FINAL_EPOCH
    if epoch == _MAX_INT32:
        return 1
    return epoch + 1


@dataclass(slots=True)
class PartitionRequest:
    """What a fetch asks of one partition (the request fields a session remembers)."""

    fetch_offset: int
    max_bytes: int
    leader_epoch: int = -1
    log_start_offset: int = -1
    topic_id: uuid.UUID | None = None


@dataclass(slots=True)
class CachedPartition:
    request: PartitionRequest
    high_watermark: int = -1
    local_log_start_offset: int = -1

    def must_respond(self, result: ReadResult, update: bool) -> bool:
        """Whether the answer must list this partition (and, with ``update``, remember
        what it now tells the fetcher), as Kafka's ``maybeUpdateResponseData``."""
        respond = result.size > 0
        if self.high_watermark != result.high_watermark:
            respond = True
            if update:
                self.high_watermark = result.high_watermark
        if self.local_log_start_offset != result.log_start_offset:
            respond = True
            if update:
                self.local_log_start_offset = result.log_start_offset
        if result.preferred_read_replica >= 0:
            respond = True  # the fetcher must learn where to read from (KIP-392)
        if result.error_code != 0:
            # Forget the high watermark so the partition is sent again once the error goes.
            respond = True
            if update:
                self.high_watermark = -1
        return respond


class FetchSession:
    def __init__(
        self,
        session_id: int,
        privileged: bool,
        partitions: OrderedDict[Key, CachedPartition],
        now_ms: int,
        uses_topic_ids: bool,
    ) -> None:
        self.id = session_id
        self.privileged = privileged
        self.partitions = partitions  # in the order they are read; answered ones go last
        self.creation_ms = now_ms
        self.last_used_ms = now_ms
        self.epoch = next_epoch(INITIAL_EPOCH)
        self.uses_topic_ids = uses_topic_ids
        self.cached_size = -1  # size when last touched; -1 while not in the cache
        # Set by FetchSessionCache.touch, as Kafka's evictableByAll / evictableByPrivileged.
        self.evictable_by_all = False
        self.evictable_by_privileged = False

    def evictable_key(self) -> tuple[bool, int, int]:
        return (self.privileged, self.cached_size, self.id)

    def update(self, fetch_data: Iterable[tuple[Key, PartitionRequest]], forget: Iterable[Key]):
        """Apply an incremental request: new or changed partitions, then forgotten ones."""
        for key, request in fetch_data:
            cached = self.partitions.get(key)
            if cached is None:
                self.partitions[key] = CachedPartition(request)
            else:
                cached.request = request
        for key in forget:
            self.partitions.pop(key, None)


class FetchSessionCache:
    """The broker's fetch sessions, at most ``max_entries`` of them."""

    def __init__(
        self,
        max_entries: int = DEFAULT_CACHE_SLOTS,
        eviction_ms: int = EVICTION_MS,
        clock_ms=lambda: int(time.monotonic() * 1000),
    ) -> None:
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        self.clock_ms = clock_ms
        self.sessions: dict[int, FetchSession] = {}
        self.total_partitions = 0
        self.evictions = 0
        # Requests answered through each kind of context (for metrics and tests).
        self.sessionless_fetches = 0
        self.full_fetches = 0
        self.incremental_fetches = 0
        self.session_errors = 0

    def __len__(self) -> int:
        return len(self.sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self.sessions.get(session_id)

    def _new_id(self) -> int:
        while True:
            session_id = random.randint(1, _MAX_INT32 - 1)
            if session_id not in self.sessions:
                return session_id

    def maybe_create(
        self,
        privileged: bool,
        partitions: OrderedDict[Key, CachedPartition],
        uses_topic_ids: bool,
    ) -> int:
        """A new session's id, or INVALID_SESSION_ID when there is no room for it."""
        now = self.clock_ms()
        if len(self.sessions) >= self.max_entries and not self.try_evict(
            privileged, (privileged, len(partitions), 0), now
        ):
            return INVALID_SESSION_ID
        session = FetchSession(self._new_id(), privileged, partitions, now, uses_topic_ids)
        self.sessions[session.id] = session
        self.touch(session, now)
        return session.id

    def try_evict(self, privileged: bool, key: tuple[bool, int, int], now: int) -> bool:
        """Make room for a session described by ``key`` (privileged, size, 0), if any
        existing session is worth less: first a stale one, then the least valuable one
        among those this newcomer may evict."""
        if not self.sessions:
            return False
        oldest = min(self.sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now - oldest.last_used_ms > self.eviction_ms:
            self._evict(oldest)
            return True
        candidates = [
            s
            for s in self.sessions.values()
            if (s.evictable_by_privileged if privileged else s.evictable_by_all)
        ]
        if not candidates:
            return False
        cheapest = min(candidates, key=FetchSession.evictable_key)
        if key < cheapest.evictable_key():
            return False
        self._evict(cheapest)
        return True

    def _evict(self, session: FetchSession) -> None:
        self.remove(session.id)
        self.evictions += 1

    def remove(self, session_id: int) -> FetchSession | None:
        session = self.sessions.pop(session_id, None)
        if session is not None:
            self.total_partitions -= session.cached_size
            session.cached_size = -1
        return session

    def touch(self, session: FetchSession, now: int) -> None:
        """Note a use of ``session``: its last-used time, size and what may evict it."""
        session.last_used_ms = now
        if session.cached_size != -1:
            self.total_partitions -= session.cached_size
        session.cached_size = len(session.partitions)
        self.total_partitions += session.cached_size
        old_enough = now - session.creation_ms > self.eviction_ms
        session.evictable_by_privileged = (not session.privileged) or old_enough
        session.evictable_by_all = old_enough


class FetchContext:
    """How one fetch request is read and answered; see :meth:`FetchManager.new_context`.

    ``items`` are the partitions to read, in order; ``finish`` turns the read results into
    (error code, session id, results to send).
    """

    error: int = 0
    session_id: int = INVALID_SESSION_ID
    items: list[tuple[Key, PartitionRequest]] = []

    def finish(self, results: list[tuple[str, int, ReadResult]]):
        return ErrorCode.none, INVALID_SESSION_ID, results


class SessionErrorContext(FetchContext):
    def __init__(self, error: int) -> None:
        self.error = error
        self.items = []

    def finish(self, results):
        return self.error, INVALID_SESSION_ID, []


class SessionlessContext(FetchContext):
    def __init__(self, fetch_data: list[tuple[Key, PartitionRequest]]) -> None:
        self.items = fetch_data


class FullContext(FetchContext):
    def __init__(
        self,
        cache: FetchSessionCache,
        fetch_data: list[tuple[Key, PartitionRequest]],
        privileged: bool,
        uses_topic_ids: bool,
    ) -> None:
        self.cache = cache
        self.items = fetch_data
        self.privileged = privileged
        self.uses_topic_ids = uses_topic_ids

    def finish(self, results):
        partitions: OrderedDict[Key, CachedPartition] = OrderedDict()
        requests = dict(self.items)
        for topic, partition, result in results:
            partitions[(topic, partition)] = CachedPartition(
                requests[(topic, partition)], result.high_watermark, result.log_start_offset
            )
        session_id = self.cache.maybe_create(self.privileged, partitions, self.uses_topic_ids)
        return ErrorCode.none, session_id, results


class IncrementalContext(FetchContext):
    def __init__(self, session: FetchSession, request_epoch: int) -> None:
        self.session = session
        self.expected_epoch = next_epoch(request_epoch)
        self.items = [(key, cached.request) for key, cached in session.partitions.items()]

    def finish(self, results):
        session = self.session
        if session.epoch != self.expected_epoch:
            # Another request of this session was answered while this one waited.
            return ErrorCode.invalid_fetch_session_epoch, session.id, []
        answered = []
        for topic, partition, result in results:
            key = (topic, partition)
            cached = session.partitions.get(key)
            if cached is None or cached.must_respond(result, update=True):
                answered.append((topic, partition, result))
                if cached is not None:
                    session.partitions.move_to_end(key)  # fairness: read it last next time
        return ErrorCode.none, session.id, answered


class FetchManager:
    """Picks the context of each fetch request from its session id and epoch."""

    def __init__(self, cache: FetchSessionCache) -> None:
        self.cache = cache

    def new_context(
        self,
        session_id: int,
        epoch: int,
        fetch_data: list[tuple[Key, PartitionRequest]],
        forget: list[Key],
        *,
        privileged: bool,
        uses_topic_ids: bool,
    ) -> FetchContext:
        cache = self.cache
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                cache.remove(session_id)  # a full request closes the session it names
            if epoch == FINAL_EPOCH:
                cache.sessionless_fetches += 1
                return SessionlessContext(fetch_data)
            cache.full_fetches += 1
            return FullContext(cache, fetch_data, privileged, uses_topic_ids)
        session = cache.get(session_id)
        if session is None:
            cache.session_errors += 1
            return SessionErrorContext(ErrorCode.fetch_session_id_not_found)
        if session.epoch != epoch:
            cache.session_errors += 1
            return SessionErrorContext(ErrorCode.invalid_fetch_session_epoch)
        if session.uses_topic_ids != uses_topic_ids:
            cache.session_errors += 1
            return SessionErrorContext(ErrorCode.fetch_session_topic_id_error)
        session.update(fetch_data, forget)
        if not session.partitions:
            cache.remove(session.id)
            return SessionlessContext(fetch_data)
        cache.touch(session, cache.clock_ms())
        session.epoch = next_epoch(session.epoch)
        cache.incremental_fetches += 1
        return IncrementalContext(session, epoch)
