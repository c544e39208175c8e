"""Followers fetch from their leaders (Kafka's ReplicaFetcherManager / ReplicaFetcherThread).

A broker that follows partitions runs ``num.replica.fetchers`` fetcher tasks per leader
broker; a partition goes to one of them by a hash of its name. Each task loops:

1. partitions new to it (or whose fetch went out of range) first ask the leader
   OffsetForLeaderEpoch for the end of the follower's latest epoch and truncate the local
   log to where the two diverge (KIP-101/KIP-279), so a follower never keeps records its
   new leader does not have;
2. then one Fetch (v12, ``replica_id`` = this broker) for all of them, from each log end
   offset, waiting up to ``replica.fetch.wait.max.ms`` for ``replica.fetch.min.bytes``.
   Fetches go through an incremental fetch session (KIP-227) as Kafka's do: after the
   first, a request names only partitions whose fetch offset changed, and the leader
   answers only partitions with news;
3. the batches are appended with ``append_as_follower``, which keeps offsets, leader
   epochs and producer state as the leader wrote them; the follower takes the leader's
   high watermark (capped at its own log end) and log start offset.

Errors back off ``replica.fetch.backoff.ms``; a lost connection is opened again. The
leader's address (its inter-broker listener) comes from LeaderAndIsr's live leaders, else
the metadata cache; the connection is secured as that listener demands (TLS, SASL). A
leader that refuses this broker (wrong credentials, or no ClusterAction for its
principal under an authorizer) is reported in one ERROR line, repeated only at DEBUG
while nothing changes: the follower stays out of the ISR until it is fixed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import request as fetch_v12
from kio.schema.offset_for_leader_epoch.v4 import request as epoch_v4

from odradek import timeouts
from odradek.broker.fetch_session_handler import FetchSessionHandler
from odradek.broker.replica_manager import Partition, ReplicaManager
from odradek.broker.replication_quota import ReplicationQuota
from odradek.cluster.controller.channel import exchange
from odradek.cluster.peer import AuthenticationError, Connector, PeerLink, open_plaintext
from odradek.storage.errors import StorageError

log = logging.getLogger(__name__)

FETCH, FETCH_VERSION = 1, 12
OFFSET_FOR_LEADER_EPOCH, OFFSET_FOR_LEADER_EPOCH_VERSION = 23, 4
UNDEFINED_EPOCH = -1
# A leader refusing this broker as a follower (Kafka answers a follower without
# ClusterAction TOPIC_AUTHORIZATION_FAILED on Fetch, and on OffsetForLeaderEpoch when it
# may not describe the topic either).
_REFUSALS = (ErrorCode.cluster_authorization_failed, ErrorCode.topic_authorization_failed)


@dataclass(frozen=True)
class FetcherSettings:
    """Kafka's replica.fetch.* keys."""

    max_bytes: int = 1048576
    response_max_bytes: int = 10485760
    min_bytes: int = 1
    wait_max_ms: int = 500
    backoff_ms: int = 1000
    socket_timeout_ms: int = 30000
    num_fetchers: int = 1

    @classmethod
    def from_config(cls, get: Callable[[str], Any]) -> FetcherSettings:
        return cls(
            max_bytes=get("replica.fetch.max.bytes"),
            response_max_bytes=get("replica.fetch.response.max.bytes"),
            min_bytes=get("replica.fetch.min.bytes"),
            wait_max_ms=get("replica.fetch.wait.max.ms"),
            backoff_ms=get("replica.fetch.backoff.ms"),
            socket_timeout_ms=get("replica.socket.timeout.ms"),
            num_fetchers=get("num.replica.fetchers"),
        )


@dataclass
class _FetchState:
    leader_epoch: int
    truncating: bool = True


