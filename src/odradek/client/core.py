"""KafkaClient: broker connections and a metadata cache, shared by producer, consumer, admin.

* Connections are opened lazily, one per broker node, and negotiated once (ApiVersions).
  Bootstrap servers get negative node ids (-1, -2, ...) as in the Java client; requests sent to
  "any" node (``node_id=None``) go to the connected broker with the fewest requests in flight,
  else to the first reachable known broker or bootstrap server.
* The metadata cache is refreshed when older than ``metadata.max.age.ms``, when asked for
  a topic it does not know, and after :meth:`KafkaClient.mark_stale` — which the producer and
  consumer call when a broker answers NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION and the
  like, so the next lookup asks the cluster again. Concurrent refreshes are coalesced.
* :meth:`KafkaClient.request` picks the version for you: it calls ``build(version)`` with the
  highest version both the broker and the client support and sends the entity it returns.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, Self

from kio.schema.errors import ErrorCode

from odradek.client.connection import BrokerConnection
from odradek.client.entities import build_request
from odradek.client.errors import (
    ClientError,
    KafkaError,
    KafkaTimeoutError,
    NoBrokersAvailableError,
)
from odradek.client.metadata import (
    BrokerInfo,
    ClusterMetadata,
    PartitionInfo,
    TopicInfo,
    from_metadata_response,
)
from odradek.client.security import ClientSecurity
from odradek.client.versions import METADATA

log = logging.getLogger(__name__)

__all__ = [
    "BrokerInfo",
    "ClusterMetadata",
    "KafkaClient",
    "PartitionInfo",
    "TopicInfo",
    "parse_bootstrap_servers",
]

DEFAULT_PORT = 9092

# Errors after which a topic's cached leaders cannot be trusted.
METADATA_REFRESH_ERRORS = frozenset(
    {
        ErrorCode.not_leader_or_follower,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.leader_not_available,
        ErrorCode.fenced_leader_epoch,
        ErrorCode.unknown_leader_epoch,
        ErrorCode.replica_not_available,
        ErrorCode.kafka_storage_error,
        ErrorCode.not_controller,
        ErrorCode.broker_not_available,
        ErrorCode.offset_not_available,
    }
)


def parse_bootstrap_servers(servers: str | Sequence[str]) -> list[tuple[str, int]]:
    """``"a:9092,b"`` or ``["a:9092", "[::1]:9093"]`` -> [(host, port), ...]. ValueError if bad."""
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    result = []
    for raw in items:
        item = raw.strip()
        if not item:
            continue
        if "://" in item:  # tolerate listener-style PLAINTEXT://host:port
            item = item.split("://", 1)[1]
        if item.startswith("["):
            host, _, rest = item[1:].partition("]")
            port_text = rest[1:] if rest.startswith(":") else ""
        elif item.count(":") == 1:
            host, port_text = item.split(":")
        else:
            host, port_text = item, ""
        try:
            port = int(port_text) if port_text else DEFAULT_PORT
        except ValueError:
            raise ValueError(f"bad port in bootstrap server {raw!r}") from None
        if not host or not 0 < port < 65536:
            raise ValueError(f"bad bootstrap server {raw!r}")
        result.append((host, port))
    if not result:
        raise ValueError("bootstrap_servers is empty")
    return result


class AsyncResource:
    """``async with`` for the client objects: ``start()`` on entry, ``close()`` on exit."""

    async def start(self) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


class KafkaClient(AsyncResource):
    """Async client core. Use ``async with KafkaClient("host:9092") as client: ...``."""

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        *,
        client_id: str = "odradek",
        request_timeout_ms: int = 30000,
        metadata_max_age_ms: int = 300000,
        retry_backoff_ms: int = 100,
        socket_connection_setup_timeout_ms: int = 10000,
        security: ClientSecurity | None = None,
    ) -> None:
        self.bootstrap = parse_bootstrap_servers(bootstrap_servers)
        self.security = security  # TLS / SASL of every connection (security.py)
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.metadata_max_age_ms = metadata_max_age_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.connect_timeout_ms = socket_connection_setup_timeout_ms
        self._connections: dict[int, BrokerConnection] = {}
        self._connecting: dict[int, asyncio.Future[BrokerConnection]] = {}
        self._cluster = ClusterMetadata()
        self._topic_fetched_at: dict[str, float] = {}
        self._all_topics_fetched_at: float | None = None
        self._stale_topics: set[str] = set()
        self._refresh_lock = asyncio.Lock()
        self._refresh_count = 0
        self._generation = 0  # bumped on every metadata change or mark_stale
        self._started = False
        self._closed = False

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect to a bootstrap server and learn the cluster's brokers."""
        if self._closed:
            raise ClientError("client is closed")
        if self._started:
            return
        await self.metadata([], refresh=True)
        self._started = True

    async def close(self) -> None:
        """Close every connection. Idempotent."""
        self._closed = True
        connections, self._connections = list(self._connections.values()), {}
        for pending in self._connecting.values():
            pending.cancel()
        self._connecting.clear()
        for connection in connections:
            await connection.close("client closed")

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def cluster(self) -> ClusterMetadata:
        """The cached metadata as last fetched (may be empty before :meth:`start`)."""
        return self._cluster

    # -- connections ---------------------------------------------------------------------------

    async def connection(self, node_id: int | None = None) -> BrokerConnection:
        """A connected, negotiated connection to ``node_id`` (None: any broker)."""
        if self._closed:
            raise ClientError("client is closed")
        if node_id is None:
            return await self._any_connection()
        existing = self._connections.get(node_id)
        if existing is not None and existing.connected:
            return existing
        broker = self._cluster.brokers.get(node_id)
        if broker is None and node_id >= 0:
            await self.metadata([], refresh=True)
            broker = self._cluster.brokers.get(node_id)
        if broker is None:
            if node_id < 0 and -node_id <= len(self.bootstrap):
                host, port = self.bootstrap[-node_id - 1]
            else:
                raise ClientError(f"node {node_id} is not in the cluster metadata")
        else:
            host, port = broker.host, broker.port
        return await self._connect(node_id, host, port)

    async def _connect(self, node_id: int, host: str, port: int) -> BrokerConnection:
        # Several tasks may want the same node at once: let one connect, the others wait on it.
        pending = self._connecting.get(node_id)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[BrokerConnection] = asyncio.get_running_loop().create_future()
        self._connecting[node_id] = future
        try:
            old = self._connections.pop(node_id, None)
            if old is not None:
                await old.close("replaced")
            connection = BrokerConnection(
                host,
                port,
                node_id=node_id,
                client_id=self.client_id,
                request_timeout_ms=self.request_timeout_ms,
                security=self.security,
            )
            await connection.connect(self.connect_timeout_ms)
            if self._closed:
                await connection.close("client closed")
                raise ClientError("client is closed")
            self._connections[node_id] = connection
            future.set_result(connection)
            return connection
        except BaseException as exc:
            if not future.done():
                if isinstance(exc, asyncio.CancelledError):
                    future.cancel()
                else:
                    future.set_exception(exc)
                    future.exception()  # waiters get it; don't warn if there are none
            raise
        finally:
            if self._connecting.get(node_id) is future:
                del self._connecting[node_id]

    async def _any_connection(self) -> BrokerConnection:
        live = [c for c in self._connections.values() if c.connected]
        if live:
            # Prefer real brokers over bootstrap placeholders, then the least loaded.
            return min(live, key=lambda c: (c.in_flight, c.node_id < 0))
        errors: list[ClientError] = []
        candidates: list[tuple[int, str, int]] = [
            (b.node_id, b.host, b.port) for b in self._cluster.brokers.values()
        ]
        candidates += [(-i - 1, host, port) for i, (host, port) in enumerate(self.bootstrap)]
        for node_id, host, port in candidates:
            try:
                return await self._connect(node_id, host, port)
            except ClientError as exc:
                errors.append(exc)
        raise NoBrokersAvailableError(
            "no broker reachable: " + "; ".join(map(str, errors)) if errors else "no broker known",
            tuple(errors),
        )

    def _forget_connection(self, node_id: int, connection: BrokerConnection) -> None:
        if self._connections.get(node_id) is connection:
            del self._connections[node_id]

    # -- requests ------------------------------------------------------------------------------

    async def send(
        self,
        node_id: int | None,
        request: object,
        *,
        timeout_ms: int | None = None,
        expect_response: bool = True,
    ) -> Any:
        """Send a kio request entity to ``node_id`` (None: any broker) and return the response.

        The entity's version must be one the broker supports (see :meth:`api_version`).
        ``expect_response=False`` is for Produce with acks=0, which the broker never answers.
        Raises ClientError if the broker cannot be reached or the connection drops.
        """
        connection = await self.connection(node_id)
        try:
            return await connection.send(
                request, timeout_ms=timeout_ms, expect_response=expect_response
            )
        except ClientError:
            self._forget_connection(connection.node_id, connection)
            if connection.node_id >= 0:
                # A broker that stops answering may have lost its partitions: re-learn leaders.
                self.mark_stale()
            raise

    async def request(
        self,
        node_id: int | None,
        api_key: int,
        build: Callable[[int], object],
        *,
        timeout_ms: int | None = None,
        expect_response: bool = True,
    ) -> Any:
        """Build the request for the version ``node_id`` negotiated, send it, return the reply."""
        connection = await self.connection(node_id)
        version = connection.version_for(api_key)
        return await self.send(
            connection.node_id,
            build(version),
            timeout_ms=timeout_ms,
            expect_response=expect_response,
        )

    async def api_version(self, node_id: int | None, api_key: int) -> int:
        """The version of ``api_key`` the client uses with ``node_id``."""
        return (await self.connection(node_id)).version_for(api_key)

    # -- metadata ------------------------------------------------------------------------------

    @property
    def metadata_generation(self) -> int:
        """Changes whenever cached metadata changes or is marked stale: a cheap way for hot
        paths (the producer's send) to know their own derived caches are still valid."""
        return self._generation

    def mark_stale(self, topic: str | None = None) -> None:
        """Forget that ``topic``'s (or every topic's) cached metadata is current."""
        self._generation += 1
        if topic is None:
            self._stale_topics.update(self._cluster.topics)
            self._all_topics_fetched_at = None
        else:
            self._stale_topics.add(topic)

    def is_stale(self, topic: str) -> bool:
        """Whether ``topic``'s cached metadata was marked stale or has expired."""
        return not self._is_fresh([topic], time.monotonic())

    def cached_topic(self, topic: str) -> TopicInfo | None:
        """The cached, fresh, usable (has partitions) info for ``topic``; no I/O, no copy."""
        info = self._cluster.topics.get(topic)
        if info is None or not info.partitions or self.is_stale(topic):
            return None
        return info

    def _is_fresh(self, topics: Sequence[str] | None, now: float) -> bool:
        max_age = self.metadata_max_age_ms / 1000
        if topics is None:
            fetched = self._all_topics_fetched_at
            return fetched is not None and now - fetched < max_age
        for topic in topics:
            fetched = self._topic_fetched_at.get(topic)
            if fetched is None or now - fetched >= max_age or topic in self._stale_topics:
                return False
            if topic not in self._cluster.topics:
                return False
        return True

    async def metadata(
        self,
        topics: Sequence[str] | None = None,
        *,
        allow_auto_create: bool = False,
        refresh: bool = True,
    ) -> ClusterMetadata:
        """Metadata for ``topics`` (None: every topic), from the cache unless ``refresh``.

        The returned object is a snapshot; topics the broker reported with an error keep their
        ``error_code`` (nothing is raised for them here).
        """
        wanted = None if topics is None else list(dict.fromkeys(topics))
        if not refresh and self._is_fresh(wanted, time.monotonic()):
            return self._cluster.copy()
        generation = self._refresh_count
        async with self._refresh_lock:
            # Someone else refreshed while we waited: their answer is as new as ours would be.
            if (
                self._refresh_count != generation
                and not refresh
                and self._is_fresh(wanted, time.monotonic())
            ):
                return self._cluster.copy()
            response = await self.request(
                None,
                METADATA,
                lambda v: build_request(
                    METADATA,
                    v,
                    topics=None if wanted is None else [{"name": t} for t in wanted],
                    allow_auto_topic_creation=allow_auto_create,
                    include_cluster_authorized_operations=False,
                    include_topic_authorized_operations=False,
                ),
            )
            self._apply_metadata(response, wanted)
            self._refresh_count += 1
        return self._cluster.copy()

    def _apply_metadata(self, response: Any, wanted: list[str] | None) -> None:
        error = getattr(response, "error_code", 0)
        if error:
            raise KafkaError(error, "Metadata request failed")
        fresh = from_metadata_response(response)
        now = time.monotonic()
        cluster = self._cluster.copy()
        cluster.cluster_id = fresh.cluster_id
        cluster.controller_id = fresh.controller_id
        if fresh.brokers:
            cluster.brokers = fresh.brokers
            # Connections to brokers that left the cluster are closed lazily by their users;
            # forgetting them here makes the next lookup reconnect to the new address.
            for node_id in list(self._connections):
                if node_id >= 0 and node_id not in fresh.brokers:
                    self._connections.pop(node_id)
        if wanted is None:
            cluster.topics = fresh.topics
            self._all_topics_fetched_at = now
            self._topic_fetched_at = dict.fromkeys(fresh.topics, now)
            self._stale_topics.clear()
        else:
            for name, info in fresh.topics.items():
                cluster.topics[name] = info
                self._topic_fetched_at[name] = now
                self._stale_topics.discard(name)
        self._cluster = cluster
        self._generation += 1

    async def topic(self, topic: str, *, allow_auto_create: bool = False) -> TopicInfo:
        """Cached-or-fetched info for ``topic``; raises KafkaError for the topic's error."""
        cluster = await self.metadata([topic], allow_auto_create=allow_auto_create, refresh=False)
        info = cluster.topics.get(topic)
        if info is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"topic {topic!r}")
        if info.error_code and not info.partitions:
            self.mark_stale(topic)
            raise KafkaError(info.error_code, f"topic {topic!r}")
        return info

    async def leader_for(
        self, topic: str, partition: int, *, allow_auto_create: bool = False
    ) -> int:
        """Node id of the leader of (topic, partition), refreshing metadata if it is not known.

        Raises KafkaError UNKNOWN_TOPIC_OR_PARTITION (no such topic or partition) or
        LEADER_NOT_AVAILABLE (no leader right now); both are retriable.
        """
        for attempt in range(2):
            cluster = await self.metadata(
                [topic], allow_auto_create=allow_auto_create, refresh=attempt > 0
            )
            info = cluster.topics.get(topic)
            if info is not None and topic not in self._stale_topics:
                part = info.partitions.get(partition)
                if part is not None and part.leader >= 0 and part.leader in cluster.brokers:
                    return part.leader
        self.mark_stale(topic)
        if info is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"topic {topic!r}")
        if info.error_code and not info.partitions:
            raise KafkaError(info.error_code, f"topic {topic!r}")
        if partition not in info.partitions:
            raise KafkaError(
                ErrorCode.unknown_topic_or_partition,
                f"topic {topic!r} has no partition {partition} ({len(info.partitions)} partitions)",
            )
        raise KafkaError(
            ErrorCode.leader_not_available, f"no leader for partition {topic}-{partition}"
        )

    async def wait_for_topics(self, topics: Sequence[str], timeout_ms: int = 30000) -> None:
        """Poll metadata until every topic exists with a leader for each partition."""
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            cluster = await self.metadata(topics, refresh=True)
            ready = all(
                (info := cluster.topics.get(t)) is not None
                and not info.error_code
                and info.partitions
                and all(p.leader >= 0 for p in info.partitions.values())
                for t in topics
            )
            if ready:
                return
            if time.monotonic() >= deadline:
                raise KafkaTimeoutError(f"topics {list(topics)} not ready after {timeout_ms} ms")
            await asyncio.sleep(self.retry_backoff_ms / 1000)


class ClientUser(AsyncResource):
    """Base of objects built on one KafkaClient (producer, consumer, admins).

    Given a KafkaClient they borrow it and leave it open; given a bootstrap address they
    make their own (with ``security``: TLS / SASL) and close it with themselves.
    """

    _client: KafkaClient
    _owns_client: bool

    def _attach_client(
        self,
        client_or_bootstrap: KafkaClient | str | Sequence[str],
        *,
        client_id: str,
        request_timeout_ms: int,
        security: ClientSecurity | None = None,
    ) -> None:
        if isinstance(client_or_bootstrap, KafkaClient):
            self._client = client_or_bootstrap
            self._owns_client = False
        else:
            self._client = KafkaClient(
                client_or_bootstrap,
                client_id=client_id,
                request_timeout_ms=request_timeout_ms,
                security=security,
            )
            self._owns_client = True

    @property
    def client(self) -> KafkaClient:
        return self._client

    async def _close_client(self) -> None:
        if self._owns_client:
            await self._client.close()
