"""Topic names that differ only in '.' versus '_' collide, as in Kafka (Topic.hasCollision).

Kafka's metric names replace '.' with '_', so ``a.b`` and ``a_b`` cannot both exist; the
second one is refused with INVALID_TOPIC_EXCEPTION on every path that creates topics.
"""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from tests.helpers.broker import BrokerProcess
from tests.helpers.raw import METADATA, RawClient

pytestmark = pytest.mark.integration


@pytest.fixture
def admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def _create_error(admin: AdminClient, name: str, *, validate_only: bool = False) -> KafkaError:
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=1, replication_factor=1)],
        validate_only=validate_only,
        request_timeout=10,
    )
    with pytest.raises(KafkaException) as info:
        futures[name].result(timeout=15)
    return info.value.args[0]


def _create(admin: AdminClient, name: str) -> None:
    admin.create_topics([NewTopic(name, num_partitions=1)])[name].result(timeout=15)


@pytest.mark.parametrize(("first", "second"), [("a.b", "a_b"), ("a_b", "a.b"), ("x_y.z", "x.y_z")])
def test_create_refuses_a_colliding_name(admin: AdminClient, first: str, second: str) -> None:
    _create(admin, first)
    error = _create_error(admin, second)
    assert error.code() == KafkaError.TOPIC_EXCEPTION  # INVALID_TOPIC_EXCEPTION (17)
    assert error.str() == f"Topic '{second}' collides with existing topic: {first}"
    error = _create_error(admin, second, validate_only=True)
    assert error.code() == KafkaError.TOPIC_EXCEPTION
    assert sorted(admin.list_topics(timeout=10).topics) == [first]


def test_an_existing_name_is_still_topic_already_exists(admin: AdminClient) -> None:
    _create(admin, "same.name")
    assert _create_error(admin, "same.name").code() == KafkaError.TOPIC_ALREADY_EXISTS


def test_auto_creation_refuses_a_colliding_name(admin: AdminClient, broker: BrokerProcess) -> None:
    _create(admin, "auto.topic")
    raw = RawClient(broker.port)
    try:
        response = raw.call(
            METADATA, 9, {"topics": [{"name": "auto_topic"}], "allow_auto_topic_creation": True}
        )
    finally:
        raw.sock.close()
    assert response.topics[0].error_code == ErrorCode.invalid_topic_exception  # type: ignore[attr-defined]
    assert sorted(admin.list_topics(timeout=10).topics) == ["auto.topic"]


def test_the_cli_warns_like_kafka_topics_and_reports_the_collision(broker: BrokerProcess) -> None:
    from tests.cli.helpers import odradek

    first = odradek("topics", "create", "m.n", "-b", broker.bootstrap).check()
    assert "topics with a period ('.') or underscore ('_') could collide" in first.stderr
    assert odradek("topics", "create", "plain", "-b", broker.bootstrap).check().stderr == ""
    odradek("topics", "create", "m_n", "-b", broker.bootstrap).check_error(
        "INVALID_TOPIC_EXCEPTION", "Topic 'm_n' collides with existing topic: m.n"
    )