class ReplicaFetcher:
    """One task fetching a set of partitions from one leader broker."""

    def __init__(
        self,
        broker_id: int,
        leader_id: int,
        fetcher_id: int,
        replica_manager: ReplicaManager,
        address_of: Callable[[int], tuple[str, int] | None],
        settings: FetcherSettings,
        connector: Connector = open_plaintext,
    ) -> None:
        self.broker_id = broker_id
        self.leader_id = leader_id
        self.connector = connector
        self._last_refusal = ""  # logged once at ERROR, then at DEBUG while it repeats
        self.name = f"ReplicaFetcher-{fetcher_id}-{leader_id}"
        self.replica_manager = replica_manager
        self.address_of = address_of
        self.settings = settings
        self.partitions: dict[tuple[str, int], _FetchState] = {}
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._link: PeerLink | None = None
        self._correlation_id = 0
        # Incremental fetch sessions (KIP-227) with the leader, as Kafka's fetcher uses.
        self._session = FetchSessionHandler()
        # Follower throttle (KIP-73) and "is this broker in the partition's ISR?", set by
        # the manager; out-of-sync throttled partitions are left out over the quota.
        self.quota: ReplicationQuota | None = None
        self.in_sync: Callable[[str, int], bool] = lambda _topic, _index: False

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=self.name)

    def add(self, topic: str, index: int, leader_epoch: int) -> None:
        self.partitions[(topic, index)] = _FetchState(leader_epoch)
        self._changed.set()

    def remove(self, topic: str, index: int) -> None:
        self.partitions.pop((topic, index), None)

    async def close(self) -> None:
        if self._task is not None:
            await timeouts.cancel_until_done(self._task)
        self._disconnect()

    # --- the loop -----------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            if not self.partitions:
                self._disconnect()
                self._changed.clear()
                await self._changed.wait()
                continue
            try:
                await self._connect()
                if any(state.truncating for state in self.partitions.values()):
                    await self._truncate()
                if await self._fetch():
                    self._last_refusal = ""  # a later refusal is news again
                else:
                    await asyncio.sleep(self.settings.backoff_ms / 1000)
            except asyncio.CancelledError:
                raise
            except AuthenticationError as exc:
                self._refused(f"cannot authenticate to leader {self.leader_id}: {exc}")
                self._disconnect()
                await asyncio.sleep(self.settings.backoff_ms / 1000)
            except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError) as exc:
                log.warning(
                    "%s: connection to broker %d failed: %s", self.name, self.leader_id, exc
                )
                self._disconnect()
                await asyncio.sleep(self.settings.backoff_ms / 1000)
            except Exception:
                log.exception("%s: fetch failed", self.name)
                self._disconnect()
                await asyncio.sleep(self.settings.backoff_ms / 1000)

    def _refused(self, reason: str) -> None:
        """One ERROR line per distinct refusal, not one per back-off."""
        level = logging.DEBUG if reason == self._last_refusal else logging.ERROR
        self._last_refusal = reason
        log.log(level, "%s: %s; this broker stays out of the ISR", self.name, reason)

    def _refusal(self, api: str, code: ErrorCode) -> str:
        return (
            f"leader {self.leader_id} refused {api} from this broker: {code.name.upper()} "
            "(the principal this broker authenticates as on the inter-broker listener needs "
            "ClusterAction on the Cluster: make it a super user)"
        )

    async def _connect(self) -> None:
        if self._link is not None and self._link.stale:
            self._disconnect()  # its SASL session ends soon: a fresh one
        if self._link is not None:
            return
        address = self.address_of(self.leader_id)
        if address is None:
            raise OSError(f"broker {self.leader_id} is not known to the metadata cache yet")
        self._link = await self.connector(
            *address, self.settings.socket_timeout_ms / 1000, self.name
        )

    def _disconnect(self) -> None:
        if self._link is not None:
            self._link.close()
        self._link = None
        # A request may have been lost in flight: the leader's session epoch is unknown.
        self._session.reset()

    async def _send(self, api_key: int, version: int, request: Any, timeout_s: float) -> Any:
        assert self._link is not None
        self._correlation_id += 1
        return await timeouts.wait_for(
            exchange(
                self._link.reader,
                self._link.writer,
                api_key,
                version,
                request,
                self._correlation_id,
                self.name,
            ),
            timeout_s,
        )

    def _current(self, key: tuple[str, int], state: _FetchState) -> Partition | None:
        """The hosted partition if this broker still follows it at this epoch."""
        if self.partitions.get(key) is not state:
            return None
        partition = self.replica_manager.partition(*key)
        if (
            partition is None
            or partition.leader_id != self.leader_id
            or partition.leader_epoch != state.leader_epoch
        ):
            return None
        return partition

    # --- truncation (KIP-101/279) -------------------------------------------------

    async def _truncate(self) -> None:
        asked: dict[tuple[str, int], tuple[_FetchState, int]] = {}
        topics: dict[str, list[Any]] = {}
        for key, state in list(self.partitions.items()):
            partition = self._current(key, state) if state.truncating else None
            if partition is None:
                continue
            latest = partition.log.leader_epoch_cache.latest_epoch()
            if latest is None:
                # Nothing written under any epoch: nothing that could diverge.
                state.truncating = False
                continue
            asked[key] = (state, latest)
            topics.setdefault(key[0], []).append(
                epoch_v4.OffsetForLeaderPartition(
                    partition=key[1], current_leader_epoch=state.leader_epoch, leader_epoch=latest
                )
            )
        if not topics:
            return
        request = epoch_v4.OffsetForLeaderEpochRequest(
            replica_id=self.broker_id,
            topics=tuple(
                epoch_v4.OffsetForLeaderTopic(topic=name, partitions=tuple(parts))
                for name, parts in topics.items()
            ),
        )
        response = await self._send(
            OFFSET_FOR_LEADER_EPOCH,
            OFFSET_FOR_LEADER_EPOCH_VERSION,
            request,
            self.settings.socket_timeout_ms / 1000,
        )
        for topic_result in response.topics:
            for result in topic_result.partitions:
                key = (topic_result.topic, int(result.partition))
                if key not in asked:
                    continue
                state, _latest = asked[key]
                partition = self._current(key, state)
                if partition is None:
                    continue
                if result.error_code in _REFUSALS:
                    self._refused(self._refusal("OffsetForLeaderEpoch", result.error_code))
                    continue
                if result.error_code != ErrorCode.none:
                    log.info(
                        "%s: OffsetForLeaderEpoch for %s-%d: %s",
                        self.name,
                        key[0],
                        key[1],
                        result.error_code.name,
                    )
                    continue  # retried on the next round
                await self._truncate_to_leader(
                    partition, int(result.leader_epoch), int(result.end_offset)
                )
                state.truncating = False

    async def _truncate_to_leader(
        self, partition: Partition, leader_epoch: int, leader_end_offset: int
    ) -> None:
        """Kafka's getOffsetTruncationState: the divergence point of the two logs."""
        log_ = partition.log
        leo = log_.log_end_offset
        if leader_epoch == UNDEFINED_EPOCH:
            target = min(partition.high_watermark, leo)
        else:
            local_epoch, local_end = log_.leader_epoch_cache.end_offset_for(leader_epoch, leo)
            if local_epoch == leader_epoch:
                target = min(leader_end_offset, local_end)
            else:
                target = min(leader_end_offset, leo)
        if target < leo:
            log.info(
                "%s-%d: truncating from %d to %d (leader %d: epoch %d ends at %d)",
                partition.topic,
                partition.index,
                leo,
                target,
                self.leader_id,
                leader_epoch,
                leader_end_offset,
            )
            high_watermark = partition.high_watermark
            if target < high_watermark:
                # Only an unclean leader election (or acks=1 writes) makes a new leader
                # lack records below our high watermark: say which ones are gone rather
                # than dropping them silently (Kafka warns "below high watermark" too).
                log.warning(
                    "%s-%d: truncating below the high watermark %d: offsets %d-%d, "
                    "acknowledged to producers and committed here, are not on leader %d "
                    "(epoch %d) and are lost (unclean leader election?)",
                    partition.topic,
                    partition.index,
                    high_watermark,
                    target,
                    min(high_watermark, leo) - 1,
                    self.leader_id,
                    leader_epoch,
                )
            await asyncio.to_thread(log_.truncate_to, max(target, 0))
            partition.set_follower_high_watermark(partition.high_watermark)

    # --- fetching -----------------------------------------------------------------

    async def _fetch(self) -> bool:
        """One fetch round; False when it should back off."""
        sent: dict[tuple[str, int], tuple[_FetchState, int]] = {}
        wanted: dict[tuple[str, int], Any] = {}
        throttled: set[tuple[str, int]] = set()
        for key, state in list(self.partitions.items()):
            partition = self._current(key, state)
            if partition is None or state.truncating:
                continue
            if self._throttled(partition):
                if self.quota is not None and self.quota.is_quota_exceeded():
                    continue  # Kafka's shouldFollowerThrottle: not fetched this round
                throttled.add(key)
            offset = partition.log.log_end_offset
            sent[key] = (state, offset)
            wanted[key] = fetch_v12.FetchPartition(
                partition=key[1],
                current_leader_epoch=state.leader_epoch,
                fetch_offset=offset,
                last_fetched_epoch=-1,
                log_start_offset=partition.log.log_start_offset,
                partition_max_bytes=self.settings.max_bytes,
            )
        if not wanted:
            return False
        # Only partitions whose parameters changed go out; the leader's session has the rest.
        session_id, epoch, send, forget = self._session.build(wanted)
        topics: dict[str, list[Any]] = {}
        for key in send:
            topics.setdefault(key[0], []).append(wanted[key])
        forgotten: dict[str, list[int]] = {}
        for topic, index in forget:
            forgotten.setdefault(topic, []).append(index)
        request = fetch_v12.FetchRequest(
            cluster_id=None,
            replica_id=self.broker_id,
            max_wait=_millis(self.settings.wait_max_ms),
            min_bytes=self.settings.min_bytes,
            max_bytes=self.settings.response_max_bytes,
            isolation_level=0,
            session_id=session_id,
            session_epoch=epoch,
            topics=tuple(
                fetch_v12.FetchTopic(topic=name, partitions=tuple(parts))
                for name, parts in topics.items()
            ),
            forgotten_topics_data=tuple(
                fetch_v12.ForgottenTopic(topic=name, partitions=tuple(indexes))
                for name, indexes in forgotten.items()
            ),
            rack_id="",
        )
        timeout_s = (self.settings.socket_timeout_ms + self.settings.wait_max_ms) / 1000
        response = await self._send(FETCH, FETCH_VERSION, request, timeout_s)
        self._session.handle_response(int(response.error_code), int(response.session_id))
        if response.error_code in _REFUSALS:  # a broker that refuses the whole request
            self._refused(self._refusal("Fetch", response.error_code))
            return False
        if response.error_code != ErrorCode.none:
            log.warning("%s: fetch answered %s", self.name, response.error_code.name)
            return False
        ok = True
        for topic_response in response.responses:
            for data in topic_response.partitions:
                key = (topic_response.topic, int(data.partition_index))
                if key not in sent:
                    continue
                state, offset = sent[key]
                partition = self._current(key, state)
                if partition is None or partition.log.log_end_offset != offset:
                    continue  # the partition moved or was truncated meanwhile
                if key in throttled and self.quota is not None and data.records:
                    self.quota.record(len(data.records))
                if not await self._process(partition, state, offset, data):
                    ok = False
        return ok

    def _throttled(self, partition: Partition) -> bool:
        quota = self.quota
        return (
            quota is not None
            and quota.is_throttled(
                partition.index, partition.log.config.follower_replication_throttled_replicas
            )
            and not self.in_sync(partition.topic, partition.index)
        )

    async def _process(
        self, partition: Partition, state: _FetchState, offset: int, data: Any
    ) -> bool:
        code = data.error_code
        if code == ErrorCode.offset_out_of_range:
            leader_start = int(data.log_start_offset)
            if 0 <= offset < leader_start:
                # The leader deleted what we would fetch next: start where it starts.
                log.info(
                    "%s-%d: leader starts at %d, above our end %d: restarting the log",
                    partition.topic,
                    partition.index,
                    leader_start,
                    offset,
                )
                await asyncio.to_thread(partition.log.truncate_fully_and_start_at, leader_start)
            else:
                state.truncating = True  # ahead of the leader: find the divergence point
            return True
        if code in _REFUSALS:
            self._refused(self._refusal("Fetch", code))
            return False
        if code != ErrorCode.none:
            log.info(
                "%s: fetch of %s-%d answered %s",
                self.name,
                partition.topic,
                partition.index,
                code.name,
            )
            return False
        records = data.records
        if records:
            try:
                await asyncio.to_thread(partition.log.append_as_follower, bytes(records))
                self.replica_manager.replication_bytes_in += len(records)
            except StorageError as exc:
                log.error(
                    "%s-%d: follower append failed: %s", partition.topic, partition.index, exc
                )
                state.truncating = True
                return False
        partition.set_follower_high_watermark(int(data.high_watermark))
        self.replica_manager.wake_readers(partition)  # consumers reading here (KIP-392)
        leader_start = int(data.log_start_offset)
        if leader_start > partition.log.log_start_offset:
            with contextlib.suppress(StorageError):
                partition.log.maybe_increment_log_start_offset(
                    min(leader_start, partition.high_watermark)
                )
        return True


