"""The ACL authorizer with real clients over SASL_PLAINTEXT (PLAIN and SCRAM).

One broker with ``authorizer.class.name=kafka.security.authorizer.AclAuthorizer`` and
``super.users=User:admin``; the admin (a super user) grants ACLs with confluent-kafka's
admin client, as an operator would. Each test uses its own principals' topics, groups and
transactional ids, so they do not depend on one another.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from tests.helpers.broker import BrokerProcess, free_port
from tests.helpers.secured import start_secured_broker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
PASSWORDS = {"admin": "admin-pw", "alice": "alice-pw", "bob": "bob-pw", "dan": "dan-pw"}
CAROL_PASSWORD = "carol-scram-pw"
TOPIC_DENIED = KafkaError.TOPIC_AUTHORIZATION_FAILED


@dataclass
class Secured:
    broker: BrokerProcess
    sasl_port: int
    # librdkafka destroys a client its futures still wait on once it is collected: keep them.
    admins: dict[str, AdminClient] = field(default_factory=dict)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.sasl_port}"

    def config(self, user: str, **extra: Any) -> dict[str, Any]:
        if user == "carol":
            login = {"sasl.mechanism": "SCRAM-SHA-256", "sasl.password": CAROL_PASSWORD}
        else:
            login = {"sasl.mechanism": "PLAIN", "sasl.password": PASSWORDS[user]}
        return {
            "bootstrap.servers": self.bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.username": user,
            **login,
            **extra,
        }

    def admin(self, user: str = "admin") -> AdminClient:
        if user not in self.admins:
            self.admins[user] = AdminClient(self.config(user))
        return self.admins[user]


def start_broker(root: Path, **overrides: str) -> Secured:
    """The authorizer on, admin a super user; users log in on SASL_PLAINTEXT."""
    secured = start_secured_broker(
        root,
        ["SASL_PLAINTEXT", "PLAINTEXT"],
        plain_users=PASSWORDS,
        mechanisms="PLAIN,SCRAM-SHA-256",
        overrides={"authorizer.class.name": AUTHORIZER, "super.users": "User:admin", **overrides},
    )
    return Secured(secured.broker, secured.ports["SASL_PLAINTEXT"])


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    secured = start_broker(tmp_path_factory.mktemp("acls"))
    try:
        futures = secured.admin().alter_user_scram_credentials(
            [
                UserScramCredentialUpsertion(
                    "carol",
                    ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                    CAROL_PASSWORD.encode(),
                )
            ]
        )
        for future in futures.values():
            future.result(15)
        yield secured
    finally:
        secured.broker.stop()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topics(secured: Secured, *names: str) -> None:
    futures = secured.admin().create_topics([NewTopic(n, 1, 1) for n in names])
    for future in futures.values():
        future.result(15)


def grant(
    secured: Secured,
    principal: str,
    kind: ResourceType,
    name: str,
    *operations: AclOperation,
    pattern: ResourcePatternType = ResourcePatternType.LITERAL,
    permission: AclPermissionType = AclPermissionType.ALLOW,
) -> None:
    bindings = [
        AclBinding(kind, name, pattern, principal, "*", operation, permission)
        for operation in operations
    ]
    for future in secured.admin().create_acls(bindings).values():
        future.result(15)


def produce(config: dict[str, Any], topic: str, count: int = 1) -> list[KafkaError | None]:
    errors: list[KafkaError | None] = []
    producer = Producer({"enable.idempotence": False, "message.timeout.ms": 20000, **config})
    for i in range(count):
        producer.produce(topic, f"v{i}".encode(), on_delivery=lambda e, _m: errors.append(e))
    producer.flush(30)
    return errors


def error_codes(errors: list[KafkaError | None]) -> list[int | None]:
    return [None if e is None else e.code() for e in errors]


# --- data plane ---------------------------------------------------------------------------


def test_produce_needs_write_on_the_topic(secured: Secured) -> None:
    allowed, refused = unique("alice-ok"), unique("alice-no")
    create_topics(secured, allowed, refused)
    grant(secured, "User:alice", ResourceType.TOPIC, allowed, AclOperation.WRITE)
    assert error_codes(produce(secured.config("alice"), allowed)) == [None]
    assert error_codes(produce(secured.config("alice"), refused)) == [TOPIC_DENIED]


def test_fetch_needs_read_on_the_topic(secured: Secured) -> None:
    topic = unique("fetch")
    create_topics(secured, topic)
    assert error_codes(produce(secured.config("admin"), topic, 3)) == [None] * 3
    # Describe lets bob see the topic's metadata; without Read the fetch itself is refused.
    grant(secured, "User:bob", ResourceType.TOPIC, topic, AclOperation.DESCRIBE)
    consumer = Consumer({**secured.config("bob"), "group.id": unique("unused")})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        error = None
        deadline = time.monotonic() + 30
        while error is None and time.monotonic() < deadline:
            message = consumer.poll(1)
            # librdkafka looks up the group's coordinator too: bob may not, which is
            # reported apart (GROUP_AUTHORIZATION_FAILED) from the fetch's error.
            failure = message.error() if message is not None else None
            if failure is not None and failure.code() != KafkaError.GROUP_AUTHORIZATION_FAILED:
                error = failure
        assert error is not None and error.code() == TOPIC_DENIED
    finally:
        consumer.close()
    grant(secured, "User:bob", ResourceType.TOPIC, topic, AclOperation.READ)
    consumer = Consumer({**secured.config("bob"), "group.id": unique("unused")})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        values = []
        deadline = time.monotonic() + 30
        while len(values) < 3 and time.monotonic() < deadline:
            message = consumer.poll(1)
            if message is not None and message.error() is None:
                values.append(message.value())
        assert values == [b"v0", b"v1", b"v2"]
    finally:
        consumer.close()


def test_metadata_hides_topics_the_principal_may_not_describe(secured: Secured) -> None:
    visible, hidden = unique("dan-visible"), unique("dan-hidden")
    create_topics(secured, visible, hidden)
    grant(secured, "User:dan", ResourceType.TOPIC, visible, AclOperation.READ)
    topics = secured.admin("dan").list_topics(timeout=15).topics
    assert visible in topics  # Read implies Describe
    assert hidden not in topics
    # A super user sees everything.
    assert hidden in secured.admin().list_topics(timeout=15).topics
    # Naming the hidden topic gives TOPIC_AUTHORIZATION_FAILED, not its metadata.
    named = secured.admin("dan").list_topics(topic=hidden, timeout=15).topics[hidden]
    assert named.error is not None and named.error.code() == TOPIC_DENIED


def test_authorized_operations_reported_to_librdkafka(secured: Secured) -> None:
    """DescribeTopics (librdkafka asks Metadata with include_topic_authorized_operations)
    and DescribeCluster with include_authorized_operations (KIP-430), under the ACLs."""
    topic = unique("dan-ops")
    create_topics(secured, topic)
    grant(secured, "User:dan", ResourceType.TOPIC, topic, AclOperation.READ, AclOperation.ALTER)
    dan, admin = secured.admin("dan"), secured.admin()
    described = dan.describe_topics(
        TopicCollection([topic]), include_authorized_operations=True
    )[topic].result(15)
    assert set(described.authorized_operations) == {
        AclOperation.READ, AclOperation.ALTER, AclOperation.DESCRIBE}  # fmt: skip
    # dan may not describe the cluster: no operations; the super user: every one.
    cluster = dan.describe_cluster(include_authorized_operations=True).result(15)
    assert not cluster.authorized_operations
    everything = admin.describe_cluster(include_authorized_operations=True).result(15)
    assert AclOperation.CLUSTER_ACTION in set(everything.authorized_operations)
    assert len(set(everything.authorized_operations)) == 7


def test_prefixed_acl_and_deny_beats_allow(secured: Secured) -> None:
    prefix = unique("team") + "-"
    open_topic, secret = prefix + "open", prefix + "secret"
    create_topics(secured, open_topic, secret)
    grant(
        secured,
        "User:carol",  # SCRAM-SHA-256
        ResourceType.TOPIC,
        prefix,
        AclOperation.WRITE,
        pattern=ResourcePatternType.PREFIXED,
    )
    grant(
        secured,
        "User:*",
        ResourceType.TOPIC,
        secret,
        AclOperation.ALL,
        permission=AclPermissionType.DENY,
    )
    assert error_codes(produce(secured.config("carol"), open_topic)) == [None]
    assert error_codes(produce(secured.config("carol"), secret)) == [TOPIC_DENIED]
    # The super user is never refused, whatever the ACLs say.
    assert error_codes(produce(secured.config("admin"), secret)) == [None]


def test_topic_creation_needs_create(secured: Secured) -> None:
    """aiokafka's admin client: CreateTopics answers TOPIC_AUTHORIZATION_FAILED (29)."""
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin import NewTopic as AioNewTopic

    refused, allowed = unique("nocreate"), unique("create")

    async def create(name: str) -> int:
        client = AIOKafkaAdminClient(
            bootstrap_servers=secured.bootstrap,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="PLAIN",
            sasl_plain_username="alice",
            sasl_plain_password="alice-pw",
        )
        await client.start()
        try:
            response = await client.create_topics([AioNewTopic(name, 1, 1)])
            return response.topic_errors[0][1]
        finally:
            await client.close()

    assert asyncio.run(create(refused)) == 29
    assert refused not in secured.admin().list_topics(timeout=15).topics
    grant(secured, "User:alice", ResourceType.TOPIC, allowed, AclOperation.CREATE)
    assert asyncio.run(create(allowed)) == 0
    assert allowed in secured.admin().list_topics(timeout=15).topics


