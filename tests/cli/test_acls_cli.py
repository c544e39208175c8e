"""``odradek acls`` flag handling without a broker: which ACLs the flags stand for, and how
a Java client properties file becomes librdkafka settings."""

from __future__ import annotations

import pytest

from odradek.broker.security.acl import (
    CLUSTER_NAME,
    AccessControlEntry,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from odradek.cli.acls import (
    acls_by_resource,
    block,
    client_config,
    entries,
    no_answer,
    resource_filters,
)
from odradek.cli.errors import CliError

TOPIC, GROUP, CLUSTER, TXN = (
    ResourceType.TOPIC,
    ResourceType.GROUP,
    ResourceType.CLUSTER,
    ResourceType.TRANSACTIONAL_ID,
)
LITERAL = PatternType.LITERAL


def ops(acls: list[AccessControlEntry]) -> set[Operation]:
    return {acl.operation for acl in acls}


def make(principals: tuple[str, ...] = ("User:bob",)):  # type: ignore[no-untyped-def]
    return lambda operations: entries(principals, (), (), (), operations)


def test_principals_hosts_and_operations_multiply() -> None:
    acls = entries(
        ["User:a", "User:b"], ["User:c"], ["10.0.0.1", "10.0.0.2"], [], [Operation.READ]
    )
    assert len(acls) == 5
    denied = [acl for acl in acls if acl.permission is Permission.DENY]
    assert denied == [AccessControlEntry("User:c", "*", Operation.READ, Permission.DENY)]
    with pytest.raises(CliError, match="Type:name"):
        entries(["bob"], [], [], [], [Operation.READ])


def test_producer_and_consumer_conveniences() -> None:
    filters = resource_filters(["t"], ["g"], ["tx"], False, LITERAL)
    producer = acls_by_resource(filters, make(), True, False, True, [])
    assert ops(producer[(TOPIC, "t", LITERAL)]) == {
        Operation.WRITE,
        Operation.DESCRIBE,
        Operation.CREATE,
    }
    assert ops(producer[(TXN, "tx", LITERAL)]) == {Operation.WRITE, Operation.DESCRIBE}
    assert ops(producer[(CLUSTER, CLUSTER_NAME, LITERAL)]) == {Operation.IDEMPOTENT_WRITE}
    assert (GROUP, "g", LITERAL) not in producer
    both = acls_by_resource(filters, make(), True, True, False, [])
    assert ops(both[(TOPIC, "t", LITERAL)]) == {
        Operation.WRITE,
        Operation.DESCRIBE,
        Operation.CREATE,
        Operation.READ,
    }
    assert ops(both[(GROUP, "g", LITERAL)]) == {Operation.READ}


def test_operations_a_resource_type_does_not_have_are_refused() -> None:
    filters = resource_filters([], ["g"], [], False, LITERAL)
    with pytest.raises(CliError, match="ResourceType GROUP only supports operations"):
        acls_by_resource(filters, make(), False, False, False, [Operation.WRITE])
    cluster = resource_filters([], [], [], True, LITERAL)
    assert cluster == [(CLUSTER, CLUSTER_NAME, LITERAL)]
    # --cluster with a prefixed pattern names no resource, as kafka-acls.
    assert resource_filters([], [], [], True, PatternType.PREFIXED) == []
    # A delegation token supports Describe only (AclEntry.supportedOperations).
    token = resource_filters([], [], [], False, LITERAL, ["tok-1"])
    assert token == [(ResourceType.DELEGATION_TOKEN, "tok-1", LITERAL)]
    with pytest.raises(CliError, match="DELEGATION_TOKEN only supports operations All, Describe"):
        acls_by_resource(token, make(), False, False, False, [Operation.WRITE])
    assert ops(acls_by_resource(token, make(), False, False, False, [Operation.DESCRIBE])[
        token[0]
    ]) == {Operation.DESCRIBE}


def test_listing_block_is_kafkas() -> None:
    acls = [
        AccessControlEntry("User:a", "*", Operation.READ, Permission.ALLOW),
        AccessControlEntry("User:a", "*", Operation.WRITE, Permission.ALLOW),
    ]
    assert block(acls) == (
        "\n \t(principal=User:a, host=*, operation=READ, permissionType=ALLOW)\n"
        "\t(principal=User:a, host=*, operation=WRITE, permissionType=ALLOW) \n"
    )


def test_command_config_is_translated() -> None:
    props = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="admin" password="s3cret";',
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": "/etc/ca.pem",
        "ssl.endpoint.identification.algorithm": "",
        "client.id": "acl-tool",
        "request.timeout.ms": "1000",  # not given to librdkafka: warned about as unused
    }
    assert client_config("h:1", props) == {
        "bootstrap.servers": "h:1",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "admin",
        "sasl.password": "s3cret",
        "ssl.ca.location": "/etc/ca.pem",
        "ssl.endpoint.identification.algorithm": "none",
        "client.id": "acl-tool",
    }
    assert client_config("h:1", None) == {"bootstrap.servers": "h:1"}
    with pytest.raises(CliError, match=r"sasl\.jaas\.config"):
        client_config("h:1", {"sasl.jaas.config": "nonsense"})


def test_no_answer_says_why() -> None:
    # librdkafka retries a listener that hangs up until the request times out: the line
    # carries its last complaint and the --command-config hint, unless nothing listened.
    assert no_answer("h:1", []) == "no answer from h:1 within 30 s"
    refused = no_answer("h:1", ["h:1/bootstrap: Connect to ipv4#h:1 failed: Connection refused"])
    assert "Connection refused" in refused and "command-config" not in refused
    down = no_answer("h:1", ["1/1 brokers are down"])
    assert "(librdkafka: 1/1 brokers are down); if this listener uses SSL or SASL" in down
    assert "--command-config FILE" in down
