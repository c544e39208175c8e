"""``odradek log-dirs describe`` against a real broker, and DescribeLogDirs from other
clients (kafka-python, odradek's Admin) seeing the same thing."""

from __future__ import annotations

import asyncio
import json

import pytest
from kafka.admin import KafkaAdminClient

from odradek.client.admin import Admin
from odradek.client.sync import SyncAdmin
from tests.cli.helpers import odradek
from tests.helpers.broker import BrokerProcess, free_port

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def loaded(shared_broker: BrokerProcess) -> BrokerProcess:
    bootstrap = shared_broker.bootstrap
    odradek("topics", "create", "ld-a", "--partitions", "2", "-b", bootstrap).check()
    odradek("topics", "create", "ld-b", "-b", bootstrap).check()
    odradek("produce", "ld-a", "--partition", "1", "-b", bootstrap, stdin=b"one\ntwo\n").check()
    return shared_broker


def test_describe_prints_kafka_json(loaded: BrokerProcess) -> None:
    result = odradek("log-dirs", "describe", "-b", loaded.bootstrap, "--topic-list", "ld-a")
    result.check()
    assert result.stderr.splitlines() == [
        "Querying brokers for log directories information",
        "Received log directory information from brokers 0",
    ]
    doc = json.loads(result.out)
    assert doc["version"] == 1 and [b["broker"] for b in doc["brokers"]] == [0]
    (log_dir,) = doc["brokers"][0]["logDirs"]
    assert log_dir["logDir"] == str(loaded.data_dir.absolute()) and log_dir["error"] is None
    parts = {p["partition"]: p for p in log_dir["partitions"]}
    assert sorted(parts) == ["ld-a-0", "ld-a-1"]  # ld-b filtered out
    assert parts["ld-a-0"] == {"partition": "ld-a-0", "size": 0, "offsetLag": 0, "isFuture": False}
    assert parts["ld-a-1"]["size"] > 0


def test_describe_errors_are_one_line(loaded: BrokerProcess) -> None:
    odradek("log-dirs", "describe", "-b", loaded.bootstrap, "--broker-list", "x").check_error(
        "--broker-list must be a comma-separated list"
    )
    port = free_port()
    odradek("log-dirs", "describe", "-b", f"127.0.0.1:{port}").check_error()


def test_kafka_python_and_admin_agree(loaded: BrokerProcess) -> None:
    client = KafkaAdminClient(bootstrap_servers=loaded.bootstrap)
    try:
        (answer,) = client.describe_log_dirs()
    finally:
        client.close()
    (log_dir,) = answer["log_dirs"]
    assert log_dir["error_code"] == 0
    assert log_dir["log_dir"] == str(loaded.data_dir.absolute())
    assert log_dir["total_bytes"] >= log_dir["usable_bytes"] > 0  # v4
    sizes = {
        (t["name"], p["partition_index"]): p["partition_size"]
        for t in log_dir["topics"]
        for p in t["partitions"]
    }

    async def ours() -> dict[int, dict[str, object]]:
        async with Admin(loaded.bootstrap) as admin:
            return await admin.describe_log_dirs(partitions=[("ld-a", 1), ("ld-b", 0)])

    described = asyncio.run(ours())
    info = described[0][log_dir["log_dir"]]
    assert info.error is None  # type: ignore[attr-defined]
    assert {tp: r.size for tp, r in info.replicas.items()} == {  # type: ignore[attr-defined]
        ("ld-a", 1): sizes[("ld-a", 1)],
        ("ld-b", 0): sizes[("ld-b", 0)],
    }
    with SyncAdmin(loaded.bootstrap) as sync_admin:
        blocking = sync_admin.describe_log_dirs([0], [("ld-a", 1)])
    assert list(blocking[0][log_dir["log_dir"]].replicas) == [("ld-a", 1)]
