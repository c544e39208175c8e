"""``odradek configs`` against a two-broker cluster: a broker's own dynamic configs are
asked of that broker (wherever the bootstrap points), the default applies cluster-wide,
and topic configs go through ZooKeeper."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.cli.helpers import odradek
from tests.helpers.cluster import BrokerCluster, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.timeout(180)]


def test_configs_of_brokers_and_topics_in_a_cluster(
    cluster_factory: Callable[..., BrokerCluster],
) -> None:
    cluster = cluster_factory(2)
    boot = cluster.bootstrap(1)  # only broker 1: the client finds broker 2 itself

    def configs(*args: str):  # type: ignore[no-untyped-def]
        return odradek("configs", "-b", boot, *args)

    broker2 = ("--entity-type", "brokers", "--entity-name", "2")
    done = configs(*broker2, "--alter", "--add-config", "log.retention.ms=1234567")
    assert done.check().lines == ["Completed updating config for broker 2."]
    assert configs(*broker2, "--describe").check().lines == [
        "Dynamic configs for broker 2 are:",
        "  log.retention.ms=1234567 sensitive=false "
        "synonyms={DYNAMIC_BROKER_CONFIG:log.retention.ms=1234567}",
    ]
    found = cluster.zk.get_entity_config("brokers", "2")
    assert found == {"log.retention.ms": "1234567"}
    default = ("--entity-type", "brokers", "--entity-default")
    configs(*default, "--alter", "--add-config", "log.segment.bytes=2097152").check()
    assert configs("--entity-type", "brokers", "--describe").check().lines == [
        "Dynamic configs for broker 1 are:",
        "Dynamic configs for broker 2 are:",
        "  log.retention.ms=1234567 sensitive=false "
        "synonyms={DYNAMIC_BROKER_CONFIG:log.retention.ms=1234567}",
        "Default configs for brokers in the cluster are:",
        "  log.segment.bytes=2097152 sensitive=false "
        "synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.segment.bytes=2097152, "
        "DEFAULT_CONFIG:log.segment.bytes=1073741824}",
    ]

    cluster.create_topic("cfg", 1, replication_factor=2)
    topic = ("--entity-type", "topics", "--entity-name", "cfg")
    configs(*topic, "--alter", "--add-config", "retention.ms=60000").check()
    assert cluster.zk.get_entity_config("topics", "cfg") == {"retention.ms": "60000"}
    # Every broker answers from ZooKeeper; the synonyms are each broker's own fallbacks
    # (broker 2 has its own log.retention.ms).
    expected = {
        1: "DYNAMIC_TOPIC_CONFIG:retention.ms=60000, DEFAULT_CONFIG:log.retention.hours=168",
        2: "DYNAMIC_TOPIC_CONFIG:retention.ms=60000, "
        "DYNAMIC_BROKER_CONFIG:log.retention.ms=1234567, DEFAULT_CONFIG:log.retention.hours=168",
    }
    for broker_id, synonyms in expected.items():
        wait_for(
            lambda b=broker_id, synonyms=synonyms: odradek(
                "configs", "-b", cluster.bootstrap(b), *topic, "--describe"
            ).check().lines
            == [
                "Dynamic configs for topic cfg are:",
                f"  retention.ms=60000 sensitive=false synonyms={{{synonyms}}}",
            ],
            30,
            f"broker {broker_id}'s view of cfg's configs",
        )
