import json
from pathlib import Path

import pytest

from odradek.cluster.local_store import FILE_NAME, LocalMetadataStore
from odradek.cluster.metadata import BrokerInfo, MetadataError, validate_topic_name


def store(tmp_path: Path) -> LocalMetadataStore:
    return LocalMetadataStore(tmp_path, BrokerInfo(1, "127.0.0.1", 9092))


def test_topics_persist_across_reopen(tmp_path: Path) -> None:
    first = store(tmp_path)
    created = first.create_topic("events", 3, 1, {"retention.ms": "1000"})
    first.add_partitions("events", 5)
    first.set_broker_configs({"log.retention.ms": "5"})
    again = store(tmp_path)
    assert again.cluster_id == first.cluster_id
    topic = again.topic("events")
    assert topic is not None
    assert topic.topic_id == created.topic_id
    assert sorted(topic.partitions) == [0, 1, 2, 3, 4]
    assert topic.partitions[4].leader == 1
    assert topic.configs == {"retention.ms": "1000"}
    assert again.broker_configs() == {"log.retention.ms": "5"}
    again.delete_topic("events")
    assert store(tmp_path).topic("events") is None


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda s: s.create_topic("t", 1, 1, {}), "TOPIC_ALREADY_EXISTS"),
        (lambda s: s.create_topic("u", 0, 1, {}), "INVALID_PARTITIONS"),
        (lambda s: s.create_topic("u", 1, 2, {}), "INVALID_REPLICATION_FACTOR"),
        (lambda s: s.create_topic("bad name", 1, 1, {}), "INVALID_TOPIC_EXCEPTION"),
        (lambda s: s.add_partitions("t", 1), "INVALID_PARTITIONS"),
        (lambda s: s.add_partitions("nope", 3), "UNKNOWN_TOPIC_OR_PARTITION"),
        (lambda s: s.delete_topic("nope"), "UNKNOWN_TOPIC_OR_PARTITION"),
    ],
)
def test_refusals_carry_kafka_error_names(tmp_path: Path, call, error: str) -> None:
    s = store(tmp_path)
    s.create_topic("t", 1, 1, {})
    with pytest.raises(MetadataError) as info:
        call(s)
    assert info.value.error_name == error


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "a/b", "ü"])
def test_illegal_topic_names(name: str) -> None:
    with pytest.raises(MetadataError):
        validate_topic_name(name)


def test_corrupt_file_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / FILE_NAME).write_text("{not json")
    with pytest.raises(MetadataError, match="cannot read"):
        store(tmp_path)


def test_file_is_complete_json(tmp_path: Path) -> None:
    s = store(tmp_path)
    s.create_topic("a", 2, 1, {})
    doc = json.loads((tmp_path / FILE_NAME).read_text())
    assert doc["topics"][0]["partitions"] == 2
    assert not (tmp_path / (FILE_NAME + ".tmp")).exists()


def test_client_quotas_persist_across_reopen(tmp_path: Path) -> None:
    first = store(tmp_path)
    first.set_client_quota({"user": "u", "client-id": None}, {"producer_byte_rate": 1024.0})
    first.set_client_quota({"client-id": "c"}, {"consumer_byte_rate": 2048.0})
    first.set_client_quota({"client-id": "c"}, {})  # no values: the entity is removed
    reopened = store(tmp_path)
    assert reopened.client_quotas() == [
        ({"user": "u", "client-id": None}, {"producer_byte_rate": 1024.0})
    ]
