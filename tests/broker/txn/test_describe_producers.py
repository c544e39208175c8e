"""DescribeProducers for a partition this broker does not host: NOT_LEADER_OR_FOLLOWER
when the cluster has it elsewhere (clients then find its leader), UNKNOWN_TOPIC_OR_PARTITION
when nobody does (Kafka's getPartitionOrError)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

from kio.schema.errors import ErrorCode

from odradek.broker.replica_manager import ReplicaManager
from odradek.broker.requests import RequestContext
from odradek.broker.txn.handlers import handle_describe_producers
from odradek.protocol.headers import RequestHeader
from odradek.protocol.versions import DESCRIBE_PRODUCERS
from odradek.storage.config import LogConfig
from odradek.storage.log_manager import LogManager


def test_a_partition_hosted_elsewhere_is_not_leader_or_follower(tmp_path: Path) -> None:
    logs = LogManager(tmp_path, LogConfig())
    logs.startup()
    replicas = ReplicaManager(1, logs)
    replicas.known_in_cluster = lambda topic, _index: topic == "elsewhere"
    server = SimpleNamespace(replica_manager=replicas)
    header = RequestHeader(DESCRIBE_PRODUCERS, 0, 7, "test")
    ctx = RequestContext(header, "127.0.0.1", 1, "c")
    request = SimpleNamespace(
        topics=[SimpleNamespace(name=name, partition_indexes=[0]) for name in ("elsewhere", "x")]
    )
    response = asyncio.run(handle_describe_producers(server, ctx, request))  # type: ignore[arg-type]
    codes = [t.partitions[0].error_code for t in response.topics]
    assert codes == [ErrorCode.not_leader_or_follower, ErrorCode.unknown_topic_or_partition]