def test_group_join_needs_read_on_the_group(secured: Secured) -> None:
    """kafka-python: JoinGroup answers GROUP_AUTHORIZATION_FAILED."""
    from kafka import KafkaConsumer
    from kafka.errors import GroupAuthorizationFailedError

    topic, group = unique("grp-topic"), unique("grp")
    create_topics(secured, topic)
    grant(secured, "User:bob", ResourceType.TOPIC, topic, AclOperation.READ)
    # Describe finds the coordinator (FindCoordinator); joining needs Read.
    grant(secured, "User:bob", ResourceType.GROUP, group, AclOperation.DESCRIBE)
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=secured.bootstrap,
        group_id=group,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_plain_username="bob",
        sasl_plain_password="bob-pw",
    )
    try:
        with pytest.raises(GroupAuthorizationFailedError):
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                consumer.poll(timeout_ms=500)
    finally:
        consumer.close()


def test_consumer_group_with_read_acls_consumes_and_commits(secured: Secured) -> None:
    topic, group = unique("cg-topic"), unique("cg")
    create_topics(secured, topic)
    produce(secured.config("admin"), topic, 2)
    grant(secured, "User:bob", ResourceType.TOPIC, topic, AclOperation.READ)
    grant(secured, "User:bob", ResourceType.GROUP, group, AclOperation.READ)
    consumer = Consumer(
        {**secured.config("bob"), "group.id": group, "auto.offset.reset": "earliest"}
    )
    try:
        consumer.subscribe([topic])
        values = []
        deadline = time.monotonic() + 60
        while len(values) < 2 and time.monotonic() < deadline:
            message = consumer.poll(1)
            if message is not None and message.error() is None:
                values.append(message.value())
        assert values == [b"v0", b"v1"]
        committed = consumer.commit(asynchronous=False)
        assert committed is not None and committed[0].offset == 2
    finally:
        consumer.close()