def _millis(ms: int) -> Any:
    import datetime

    return datetime.timedelta(milliseconds=ms)


class ReplicaFetcherManager:
    """The fetcher tasks of this broker, by (leader broker, fetcher id)."""

    def __init__(
        self,
        broker_id: int,
        replica_manager: ReplicaManager,
        address_of: Callable[[int], tuple[str, int] | None],
        settings: FetcherSettings,
        connector: Connector = open_plaintext,
    ) -> None:
        self.broker_id = broker_id
        self.replica_manager = replica_manager
        self._cache_address_of = address_of
        self.settings = settings
        self.connector = connector
        # Leader endpoints from LeaderAndIsr (live_leaders), which may arrive before the
        # UpdateMetadata that fills the metadata cache (Kafka uses these).
        self.leader_addresses: dict[int, tuple[str, int]] = {}
        self._fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        self._assigned: dict[tuple[str, int], ReplicaFetcher] = {}
        self._closed = False
        self.quota: ReplicationQuota | None = None  # follower.replication.throttled.rate
        self.in_sync: Callable[[str, int], bool] = lambda _topic, _index: False

    def address_of(self, broker: int) -> tuple[str, int] | None:
        return self.leader_addresses.get(broker) or self._cache_address_of(broker)

    def _fetcher_id(self, topic: str, index: int) -> int:
        return zlib.crc32(f"{topic}-{index}".encode()) % self.settings.num_fetchers

    def add_partition(self, topic: str, index: int, leader: int, leader_epoch: int) -> None:
        """Follow ``leader`` for this partition (truncating first)."""
        self.remove_partition(topic, index)
        if self._closed:
            return  # shutting down: a late LeaderAndIsr starts no new fetcher
        key = (leader, self._fetcher_id(topic, index))
        fetcher = self._fetchers.get(key)
        if fetcher is None:
            fetcher = ReplicaFetcher(
                self.broker_id,
                leader,
                key[1],
                self.replica_manager,
                self.address_of,
                self.settings,
                self.connector,
            )
            fetcher.quota, fetcher.in_sync = self.quota, self.in_sync
            self._fetchers[key] = fetcher
            fetcher.start()
        fetcher.add(topic, index, leader_epoch)
        self._assigned[(topic, index)] = fetcher

    def remove_partition(self, topic: str, index: int) -> None:
        fetcher = self._assigned.pop((topic, index), None)
        if fetcher is not None:
            fetcher.remove(topic, index)

    async def close(self) -> None:
        self._closed = True
        fetchers, self._fetchers = list(self._fetchers.values()), {}
        self._assigned.clear()
        for fetcher in fetchers:
            await fetcher.close()
