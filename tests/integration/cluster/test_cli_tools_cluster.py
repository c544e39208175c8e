"""``odradek broker-api-versions`` and ``odradek delete-records`` against a two-broker
cluster on a real ZooKeeper: the first asks every broker the metadata lists (bootstrapped
through one), the second reaches each partition's leader."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cli.helpers import odradek
from tests.helpers.cluster import BrokerCluster
from tests.helpers.raw import advertised_versions

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.timeout(180)]


def test_every_broker_answers_and_each_leader_deletes(
    cluster_factory: Callable[..., BrokerCluster], tmp_path: Path
) -> None:
    cluster = cluster_factory(2)
    boot = cluster.bootstrap(1)  # only broker 1: the tool finds broker 2 itself

    lines = odradek("broker-api-versions", "-b", boot).check().lines
    heads = [line for line in lines if " -> (" in line]
    assert heads == [f"{cluster.brokers[b].bootstrap} (id: {b} rack: null) -> (" for b in (1, 2)]
    assert lines.count(")") == 2
    for broker_id, broker in cluster.brokers.items():
        start = lines.index(f"{broker.bootstrap} (id: {broker_id} rack: null) -> (")
        block = lines[start + 1 : lines.index(")", start)]
        ranges = advertised_versions(broker.port)
        shown = {
            int(line.split("(", 1)[1].split(")", 1)[0]): line.strip().rstrip(",") for line in block
        }
        assert set(ranges) <= set(shown)
        for key, (low, high) in ranges.items():
            assert f"({key}): {low if low == high else f'{low} to {high}'} [" in shown[key]
        # A cluster broker serves leader elections, which the single broker does not.
        assert shown[43].startswith("ElectLeaders(43): ") and "UNSUPPORTED" not in shown[43]

    cluster.create_topic("drc", 2, replication_factor=2)
    leaders = cluster.leaders("drc", via=1)
    assert sorted(set(leaders.values())) == [1, 2]  # one leader on each broker
    for partition in (0, 1):
        odradek("produce", "drc", "-p", str(partition), "-b", boot, stdin=b"a\nb\nc\n").check()
    spec = tmp_path / "offsets.json"
    entries = [{"topic": "drc", "partition": 0, "offset": 2}, {"topic": "drc", "partition": 1,
               "offset": -1}]  # fmt: skip
    spec.write_text(json.dumps({"partitions": entries, "version": 1}))
    result = odradek("delete-records", "-b", boot, "--offset-json-file", str(spec)).check()
    assert result.lines[2:] == [
        "partition: drc-0\tlow_watermark: 2",
        "partition: drc-1\tlow_watermark: 3",
    ]
    earliest = odradek("get-offsets", "-b", boot, "--topic", "drc", "--time", "earliest")
    assert earliest.check().lines == ["drc:0:2", "drc:1:3"]
