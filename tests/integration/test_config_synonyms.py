"""DescribeConfigs synonyms (v1+ ``include_synonyms``) as real clients read them: where a
value could come from, highest precedence first, as Kafka reports them."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from kafka.admin import ConfigFilterType, ConfigResourceType, KafkaAdminClient
from kafka.admin import ConfigResource as KafkaPythonResource

from tests.helpers.broker import BrokerProcess

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture
def configured_broker(tmp_path_factory: pytest.TempPathFactory) -> BrokerProcess:
    return BrokerProcess(
        tmp_path_factory.mktemp("synonyms") / "data",
        overrides={"log.retention.hours": "24"},
    )


def test_topic_and_broker_synonyms(configured_broker: BrokerProcess) -> None:
    broker = configured_broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("syn", 1, 1, config={"retention.ms": "1000"})])[
            "syn"
        ].result(30)
        topic = ConfigResource("topic", "syn")
        entry = admin.describe_configs([topic])[topic].result(10)["retention.ms"]
        # (confluent-kafka keys synonyms by name, so one of log.retention.hours' two
        # entries, static and default, is all it keeps.)
        synonyms = [(s.name, s.value, s.source) for s in entry.synonyms.values()]
        assert synonyms[0] == ("retention.ms", "1000", 1)  # DYNAMIC_TOPIC_CONFIG
        assert [name for name, _, _ in synonyms] == ["retention.ms", "log.retention.hours"]

        client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            found = client.describe_configs(
                [KafkaPythonResource(ConfigResourceType.BROKER, "0")],
                include_synonyms=True,
                config_filter=ConfigFilterType.ALL,
            )
        finally:
            client.close()
        entries = found["broker"]["0"]
        assert entries["log.retention.hours"]["synonyms"] == [
            {"name": "log.retention.hours", "value": "24", "source": "STATIC_BROKER_CONFIG"},
            {"name": "log.retention.hours", "value": "168", "source": "DEFAULT_CONFIG"},
        ]
    finally:
        broker.stop()
