"""Kafka's AclAuthorizer decision rules over the local store (one layer, no broker)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from odradek.broker.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclError,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)
from odradek.broker.security.authorizer import (
    AclAuthorizer,
    AuthorizerSettings,
    authorizer_settings,
)
from odradek.cluster.acl_store import FILE_NAME, LocalAclStore

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY
ALICE, BOB = "User:alice", "User:bob"


def binding(
    kind: ResourceType,
    name: str,
    op: Operation,
    permission: Permission = ALLOW,
    principal: str = ALICE,
    host: str = "*",
    pattern: PatternType = LITERAL,
) -> AclBinding:
    return AclBinding(
        ResourcePattern(kind, name, pattern), AccessControlEntry(principal, host, op, permission)
    )


def make(
    tmp_path: Path, *bindings: AclBinding, super_users: tuple[str, ...] = (), everyone: bool = False
) -> AclAuthorizer:
    authorizer = AclAuthorizer(
        LocalAclStore(tmp_path), AuthorizerSettings(frozenset(super_users), everyone)
    )
    authorizer.start()
    assert authorizer.create(list(bindings)) == [None] * len(bindings)
    return authorizer


def test_no_acl_refuses_unless_allow_everyone(tmp_path: Path) -> None:
    assert not make(tmp_path).authorize(ALICE, "127.0.0.1", Operation.READ, TOPIC, "t")
    everyone = make(tmp_path / "e", everyone=True)
    assert everyone.authorize(ALICE, "127.0.0.1", Operation.READ, TOPIC, "t")


def test_allow_everyone_does_not_apply_once_the_resource_has_acls(tmp_path: Path) -> None:
    authorizer = make(tmp_path, binding(TOPIC, "t", Operation.READ, principal=BOB), everyone=True)
    assert not authorizer.authorize(ALICE, "h", Operation.READ, TOPIC, "t")
    assert authorizer.authorize(ALICE, "h", Operation.READ, TOPIC, "other")


def test_literal_allow_is_exact(tmp_path: Path) -> None:
    authorizer = make(tmp_path, binding(TOPIC, "orders", Operation.WRITE))
    assert authorizer.authorize(ALICE, "h", Operation.WRITE, TOPIC, "orders")
    assert not authorizer.authorize(ALICE, "h", Operation.WRITE, TOPIC, "orders2")
    assert not authorizer.authorize(BOB, "h", Operation.WRITE, TOPIC, "orders")
    assert not authorizer.authorize(ALICE, "h", Operation.READ, TOPIC, "orders")
    assert not authorizer.authorize(ALICE, "h", Operation.WRITE, GROUP, "orders")


def test_prefixed_and_wildcard_resources(tmp_path: Path) -> None:
    authorizer = make(
        tmp_path,
        binding(TOPIC, "sales-", Operation.READ, pattern=PREFIXED),
        binding(GROUP, "*", Operation.READ),
    )
    assert authorizer.authorize(ALICE, "h", Operation.READ, TOPIC, "sales-eu")
    assert authorizer.authorize(ALICE, "h", Operation.READ, TOPIC, "sales-")
    assert not authorizer.authorize(ALICE, "h", Operation.READ, TOPIC, "sale")
    assert authorizer.authorize(ALICE, "h", Operation.READ, GROUP, "any-group")


def test_deny_wins_over_allow(tmp_path: Path) -> None:
    authorizer = make(
        tmp_path,
        binding(TOPIC, "*", Operation.ALL),
        binding(TOPIC, "secret", Operation.READ, DENY),
    )
    assert authorizer.authorize(ALICE, "h", Operation.READ, TOPIC, "public")
    assert not authorizer.authorize(ALICE, "h", Operation.READ, TOPIC, "secret")
    # A Deny of Read does not deny Describe (Kafka denies only the operation or All).
    assert authorizer.authorize(ALICE, "h", Operation.DESCRIBE, TOPIC, "secret")


def test_prefixed_deny_beats_literal_allow(tmp_path: Path) -> None:
    authorizer = make(
        tmp_path,
        binding(TOPIC, "team-a", Operation.WRITE),
        binding(TOPIC, "team-", Operation.ALL, DENY, pattern=PREFIXED),
    )
    assert not authorizer.authorize(ALICE, "h", Operation.WRITE, TOPIC, "team-a")


def test_wildcard_principal_and_hosts(tmp_path: Path) -> None:
    authorizer = make(
        tmp_path,
        binding(TOPIC, "t", Operation.READ, principal="User:*", host="10.0.0.1"),
        binding(TOPIC, "t", Operation.READ, DENY, principal=BOB, host="*"),
    )
    assert authorizer.authorize(ALICE, "10.0.0.1", Operation.READ, TOPIC, "t")
    assert not authorizer.authorize(ALICE, "10.0.0.2", Operation.READ, TOPIC, "t")
    assert not authorizer.authorize(BOB, "10.0.0.1", Operation.READ, TOPIC, "t")


@pytest.mark.parametrize(
    ("granted", "implied"),
    [
        (Operation.READ, Operation.DESCRIBE),
        (Operation.WRITE, Operation.DESCRIBE),
        (Operation.DELETE, Operation.DESCRIBE),
        (Operation.ALTER, Operation.DESCRIBE),
        (Operation.ALTER_CONFIGS, Operation.DESCRIBE_CONFIGS),
        (Operation.ALL, Operation.CREATE),
    ],
)
def test_implied_operations(tmp_path: Path, granted: Operation, implied: Operation) -> None:
    authorizer = make(tmp_path, binding(TOPIC, "t", granted))
    assert authorizer.authorize(ALICE, "h", implied, TOPIC, "t")


@pytest.mark.parametrize(
    ("granted", "asked"),
    [
        (Operation.DESCRIBE, Operation.READ),
        (Operation.READ, Operation.WRITE),
        (Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS),
        (Operation.ALTER, Operation.ALTER_CONFIGS),
    ],
)
def test_operations_not_implied(tmp_path: Path, granted: Operation, asked: Operation) -> None:
    authorizer = make(tmp_path, binding(TOPIC, "t", granted))
    assert not authorizer.authorize(ALICE, "h", asked, TOPIC, "t")


def test_super_user_passes_even_a_deny(tmp_path: Path) -> None:
    authorizer = make(
        tmp_path, binding(TOPIC, "t", Operation.ALL, DENY, principal="User:*"), super_users=(BOB,)
    )
    assert authorizer.authorize(BOB, "h", Operation.WRITE, TOPIC, "t")
    assert not authorizer.authorize(ALICE, "h", Operation.WRITE, TOPIC, "t")


def test_write_on_any_topic(tmp_path: Path) -> None:
    """InitProducerId without a transactional id: Write on some topic will do (Kafka 3)."""
    assert not make(tmp_path / "a").authorize_any(ALICE, "h", Operation.WRITE, TOPIC)
    prefixed = make(tmp_path / "b", binding(TOPIC, "x-", Operation.WRITE, pattern=PREFIXED))
    assert prefixed.authorize_any(ALICE, "h", Operation.WRITE, TOPIC)
    assert not prefixed.authorize_any(BOB, "h", Operation.WRITE, TOPIC)
    covered = make(
        tmp_path / "c",
        binding(TOPIC, "x-1", Operation.WRITE),
        binding(TOPIC, "x", Operation.WRITE, DENY, pattern=PREFIXED),
    )
    assert not covered.authorize_any(ALICE, "h", Operation.WRITE, TOPIC)
    wildcard_deny = make(
        tmp_path / "d",
        binding(TOPIC, "t", Operation.WRITE),
        binding(TOPIC, "*", Operation.WRITE, DENY),
    )
    assert not wildcard_deny.authorize_any(ALICE, "h", Operation.WRITE, TOPIC)


def test_filters_describe_and_delete(tmp_path: Path) -> None:
    authorizer = make(
        tmp_path,
        binding(TOPIC, "t", Operation.READ),
        binding(TOPIC, "t", Operation.WRITE, principal=BOB),
        binding(TOPIC, "t-", Operation.READ, pattern=PREFIXED),
        binding(TOPIC, "*", Operation.DESCRIBE),
        binding(GROUP, "g", Operation.READ),
    )
    everything = authorizer.describe(AclBindingFilter())
    assert len(everything) == 5
    literal_t = authorizer.describe(AclBindingFilter(TOPIC, "t", LITERAL))
    assert {b.entry.principal for b in literal_t} == {ALICE, BOB}
    # MATCH: the literal name, the wildcard, and prefixes the name starts with.
    matched = authorizer.describe(AclBindingFilter(TOPIC, "t-1", PatternType.MATCH))
    assert {b.pattern.name for b in matched} == {"*", "t-"}
    by_principal = authorizer.describe(AclBindingFilter(principal=BOB))
    assert [b.entry.operation for b in by_principal] == [Operation.WRITE]
    removed = authorizer.delete(
        [AclBindingFilter(TOPIC, "t", LITERAL, principal=ALICE), AclBindingFilter(GROUP)]
    )
    assert [len(r) for r in removed] == [1, 1]
    assert not authorizer.authorize(ALICE, "h", Operation.READ, TOPIC, "t")
    assert authorizer.authorize(BOB, "h", Operation.WRITE, TOPIC, "t")
    assert len(authorizer.describe(AclBindingFilter())) == 3


def test_invalid_bindings_are_refused_one_by_one(tmp_path: Path) -> None:
    authorizer = make(tmp_path)
    results = authorizer.create(
        [
            binding(TOPIC, "t", Operation.READ, principal="alice"),
            binding(TOPIC, "t", Operation.ANY),
            binding(CLUSTER, "not-the-cluster", Operation.ALTER),
            AclBinding(
                ResourcePattern(TOPIC, "t", PatternType.MATCH),
                AccessControlEntry(ALICE, "*", Operation.READ, ALLOW),
            ),
            binding(TOPIC, "ok", Operation.READ),
        ]
    )
    assert [type(r) for r in results] == [AclError] * 4 + [type(None)]
    assert len(authorizer.describe(AclBindingFilter())) == 1


def test_local_store_survives_a_restart_in_kafka_json(tmp_path: Path) -> None:
    make(tmp_path, binding(TOPIC, "t", Operation.IDEMPOTENT_WRITE, pattern=PREFIXED))
    doc = json.loads((tmp_path / FILE_NAME).read_text())
    assert doc["resources"] == [
        {
            "resourceType": "Topic",
            "patternType": "PREFIXED",
            "name": "t",
            "version": 1,
            "acls": [
                {
                    "principal": ALICE,
                    "permissionType": "Allow",
                    "operation": "IdempotentWrite",
                    "host": "*",
                }
            ],
        }
    ]
    again = AclAuthorizer(LocalAclStore(tmp_path), AuthorizerSettings(frozenset()))
    again.start()
    assert again.authorize(ALICE, "h", Operation.IDEMPOTENT_WRITE, TOPIC, "t1")


def test_settings_from_config() -> None:
    values = {
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin; User:CN=broker,O=acme",
        "allow.everyone.if.no.acl.found": True,
    }
    settings = authorizer_settings(values.get)
    assert settings == AuthorizerSettings(frozenset({"User:admin", "User:CN=broker,O=acme"}), True)
    assert authorizer_settings({"authorizer.class.name": ""}.get) is None
    with pytest.raises(AclError, match="unknown authorizer"):
        authorizer_settings({"authorizer.class.name": "com.example.Mine"}.get)


def test_many_acls_cost_one_write_of_the_local_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import odradek.cluster.acl_store as acl_store

    authorizer = make(tmp_path)
    writes: list[Path] = []
    real_write = acl_store.atomic_write
    monkeypatch.setattr(
        acl_store, "atomic_write", lambda path, data: (writes.append(path), real_write(path, data))
    )
    bindings = [binding(TOPIC, f"t-{i}", Operation.READ) for i in range(300)]
    assert authorizer.create(bindings) == [None] * 300
    assert len(writes) == 1
    removed = authorizer.delete([AclBindingFilter(TOPIC)])
    assert len(removed[0]) == 300 and len(writes) == 2
    assert authorizer.describe(AclBindingFilter()) == []


def test_kept_decisions_follow_every_change_and_stay_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Decisions are kept (Metadata asks one per topic) until the ACLs change: through
    this authorizer, or another broker's change reported by the store's watcher."""
    authorizer = make(tmp_path)
    ask = lambda: authorizer.authorize(ALICE, "127.0.0.1", Operation.READ, TOPIC, "t")  # noqa: E731
    generation = authorizer.generation
    assert not ask()
    authorizer.create([binding(TOPIC, "t", Operation.READ)])
    assert ask() and authorizer.generation > generation
    # Another broker deletes it in the shared store; the watcher reports the resource.
    key = ("Topic", "LITERAL", "t")
    authorizer.store.update(key, lambda _now: frozenset())
    assert ask()  # not reported yet: this broker still decides from its copy
    authorizer._reload(key)
    assert not ask()
    monkeypatch.setattr("odradek.broker.security.authorizer.MAX_KEPT_DECISIONS", 3)
    for name in ("a", "b", "c", "d", "t"):
        assert not authorizer.authorize(ALICE, "127.0.0.1", Operation.READ, TOPIC, name)
    assert len(authorizer._decisions) <= 3
