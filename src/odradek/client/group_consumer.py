"""GroupConsumer: Kafka's KafkaConsumer with consumer groups, over the assign-based Consumer.

* ``subscribe(["a", "b"])`` or ``subscribe(pattern="orders-.*")`` (matched whole, as Java's
  ``Pattern.matcher().matches()``, internal topics left out); the pattern is re-checked
  against the cluster's topics every ``metadata_max_age_ms``, so a topic created later is
  picked up. ``assign()`` stays for reading chosen partitions (with committed offsets when
  ``group_id`` is set, without joining).
* The rebalance runs inside :meth:`GroupConsumer.poll`, as in Kafka, so listener callbacks
  run in the caller's task. The protocol is the newest one every configured assignor
  supports: with the default ``("range", "cooperative-sticky")`` that is EAGER (revoke all,
  rejoin); with only ``cooperative-sticky`` it is COOPERATIVE (KIP-429: keep what is
  kept, revoke only what moves, then rejoin so the partition can go to its new owner).
* A background task sends heartbeats every ``heartbeat_interval_ms``. If ``poll`` is not
  called for ``max_poll_interval_ms`` the member leaves the group (Kafka's "poll timeout
  expired"), and the next poll reports the partitions as lost and joins again.
* New partitions start at the group's committed offset; without one ``auto_offset_reset``
  decides: ``earliest``, ``latest`` or ``none`` (:class:`NoOffsetForPartitionError`).
* ``enable_auto_commit`` commits the positions of what earlier polls returned every
  ``auto_commit_interval_ms`` (at the start of a poll), before an eager revocation and on
  :meth:`close`; :meth:`commit` and :meth:`commit_async` commit on demand, with metadata.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import re
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.client.assignors import (
    Assignment,
    GroupMetadata,
    PartitionAssignor,
    RebalanceProtocol,
    Subscription,
    assignor_for,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from odradek.client.consumer_coordinator import (
    GENERATION_ERRORS,
    CommitFailedError,
    ConsumerCoordinator,
    JoinedMember,
)
from odradek.client.core import KafkaClient
from odradek.client.errors import ClientError, KafkaError
from odradek.client.fetcher import READ_COMMITTED, Consumer, ConsumerRecord
from odradek.client.group_admin import OffsetAndMetadata

log = logging.getLogger(__name__)

__all__ = [
    "CommitFailedError",
    "GroupConsumer",
    "NoOffsetForPartitionError",
    "OffsetAndMetadata",
    "RebalanceListener",
]

TopicPartition = tuple[str, int]
DEFAULT_ASSIGNORS = ("range", "cooperative-sticky")


class NoOffsetForPartitionError(ClientError):
    """Kafka's NoOffsetForPartitionException: no committed offset and
    ``auto_offset_reset="none"``. ``partitions`` names them."""

    def __init__(self, partitions: Collection[TopicPartition]) -> None:
        self.partitions = sorted(partitions)
        names = ", ".join(f"{t}-{p}" for t, p in self.partitions)
        super().__init__(f"undefined offset with no reset policy for partitions: {names}")


class RebalanceListener:
    """Kafka's ConsumerRebalanceListener. Override what you need; methods may be plain or
    ``async``. They run inside :meth:`GroupConsumer.poll` (or ``close``).

    * ``on_partitions_revoked`` — before giving partitions up (commit their offsets here);
    * ``on_partitions_assigned`` — after a rebalance, with the partitions newly added
      (all of them with EAGER; only the new ones with COOPERATIVE; maybe empty);
    * ``on_partitions_lost`` — the member was dropped from the group (session or poll
      timeout, fenced): the partitions may already be someone else's, so don't commit.
      By default it calls ``on_partitions_revoked``, as Kafka's does.
    """

    def on_partitions_revoked(self, partitions: set[TopicPartition]) -> Any:
        return None

    def on_partitions_assigned(self, partitions: set[TopicPartition]) -> Any:
        return None

    def on_partitions_lost(self, partitions: set[TopicPartition]) -> Any:
        return self.on_partitions_revoked(partitions)


async def _call(
    method: Callable[[set[TopicPartition]], Any], partitions: set[TopicPartition]
) -> None:
    result = method(set(partitions))
    if inspect.isawaitable(result):
        await result


def _protocol_of(assignors: Sequence[PartitionAssignor]) -> RebalanceProtocol:
    """The newest protocol every assignor supports (Kafka's ConsumerCoordinator rule)."""
    common = set(RebalanceProtocol)
    for assignor in assignors:
        common &= set(getattr(assignor, "supported_protocols", (RebalanceProtocol.EAGER,)))
    if not common:
        raise ValueError("the assignors share no rebalance protocol")
    return max(common)


class GroupConsumer(Consumer):
    """Async consumer-group member: ``subscribe([...])`` then ``await poll()``; use
    ``async with``. Keyword arguments are Kafka's consumer configs in snake case; fetch
    options (``fetch_min_bytes``, ``isolation_level``...) are :class:`Consumer`'s."""

    def __init__(
        self,
        client_or_bootstrap: KafkaClient | str | Sequence[str],
        *,
        group_id: str | None = None,
        group_instance_id: str | None = None,
        partition_assignment_strategy: Sequence[str | PartitionAssignor] = DEFAULT_ASSIGNORS,
        session_timeout_ms: int = 45000,
        heartbeat_interval_ms: int = 3000,
        max_poll_interval_ms: int = 300000,
        rebalance_timeout_ms: int | None = None,
        enable_auto_commit: bool = True,
        auto_commit_interval_ms: int = 5000,
        auto_offset_reset: str = "latest",
        metadata_max_age_ms: int = 300000,
        exclude_internal_topics: bool = True,
        request_timeout_ms: int = 30000,
        retry_backoff_ms: int = 100,
        client_id: str = "odradek-consumer",
        **fetch_options: Any,
    ) -> None:
        super().__init__(
            client_or_bootstrap,
            auto_offset_reset=auto_offset_reset,
            request_timeout_ms=request_timeout_ms,
            retry_backoff_ms=retry_backoff_ms,
            client_id=client_id,
            **fetch_options,
        )
        if group_id is not None and not group_id:
            raise ValueError("group_id must not be empty")
        if group_instance_id is not None and not group_instance_id:
            raise ValueError("group_instance_id must not be empty")
        if heartbeat_interval_ms >= session_timeout_ms:
            raise ValueError("heartbeat_interval_ms must be lower than session_timeout_ms")
        if min(heartbeat_interval_ms, max_poll_interval_ms, auto_commit_interval_ms) <= 0:
            raise ValueError("intervals must be positive")
        self.group_id = group_id
        self.assignors: list[PartitionAssignor] = [
            assignor_for(a) if isinstance(a, str) else a for a in partition_assignment_strategy
        ]
        if not self.assignors:
            raise ValueError("partition_assignment_strategy must name at least one assignor")
        self.protocol = _protocol_of(self.assignors)
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.max_poll_interval_ms = max_poll_interval_ms
        self.enable_auto_commit = enable_auto_commit and group_id is not None
        self.auto_commit_interval_ms = auto_commit_interval_ms
        self.metadata_max_age_ms = metadata_max_age_ms
        self.exclude_internal_topics = exclude_internal_topics
        if self._owns_client:
            self._client.metadata_max_age_ms = metadata_max_age_ms
        self._coordinator = (
            None
            if group_id is None
            else ConsumerCoordinator(
                self._client,
                group_id,
                group_instance_id=group_instance_id,
                session_timeout_ms=session_timeout_ms,
                # Kafka's consumer uses max.poll.interval.ms as its rebalance timeout.
                rebalance_timeout_ms=rebalance_timeout_ms or max_poll_interval_ms,
                request_timeout_ms=request_timeout_ms,
                retry_backoff_ms=retry_backoff_ms,
            )
        )
        self._topics: set[str] = set()  # the subscription (pattern matches included)
        self._pattern: re.Pattern[str] | None = None
        self._subscribed = False
        self._listener = RebalanceListener()
        self._owned: set[TopicPartition] = set()
        self._rejoin_needed = False
        self._lost = False  # membership dropped while owning partitions
        self._joining = False
        self._group_counts: dict[str, int] = {}  # the leader's view of group topics
        self._metadata_checked = 0.0
        self._last_poll = time.monotonic()
        self._next_auto_commit = time.monotonic() + auto_commit_interval_ms / 1000
        self._heartbeat_task: asyncio.Task[None] | None = None
        self._stop_heartbeats = False  # set by close(), in case a cancellation is lost
        self._rebalance_lock = asyncio.Lock()

    # -- subscription --------------------------------------------------------------------------

    def _need_group(self, what: str) -> ConsumerCoordinator:
        if self._coordinator is None:
            raise ClientError(f"{what} needs a group_id")
        return self._coordinator

    def subscribe(
        self,
        topics: Sequence[str] | None = None,
        *,
        pattern: str | re.Pattern[str] | None = None,
        listener: RebalanceListener | None = None,
    ) -> None:
        """Subscribe to ``topics`` or to every topic matching ``pattern`` (replacing any
        earlier subscription); the group splits their partitions among its members."""
        self._need_group("subscribe")
        if (topics is None) == (pattern is None):
            raise ValueError("subscribe takes a list of topics or a pattern, not both")
        if self._partitions and not self._subscribed:
            raise ClientError("subscribe is not allowed after assign; call unsubscribe first")
        if topics is not None:
            if isinstance(topics, str) or not all(isinstance(t, str) and t for t in topics):
                raise ValueError("topics must be a list of topic names")
            self._pattern = None
            self._topics = set(topics)
        else:
            self._pattern = re.compile(pattern) if isinstance(pattern, str) else pattern
            self._topics = set()
            self._metadata_checked = 0.0
        if listener is not None:
            self._listener = listener
        self._subscribed = True
        self._rejoin_needed = True

    def subscription(self) -> set[str]:
        """The topics subscribed to (for a pattern: the topics it matched so far)."""
        return set(self._topics)

    def assign(self, partitions: Sequence[tuple[str, int]]) -> None:
        if self._subscribed:
            raise ClientError("assign is not allowed after subscribe; call unsubscribe first")
        super().assign(partitions)

    async def unsubscribe(self) -> None:
        """Revoke every partition (listener called), leave the group, forget the topics."""
        if self._subscribed and self._owned:
            await self._maybe_auto_commit_sync()
            await _call(self._listener.on_partitions_revoked, self._owned)
        if self._coordinator is not None and self._coordinator.member_id:
            with contextlib.suppress(ClientError, KafkaError):
                await self._coordinator.leave("the consumer unsubscribed")
        self._owned = set()
        self._topics = set()
        self._pattern = None
        self._subscribed = False
        super().assign([])

    def group_metadata(self) -> GroupMetadata | None:
        """This member's group id, generation, member id and instance id."""
        if self._coordinator is None:
            return None
        c = self._coordinator
        return GroupMetadata(c.group_id, c.generation, c.member_id, c.group_instance_id)

    # -- lifecycle -----------------------------------------------------------------------------

    async def close(self) -> None:
        """Commit (with auto commit), revoke, leave the group, close. Idempotent."""
        if self._closed:
            return
        if self._heartbeat_task is not None:
            # The flag as well as the cancel: a cancellation that meets a response in the
            # same loop iteration can be swallowed (asyncio.wait_for on Python 3.11), and a
            # heartbeat loop that goes on would make this close() wait forever.
            self._stop_heartbeats = True
            self._heartbeat_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeat_task
        if self._started and self._coordinator is not None:
            try:
                await self._maybe_auto_commit_sync()
                if self._owned:
                    lost = self._lost or self._coordinator.generation < 0
                    method = (
                        self._listener.on_partitions_lost
                        if lost
                        else self._listener.on_partitions_revoked
                    )
                    await _call(method, self._owned)
                self._owned = set()
                if self._coordinator.member_id:
                    await self._coordinator.leave("the consumer is being closed")
            except (ClientError, KafkaError) as exc:
                log.warning("group %s: clean close failed: %s", self.group_id, exc)
            finally:
                await self._coordinator.close()
        await super().close()

    # -- polling -------------------------------------------------------------------------------

    async def poll(
        self, timeout_ms: int = 1000, max_records: int | None = None
    ) -> list[ConsumerRecord]:
        """Records of the assigned partitions, waiting up to ``timeout_ms``; takes part in
        rebalances (listener callbacks run here) and auto commits first."""
        self._check_open()
        self._last_poll = time.monotonic()
        deadline = self._last_poll + max(0, timeout_ms) / 1000
        while True:
            if self._subscribed:
                self._start_heartbeats()
                await self._maybe_check_metadata()
                await self._ensure_membership()
            await self._maybe_auto_commit()
            left_ms = int((deadline - time.monotonic()) * 1000)
            # Short slices so a rebalance the heartbeat learns of is joined promptly.
            slice_ms = max(0, min(left_ms, self.heartbeat_interval_ms))
            if self._partitions:
                records = await super().poll(slice_ms, max_records)
            else:
                await asyncio.sleep(min(slice_ms, 100) / 1000)
                records = []
            self._last_poll = time.monotonic()
            if records or time.monotonic() >= deadline or self._closed:
                return records

    async def _ensure_positions(self) -> None:
        """Committed offsets first (when in a group), then ``auto_offset_reset``."""
        missing = [tp for tp, s in self._partitions.items() if s.position is None]
        if not missing:
            return
        if self._coordinator is not None:
            committed = await self._coordinator.fetch_committed(
                missing, require_stable=self.isolation_level == READ_COMMITTED
            )
            for tp, entry in committed.items():
                if tp in self._partitions and entry.offset >= 0:
                    self.seek(*tp, entry.offset)
            missing = [tp for tp in missing if tp not in committed]
        if missing and self.auto_offset_reset == "none":
            raise NoOffsetForPartitionError(missing)
        await super()._ensure_positions()

    # -- membership ----------------------------------------------------------------------------

    def _start_heartbeats(self) -> None:
        if self._heartbeat_task is None or self._heartbeat_task.done():
            self._heartbeat_task = asyncio.get_running_loop().create_task(
                self._heartbeat_loop(), name=f"odradek-heartbeat-{self.group_id}"
            )

    def _membership_dropped(self) -> None:
        """The coordinator forgot us: what we own is lost; join again from scratch."""
        assert self._coordinator is not None
        self._coordinator.reset_generation()
        if self._owned:
            self._lost = True
        self._rejoin_needed = True

    async def _heartbeat_loop(self) -> None:
        assert self._coordinator is not None
        coordinator = self._coordinator
        interval = self.heartbeat_interval_ms / 1000
        while not self._closed and not self._stop_heartbeats:
            await asyncio.sleep(min(interval, self.max_poll_interval_ms / 1000 / 4))
            if self._joining or coordinator.generation < 0:
                continue
            if time.monotonic() - self._last_poll > self.max_poll_interval_ms / 1000:
                log.warning(
                    "group %s: poll() not called for max.poll.interval.ms (%d ms): leaving "
                    "the group so its partitions go to other members",
                    self.group_id,
                    self.max_poll_interval_ms,
                )
                with contextlib.suppress(ClientError, KafkaError):
                    await coordinator.leave("consumer poll timeout has expired")
                self._membership_dropped()
                continue
            generation = coordinator.generation
            try:
                code = await coordinator.heartbeat()
            except (ClientError, KafkaError) as exc:
                log.info("group %s: heartbeat failed: %s", self.group_id, exc)
                continue
            if self._joining or coordinator.generation != generation:
                continue  # answered about a generation we already left behind
            if code == ErrorCode.rebalance_in_progress:
                self._rejoin_needed = True
            elif code in GENERATION_ERRORS:
                log.info("group %s: heartbeat says %s", self.group_id, KafkaError(code).name)
                self._membership_dropped()
            elif code:
                log.warning("group %s: heartbeat failed: %s", self.group_id, KafkaError(code))

    async def _ensure_membership(self) -> None:
        assert self._coordinator is not None
        if not self._rejoin_needed and self._coordinator.generation >= 0:
            return
        async with self._rebalance_lock:
            self._joining = True
            try:
                await self._rebalance()
            finally:
                self._joining = False

    async def _rebalance(self) -> None:
        assert self._coordinator is not None
        coordinator = self._coordinator
        # Kafka's onJoinPrepare. Listeners run before the partitions go, so a revocation
        # callback can still read positions and commit them.
        # Whatever the protocol, auto commit what was consumed before the group moves on.
        if not self._lost and coordinator.generation >= 0:
            await self._maybe_auto_commit_sync()
        if self._lost or (self._owned and coordinator.generation < 0):
            await _call(self._listener.on_partitions_lost, self._owned)
            self._owned, self._lost = set(), False
            super().assign([])
        elif self.protocol == RebalanceProtocol.EAGER and self._owned:
            await _call(self._listener.on_partitions_revoked, self._owned)
            self._owned = set()
            super().assign([])
        elif self._owned:
            gone = {tp for tp in self._owned if tp[0] not in self._topics}
            if gone:
                await _call(self._listener.on_partitions_revoked, gone)
                self._owned -= gone
                super().assign(sorted(self._owned))
        self._rejoin_needed = False
        protocols = [
            (
                assignor.name,
                encode_subscription(
                    Subscription(
                        topics=tuple(sorted(self._topics)),
                        user_data=self._user_data(assignor),
                        owned_partitions=tuple(sorted(self._owned)),
                        generation_id=coordinator.generation,
                    )
                ),
            )
            for assignor in self.assignors
        ]
        try:
            name, data = await coordinator.join(protocols, self._leader_assign)
        except BaseException:
            self._rejoin_needed = True
            raise
        assignment = decode_assignment(data)
        assignor = self._assignor(name)
        on_assignment = getattr(assignor, "on_assignment", None)
        if on_assignment is not None:
            on_assignment(assignment, self.group_metadata())
        new = {(tp[0], tp[1]) for tp in assignment.partitions}
        if self.protocol == RebalanceProtocol.COOPERATIVE:
            revoked = self._owned - new
            added = new - self._owned
        else:
            revoked, added = set(), new
        if revoked:
            # Kafka's onJoinComplete: give up what moves, then rejoin so it can be handed on.
            await _call(self._listener.on_partitions_revoked, revoked)
            self._rejoin_needed = True
        self._owned = new
        super().assign(sorted(new))
        await _call(self._listener.on_partitions_assigned, added)

    def _user_data(self, assignor: PartitionAssignor) -> bytes | None:
        make = getattr(assignor, "subscription_user_data", None)
        return make(sorted(self._topics)) if make is not None else None

    def _assignor(self, name: str) -> PartitionAssignor:
        for assignor in self.assignors:
            if assignor.name == name:
                return assignor
        raise ClientError(f"the group chose assignor {name!r}, which this member did not offer")

    async def _leader_assign(self, name: str, members: list[JoinedMember]) -> dict[str, bytes]:
        """As the leader: every member's assignment, by the assignor the group chose."""
        assignor = self._assignor(name)
        subscriptions: dict[str, Subscription] = {}
        for member in members:
            try:
                sub = decode_subscription(member.metadata)
            except ValueError:
                log.warning("group %s: member %s sent an unreadable subscription",
                            self.group_id, member.member_id)  # fmt: skip
                sub = Subscription(topics=())
            subscriptions[member.member_id] = Subscription(
                topics=sub.topics,
                user_data=sub.user_data,
                owned_partitions=sub.owned_partitions,
                generation_id=sub.generation_id,
                rack_id=sub.rack_id,
                group_instance_id=member.group_instance_id,
            )
        topics = sorted({t for sub in subscriptions.values() for t in sub.topics})
        cluster = await self._client.metadata(topics, refresh=True)
        counts = {
            t: len(info.partitions)
            for t in topics
            if (info := cluster.topics.get(t)) is not None and info.partitions
        }
        self._group_counts = counts
        result = assignor.assign(counts, subscriptions)
        return {
            member: encode_assignment(result.get(member, Assignment())) for member in subscriptions
        }

    async def _maybe_check_metadata(self) -> None:
        """Every metadata.max.age.ms: match the pattern again, and (as the leader) look for
        new partitions of the group's topics; either change means a rebalance."""
        now = time.monotonic()
        if now - self._metadata_checked < self.metadata_max_age_ms / 1000:
            return
        self._metadata_checked = now
        assert self._coordinator is not None
        try:
            if self._pattern is not None:
                cluster = await self._client.metadata(None, refresh=True)
                matched = {
                    name
                    for name, info in cluster.topics.items()
                    if self._pattern.fullmatch(name)
                    and not (self.exclude_internal_topics and info.is_internal)
                    and not info.error_code
                }
                if matched != self._topics:
                    log.info("group %s: pattern now matches %s", self.group_id, sorted(matched))
                    self._topics = matched
                    self._rejoin_needed = True
            if self._coordinator.is_leader and self._group_counts:
                cluster = await self._client.metadata(sorted(self._group_counts), refresh=True)
                for topic, count in self._group_counts.items():
                    info = cluster.topics.get(topic)
                    if info is not None and info.partitions and len(info.partitions) != count:
                        self._rejoin_needed = True
        except (ClientError, KafkaError) as exc:
            log.info("group %s: metadata refresh failed: %s", self.group_id, exc)

    # -- commits -------------------------------------------------------------------------------

    def _consumed(self) -> dict[TopicPartition, OffsetAndMetadata]:
        """The position of every assigned partition that has one."""
        return {
            tp: OffsetAndMetadata(state.position)
            for tp, state in self._partitions.items()
            if state.position is not None
        }

    async def _maybe_auto_commit(self) -> None:
        if not self.enable_auto_commit or time.monotonic() < self._next_auto_commit:
            return
        self._next_auto_commit = time.monotonic() + self.auto_commit_interval_ms / 1000
        await self._maybe_auto_commit_sync()

    async def _maybe_auto_commit_sync(self) -> None:
        if not self.enable_auto_commit:
            return
        try:
            await self.commit()
        except CommitFailedError as exc:
            log.info("group %s: auto commit failed: %s", self.group_id, exc)
            self._membership_dropped()
        except (ClientError, KafkaError) as exc:
            if isinstance(exc, KafkaError) and exc.code == ErrorCode.rebalance_in_progress:
                self._rejoin_needed = True
            log.info("group %s: auto commit failed: %s", self.group_id, exc)

    async def commit(
        self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None = None
    ) -> None:
        """Commit ``offsets`` (the next offset to read; an int or an
        :class:`OffsetAndMetadata` with metadata), by default every position. Raises
        :class:`CommitFailedError` if the group gave the partitions to someone else."""
        coordinator = self._need_group("commit")
        self._check_open()
        if offsets is None:
            wanted = self._consumed()
        else:
            wanted = {
                (tp[0], tp[1]): v if isinstance(v, OffsetAndMetadata) else OffsetAndMetadata(v)
                for tp, v in offsets.items()
            }
        try:
            await coordinator.commit(wanted)
        except CommitFailedError:
            if self._owned:
                self._lost = True
            self._rejoin_needed = True
            raise

    def commit_async(
        self,
        offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None = None,
        callback: Callable[[dict[TopicPartition, OffsetAndMetadata], Exception | None], Any]
        | None = None,
    ) -> asyncio.Task[None]:
        """Start a commit without waiting (offsets taken now); ``callback(offsets, error)``
        runs when it is done, as Kafka's OffsetCommitCallback. Returns the task."""
        self._need_group("commit_async")
        self._check_open()
        taken = dict(self._consumed()) if offsets is None else {
            (tp[0], tp[1]): v if isinstance(v, OffsetAndMetadata) else OffsetAndMetadata(v)
            for tp, v in offsets.items()
        }  # fmt: skip

        async def run() -> None:
            error: Exception | None = None
            try:
                await self.commit(dict(taken))
            except (ClientError, KafkaError) as exc:
                error = exc
                if callback is None:
                    log.warning("group %s: async commit failed: %s", self.group_id, exc)
            if callback is not None:
                result = callback(taken, error)
                if inspect.isawaitable(result):
                    await result

        return asyncio.get_running_loop().create_task(run())

    async def committed(
        self, partitions: Sequence[tuple[str, int]]
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offset of each partition (None: nothing committed)."""
        coordinator = self._need_group("committed")
        self._check_open()
        found = await coordinator.fetch_committed(list(partitions))
        return {(t, p): found.get((t, p)) for t, p in partitions}

    async def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, tuple[int, int] | None]:
        """For each partition the earliest (offset, timestamp) whose timestamp is at or after
        the given one (ms); None where there is no such record, as Kafka's."""
        self._check_open()
        if any(ts < 0 for ts in timestamps.values()):
            raise ValueError("timestamps must not be negative")
        found = await self.list_offsets(dict(timestamps))
        return {tp: (found[tp] if tp in found and found[tp][0] >= 0 else None) for tp in timestamps}