def test_transactional_id_needs_write(secured: Secured) -> None:
    topic, txn = unique("txn-topic"), unique("txn")
    create_topics(secured, topic)
    grant(secured, "User:dan", ResourceType.TOPIC, topic, AclOperation.WRITE)
    producer = Producer({**secured.config("dan"), "transactional.id": txn})
    with pytest.raises(KafkaException) as refused:
        producer.init_transactions(20)
    assert refused.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    grant(secured, "User:dan", ResourceType.TRANSACTIONAL_ID, txn, AclOperation.WRITE)
    producer = Producer({**secured.config("dan"), "transactional.id": txn})
    producer.init_transactions(20)
    producer.begin_transaction()
    producer.produce(topic, b"in-txn")
    producer.commit_transaction(20)


def test_acl_apis_need_alter_and_describe_on_the_cluster(secured: Secured) -> None:
    binding = AclBinding(
        ResourceType.TOPIC,
        "x",
        ResourcePatternType.LITERAL,
        "User:alice",
        "*",
        AclOperation.READ,
        AclPermissionType.ALLOW,
    )
    with pytest.raises(KafkaException) as refused:
        for future in secured.admin("alice").create_acls([binding]).values():
            future.result(15)
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    # confluent-kafka drops DescribeAcls' top-level error; kafka-python reports it.
    from kafka.admin import (
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KpResourceType
    from kafka.errors import ClusterAuthorizationFailedError

    admin = KafkaAdminClient(
        bootstrap_servers=secured.bootstrap,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_plain_username="alice",
        sasl_plain_password="alice-pw",
    )
    everything = ACLFilter(
        principal=None,
        host="*",
        operation=ACLOperation.ANY,
        permission_type=ACLPermissionType.ANY,
        resource_pattern=ResourcePatternFilter(
            KpResourceType.ANY, None, ACLResourcePatternType.ANY
        ),
    )
    try:
        with pytest.raises(ClusterAuthorizationFailedError):
            admin.describe_acls(everything)
    finally:
        admin.close()


# --- the CLI ------------------------------------------------------------------------------


def run_cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "odradek", "acls", *args],
        capture_output=True,
        text=True,
        input=stdin,
        timeout=60,
    )


