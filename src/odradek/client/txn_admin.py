"""TxnAdmin: transactions and producers seen from outside (what kafka-transactions.sh uses).

* :meth:`TxnAdmin.list_transactions` — ListTransactions on every broker (each coordinator
  knows the ids of the ``__transaction_state`` partitions it leads).
* :meth:`TxnAdmin.describe_transaction` — FindCoordinator (key type 1, a transactional id),
  then DescribeTransactions there.
* :meth:`TxnAdmin.describe_producers` — DescribeProducers on the partition's leader.
* :meth:`TxnAdmin.abort_transaction` — WriteTxnMarkers (ABORT) for one producer to one
  partition's leader: the operator's way out of a hanging transaction (KIP-664).

Errors come back as :class:`~odradek.client.errors.KafkaError` with Kafka's names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from odradek.client.core import ClientUser, KafkaClient
from odradek.client.entities import build_request
from odradek.client.errors import ClientError, KafkaError
from odradek.client.security import ClientSecurity

FIND_COORDINATOR = 10
WRITE_TXN_MARKERS = 27
DESCRIBE_PRODUCERS = 61
DESCRIBE_TRANSACTIONS = 65
LIST_TRANSACTIONS = 66
_TRANSACTION_KEY_TYPE = 1
_MAX_VERSIONS = {
    FIND_COORDINATOR: 4,
    WRITE_TXN_MARKERS: 1,
    DESCRIBE_PRODUCERS: 0,
    DESCRIBE_TRANSACTIONS: 0,
    LIST_TRANSACTIONS: 1,
}


@dataclass(frozen=True)
class TransactionListing:
    transactional_id: str
    coordinator: int
    producer_id: int
    state: str


@dataclass(frozen=True)
class TransactionDescription:
    coordinator: int
    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str
    timeout_ms: int
    start_time_ms: int  # -1: no transaction open
    partitions: list[tuple[str, int]]


@dataclass(frozen=True)
class ProducerDescription:
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    last_sequence: int
    last_timestamp: int
    current_txn_start_offset: int  # -1: none open


class TxnAdmin(ClientUser):
    def __init__(
        self,
        client_or_bootstrap: KafkaClient | str,
        *,
        request_timeout_ms: int = 30000,
        security: ClientSecurity | None = None,
    ) -> None:
        self._attach_client(
            client_or_bootstrap,
            client_id="odradek-txn-admin",
            request_timeout_ms=request_timeout_ms,
            security=security,
        )

    async def start(self) -> None:
        await self._client.start()

    async def close(self) -> None:
        await self._close_client()

    async def _send(self, node: int | None, api_key: int, **values: Any) -> Any:
        connection = await self._client.connection(node)
        if api_key not in connection.api_versions:
            raise ClientError(f"broker {connection.node_id} does not support api {api_key}")
        version = min(connection.version_for(api_key), _MAX_VERSIONS[api_key])
        return await self._client.send(
            connection.node_id, build_request(api_key, version, **values)
        )

    async def list_transactions(
        self, states: list[str] | None = None, producer_ids: list[int] | None = None
    ) -> list[TransactionListing]:
        cluster = await self._client.metadata([], refresh=True)
        found: list[TransactionListing] = []
        for node in sorted(cluster.brokers):
            response = await self._send(
                node,
                LIST_TRANSACTIONS,
                state_filters=list(states or []),
                producer_id_filters=list(producer_ids or []),
                duration_filter=-1,
            )
            if int(response.error_code):
                raise KafkaError(int(response.error_code), f"ListTransactions on broker {node}")
            for state in response.transaction_states:
                found.append(
                    TransactionListing(
                        str(state.transactional_id),
                        node,
                        int(state.producer_id),
                        str(state.transaction_state),
                    )
                )
        return sorted(found, key=lambda t: t.transactional_id)

    async def find_coordinator(self, transactional_id: str) -> int:
        response = await self._send(
            None,
            FIND_COORDINATOR,
            key=transactional_id,
            key_type=_TRANSACTION_KEY_TYPE,
            coordinator_keys=[transactional_id],
        )
        answer = response.coordinators[0] if hasattr(response, "coordinators") else response
        if int(answer.error_code):
            raise KafkaError(int(answer.error_code), f"FindCoordinator for {transactional_id!r}")
        node = int(answer.node_id)
        if node not in self._client.cluster.brokers:
            await self._client.metadata([], refresh=True)
        return node

    async def describe_transaction(self, transactional_id: str) -> TransactionDescription:
        node = await self.find_coordinator(transactional_id)
        response = await self._send(
            node, DESCRIBE_TRANSACTIONS, transactional_ids=[transactional_id]
        )
        state = response.transaction_states[0]
        if int(state.error_code):
            raise KafkaError(int(state.error_code), f"transactional id {transactional_id!r}")
        start = state.transaction_start_time
        start_ms = int(start.timestamp() * 1000) if hasattr(start, "timestamp") else int(start)
        timeout = state.transaction_timeout
        timeout_ms = (
            int(timeout.total_seconds() * 1000)
            if hasattr(timeout, "total_seconds")
            else int(timeout)
        )
        return TransactionDescription(
            node,
            transactional_id,
            int(state.producer_id),
            int(state.producer_epoch),
            str(state.transaction_state),
            timeout_ms,
            start_ms,
            [(str(t.topic), int(p)) for t in state.topics for p in t.partitions],
        )

    async def _leader(self, topic: str, partition: int) -> int:
        cluster = await self._client.metadata([topic], refresh=True)
        leader = cluster.leader(topic, partition)
        if leader is None:
            raise KafkaError(3, f"{topic}-{partition}")  # UNKNOWN_TOPIC_OR_PARTITION
        return leader

    async def describe_producers(self, topic: str, partition: int) -> list[ProducerDescription]:
        node = await self._leader(topic, partition)
        response = await self._send(
            node, DESCRIBE_PRODUCERS, topics=[{"name": topic, "partition_indexes": [partition]}]
        )
        answer = response.topics[0].partitions[0]
        if int(answer.error_code):
            raise KafkaError(int(answer.error_code), f"{topic}-{partition}")
        return [
            ProducerDescription(
                int(p.producer_id),
                int(p.producer_epoch),
                int(p.coordinator_epoch),
                int(p.last_sequence),
                int(p.last_timestamp),
                int(p.current_txn_start_offset),
            )
            for p in answer.active_producers
        ]

    async def abort_transaction(
        self,
        topic: str,
        partition: int,
        *,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
    ) -> None:
        node = await self._leader(topic, partition)
        response = await self._send(
            node,
            WRITE_TXN_MARKERS,
            markers=[
                {
                    "producer_id": producer_id,
                    "producer_epoch": producer_epoch,
                    "transaction_result": False,
                    "topics": [{"name": topic, "partition_indexes": [partition]}],
                    "coordinator_epoch": coordinator_epoch,
                }
            ],
        )
        code = int(response.markers[0].topics[0].partitions[0].error_code)
        if code:
            raise KafkaError(code, f"aborting producer {producer_id} on {topic}-{partition}")
