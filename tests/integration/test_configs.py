"""Incremental config operations and dynamic broker defaults, through confluent-kafka."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from tests.helpers.broker import BrokerProcess

pytestmark = pytest.mark.integration
WAIT_S = 15


def _describe(admin: AdminClient, resource: ConfigResource) -> dict[str, str]:
    return {
        name: entry.value
        for name, entry in admin.describe_configs([resource])[resource].result(WAIT_S).items()
    }


def _incremental(admin: AdminClient, resource: ConfigResource, *entries: ConfigEntry) -> None:
    target = ConfigResource(resource.restype, resource.name, incremental_configs=list(entries))
    admin.incremental_alter_configs([target])[target].result(WAIT_S)


def test_append_subtract_and_dynamic_broker_defaults(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("cfg", 1, 1)])["cfg"].result(WAIT_S)
    topic = ConfigResource("topic", "cfg")

    _incremental(
        admin,
        topic,
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
    )
    assert set(_describe(admin, topic)["cleanup.policy"].split(",")) == {"delete", "compact"}
    _incremental(
        admin,
        topic,
        ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT),
    )
    assert _describe(admin, topic)["cleanup.policy"] == "compact"
    with pytest.raises(KafkaException, match="not a list config"):
        _incremental(
            admin,
            topic,
            ConfigEntry("retention.ms", "5", incremental_operation=AlterConfigOpType.APPEND),
        )

    # A dynamic broker default reaches every topic without an override of its own.
    node = ConfigResource("broker", "0")
    _incremental(
        admin,
        node,
        ConfigEntry("log.retention.ms", "123456", incremental_operation=AlterConfigOpType.SET),
    )
    assert _describe(admin, node)["log.retention.ms"] == "123456"
    assert _describe(admin, topic)["retention.ms"] == "123456"
    with pytest.raises(KafkaException, match="cannot be updated dynamically"):
        _incremental(
            admin,
            node,
            ConfigEntry("num.io.threads", "4", incremental_operation=AlterConfigOpType.SET),
        )

    # Both survive a restart.
    broker.stop()
    broker.start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert _describe(admin, topic)["cleanup.policy"] == "compact"
    assert _describe(admin, topic)["retention.ms"] == "123456"