def test_cli_adds_lists_and_removes(secured: Secured, tmp_path: Path) -> None:
    config = tmp_path / "admin.properties"
    config.write_text(
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="admin" password="admin-pw";\n'
    )
    prefix = unique("cli") + "-"
    common = ["--bootstrap-server", secured.bootstrap, "--command-config", str(config)]
    added = run_cli(
        *common,
        "--add",
        "--allow-principal",
        "User:alice",
        "--operation",
        "Read",
        "--operation",
        "Describe",
        "--topic",
        prefix,
        "--resource-pattern-type",
        "prefixed",
    )
    assert added.returncode == 0, added.stderr
    resource = f"ResourcePattern(resourceType=TOPIC, name={prefix}, patternType=PREFIXED)"
    assert added.stdout == (
        f"Adding ACLs for resource `{resource}`: \n"
        " \t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n"
        "\t(principal=User:alice, host=*, operation=DESCRIBE, permissionType=ALLOW) \n\n"
    )
    listed = run_cli(*common, "--list", "--topic", prefix, "--resource-pattern-type", "prefixed")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.startswith(f"Current ACLs for resource `{resource}`: \n")
    assert "operation=READ" in listed.stdout and "operation=DESCRIBE" in listed.stdout
    # MATCH finds the prefixed ACL from a topic name under it.
    matched = run_cli(
        *common, "--list", "--topic", prefix + "x", "--resource-pattern-type", "match"
    )
    assert resource in matched.stdout
    # --remove asks first; "n" keeps them.
    kept = run_cli(
        *common, "--remove", "--topic", prefix, "--resource-pattern-type", "prefixed", stdin="n\n"
    )
    assert "Are you sure you want to delete all ACLs for resource filter" in kept.stdout
    assert resource in run_cli(*common, "--list").stdout
    removed = run_cli(
        *common, "--remove", "--force", "--topic", prefix, "--resource-pattern-type", "prefixed"
    )
    assert removed.returncode == 0, removed.stderr
    assert resource not in run_cli(*common, "--list").stdout


def test_cli_producer_convenience(secured: Secured, tmp_path: Path) -> None:
    config = tmp_path / "admin.properties"
    config.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config="
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="admin" password="admin-pw";\n'
    )
    topic = unique("cli-prod")
    create_topics(secured, topic)
    out = run_cli(
        "--bootstrap-server",
        secured.bootstrap,
        "--command-config",
        str(config),
        "--add",
        "--allow-principal",
        "User:bob",
        "--producer",
        "--topic",
        topic,
    )
    assert out.returncode == 0, out.stderr
    for operation in ("WRITE", "DESCRIBE", "CREATE"):
        assert f"operation={operation}" in out.stdout
    assert error_codes(produce(secured.config("bob"), topic)) == [None]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--add", "--topic", "t"], "--allow-principal, --deny-principal"),
        (["--add", "--allow-principal", "alice", "--topic", "t"], "Type:name"),
        (["--add", "--allow-principal", "User:a", "--operation", "Fly", "--topic", "t"], "Fly"),
        (["--add", "--allow-principal", "User:a", "--group", "g", "--operation", "Write"], "GROUP"),
        (["--topic", "t"], "exactly one action"),
    ],
)
def test_cli_errors_are_one_line(secured: Secured, args: list[str], message: str) -> None:
    out = run_cli("--bootstrap-server", secured.bootstrap, *args)
    assert out.returncode != 0
    assert message in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "Traceback" not in out.stderr


def test_cli_wrong_credentials_fail_in_one_line(secured: Secured, tmp_path: Path) -> None:
    config = tmp_path / "bad.properties"
    config.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config="
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="admin" password="nope";\n'
    )
    out = run_cli(
        "--bootstrap-server", secured.bootstrap, "--command-config", str(config), "--list"
    )
    assert out.returncode != 0
    assert "Traceback" not in out.stderr
    assert out.stderr.startswith("error: ")


# --- settings, restarts -------------------------------------------------------------------


def test_allow_everyone_if_no_acl_found_and_acls_survive_a_restart(tmp_path: Path) -> None:
    secured = start_broker(tmp_path, **{"allow.everyone.if.no.acl.found": "true"})
    try:
        free_topic, guarded = unique("free"), unique("guarded")
        create_topics(secured, free_topic, guarded)
        grant(secured, "User:bob", ResourceType.TOPIC, guarded, AclOperation.WRITE)
        # No ACL on the topic: everyone may write; an ACL for bob only: alice may not.
        assert error_codes(produce(secured.config("alice"), free_topic)) == [None]
        assert error_codes(produce(secured.config("alice"), guarded)) == [TOPIC_DENIED]
        secured.broker.stop()
        secured.broker.start()
        assert error_codes(produce(secured.config("alice"), guarded)) == [TOPIC_DENIED]
        assert error_codes(produce(secured.config("bob"), guarded)) == [None]
    finally:
        secured.broker.stop()


def test_unknown_authorizer_class_is_a_one_line_startup_error(tmp_path: Path) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "odradek",
            "server",
            "--override",
            f"log.dir={tmp_path / 'data'}",
            "--override",
            f"listeners=PLAINTEXT://127.0.0.1:{free_port()}",
            "--override",
            "authorizer.class.name=com.example.MyAuthorizer",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode != 0
    assert "authorizer.class.name" in out.stderr and "com.example.MyAuthorizer" in out.stderr
    assert "Traceback" not in out.stderr
