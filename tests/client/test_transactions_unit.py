"""The transactional producer against the fake cluster: which answers are retried (and how
the coordinator is found again), and which become which typed exception."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode as E

from odradek.client import (
    InvalidProducerEpochError,
    Producer,
    ProducerFencedError,
    TransactionAbortableError,
)
from odradek.client.transactions import State, classify
from tests.client.fake_broker import FakeCluster

PRODUCE, FIND_COORDINATOR, INIT_PRODUCER_ID = 0, 10, 22
ADD_PARTITIONS, ADD_OFFSETS, END_TXN, TXN_OFFSET_COMMIT = 24, 25, 26, 28


def test_classification_follows_the_java_client() -> None:
    assert isinstance(classify(E.producer_fenced, "x"), ProducerFencedError)
    assert isinstance(classify(E.invalid_producer_epoch, "x"), ProducerFencedError)
    assert not classify(E.invalid_txn_state, "x").abortable
    assert not classify(E.transactional_id_authorization_failed, "x").abortable
    for code in (E.illegal_generation, E.unknown_member_id, E.fenced_instance_id,
                 E.unknown_producer_id, E.group_authorization_failed):  # fmt: skip
        assert classify(code, "x").abortable


class Coordinator:
    """Answers the transaction APIs; node 0 says NOT_COORDINATOR, node 1 is the coordinator
    and answers each API's first request with a retriable error."""

    def __init__(self) -> None:
        self.found = 0
        self.first: set[int] = set()
        self.produce_error: int | None = None

    def __call__(self, broker, api_key, version, request):
        if api_key == FIND_COORDINATOR:
            self.found += 1
            node = 0 if self.found == 1 else 1  # the first answer is stale
            return {
                "error_code": 0, "node_id": node, "host": "127.0.0.1",
                "port": broker.cluster.brokers[node].port,
                "coordinators": [{"key": "t", "node_id": node, "host": "127.0.0.1",
                                  "port": broker.cluster.brokers[node].port, "error_code": 0}],
            }  # fmt: skip
        if api_key == PRODUCE and self.produce_error is not None:
            return {
                "responses": [
                    {"name": t.name, "partition_responses": [
                        {"index": p.index, "error_code": self.produce_error, "base_offset": -1}
                        for p in t.partition_data]}
                    for t in request.topic_data
                ]
            }  # fmt: skip
        if api_key not in (INIT_PRODUCER_ID, ADD_PARTITIONS, ADD_OFFSETS, END_TXN):
            return None
        if broker.node_id == 0:
            code = E.not_coordinator
        elif api_key not in self.first:
            self.first.add(api_key)
            code = {
                INIT_PRODUCER_ID: E.coordinator_load_in_progress,
                ADD_PARTITIONS: E.concurrent_transactions,
                ADD_OFFSETS: E.concurrent_transactions,
                END_TXN: E.concurrent_transactions,
            }[api_key]
        else:
            code = E.none
        if api_key == INIT_PRODUCER_ID:
            return {"error_code": code, "producer_id": 7, "producer_epoch": 3}
        if api_key == ADD_PARTITIONS:
            return {
                "results_by_topic_v3_and_below": [
                    {"name": t.name, "results_by_partition": [
                        {"partition_index": p, "partition_error_code": code}
                        for p in t.partitions]}
                    for t in request.v3_and_below_topics
                ]
            }  # fmt: skip
        return {"error_code": code}


async def test_retriable_answers_are_retried_and_the_coordinator_found_again() -> None:
    async with FakeCluster(brokers=2) as cluster:
        cluster.create_topic("t", 1, leaders=[0])
        coordinator = cluster.intercept(Coordinator())
        async with Producer(
            cluster.bootstrap, transactional_id="tid", retry_backoff_ms=10, linger_ms=0
        ) as producer:
            await producer.init_transactions()
            assert (producer.producer_id, producer.producer_epoch) == (7, 3)
            producer.begin_transaction()
            future = await producer.send("t", b"v", partition=0)
            await producer.commit_transaction()
            assert (await future).offset == 0
        init = cluster.requests(INIT_PRODUCER_ID)
        assert [r.transactional_id for r in init] == ["tid"] * 3  # stale node, loading, ok
        assert len(cluster.requests(ADD_PARTITIONS)) == 2  # CONCURRENT_TRANSACTIONS, ok
        ends = cluster.requests(END_TXN)
        assert len(ends) == 2 and all(r.committed for r in ends)
        assert coordinator.found == 2
        [produce] = cluster.requests(PRODUCE)
        assert produce.transactional_id == "tid"


@pytest.mark.parametrize(
    ("code", "error", "abortable"),
    [
        (E.invalid_producer_epoch, InvalidProducerEpochError, True),
        (E.producer_fenced, ProducerFencedError, False),
        (E.unknown_producer_id, TransactionAbortableError, True),
    ],
)
async def test_produce_errors_are_typed(code: int, error: type, abortable: bool) -> None:
    async with FakeCluster(brokers=2) as cluster:
        cluster.create_topic("t", 1, leaders=[0])
        coordinator = Coordinator()
        coordinator.found = 1  # no stale answer, no retriable errors this time
        coordinator.first = {INIT_PRODUCER_ID, ADD_PARTITIONS, ADD_OFFSETS, END_TXN}
        cluster.intercept(coordinator)
        async with Producer(cluster.bootstrap, transactional_id="tid", linger_ms=0) as producer:
            await producer.init_transactions()
            producer.begin_transaction()
            coordinator.produce_error = code
            future = await producer.send("t", b"v", partition=0)
            with pytest.raises(error) as info:
                await future
            assert info.value.abortable is abortable
            with pytest.raises(error):
                await producer.commit_transaction()
            if abortable:
                coordinator.produce_error = None
                await producer.abort_transaction()
                assert producer._txn is not None and producer._txn.state is State.READY
                if code == E.unknown_producer_id:  # KIP-360: a new epoch after the abort
                    assert len(cluster.requests(INIT_PRODUCER_ID)) == 2
                producer.begin_transaction()
                await producer.send("t", b"w", partition=0)
                await producer.commit_transaction()
            else:
                with pytest.raises(ProducerFencedError):
                    producer.begin_transaction()
