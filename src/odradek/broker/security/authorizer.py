"""The ACL authorizer: Kafka's AclAuthorizer decision rules over any :class:`AclStore`.

``authorize(principal, host, operation, resource)`` is decided from an in-memory copy of
the store (no I/O on the request path), as Kafka's AclAuthorizer does:

1. a principal named in ``super.users`` may do anything;
2. the ACLs that apply are those on the literal resource name, on the literal wildcard
   ``*``, and on every prefixed pattern the name starts with;
3. none at all: allowed only with ``allow.everyone.if.no.acl.found=true``;
4. a DENY for the principal (or ``User:*``), the host (or ``*``) and the operation (or
   ``All``) refuses, whatever allows it (deny wins);
5. otherwise an ALLOW for the principal, host and the operation or one implying it
   (``All``; Describe by Read, Write, Delete, Alter; DescribeConfigs by AlterConfigs).

Decisions are kept until the ACLs change (any change drops them all).

Changes go through the store (blocking: call them in a thread) and update the copy; a
store shared by several brokers (ZooKeeper) reports other brokers' changes, and the
resource they name is read again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from odradek.broker.security.acl import (
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclError,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
    check_principal,
)
from odradek.cluster.acl_store import AclStore, Entry, ResourceKey

__all__ = ["KNOWN_AUTHORIZERS", "AclAuthorizer", "AuthorizerSettings", "authorizer_settings"]

log = logging.getLogger(__name__)

MAX_KEPT_DECISIONS = 100_000  # about 20 MB at most

# ``authorizer.class.name`` values that turn this authorizer on: ZooKeeper mode's
# AclAuthorizer (and its pre-2.4 name) and KRaft's StandardAuthorizer, same rules.
KNOWN_AUTHORIZERS = frozenset(
    {
        "kafka.security.authorizer.AclAuthorizer",
        "kafka.security.auth.SimpleAclAuthorizer",
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    }
)


@dataclass(frozen=True, slots=True)
class AuthorizerSettings:
    super_users: frozenset[str]
    allow_everyone_if_no_acl_found: bool = False


def authorizer_settings(get: Callable[[str], object]) -> AuthorizerSettings | None:
    """None when ``authorizer.class.name`` is empty (every request is allowed, as Kafka
    without an authorizer); ``AclError`` for a class this broker does not have."""
    name = str(get("authorizer.class.name") or "").strip()
    if not name:
        return None
    if name not in KNOWN_AUTHORIZERS:
        raise AclError(
            f"authorizer.class.name: unknown authorizer {name!r} "
            f"(supported: {', '.join(sorted(KNOWN_AUTHORIZERS))})"
        )
    users = set()
    for part in str(get("super.users") or "").split(";"):
        if part.strip():
            check_principal(part.strip())
            users.add(part.strip())
    return AuthorizerSettings(frozenset(users), bool(get("allow.everyone.if.no.acl.found")))


def _key(pattern: ResourcePattern) -> ResourceKey:
    return pattern.resource_type.zk_name, pattern.pattern_type.name, pattern.name


def _pattern(key: ResourceKey) -> ResourcePattern:
    kind, pattern_type, name = key
    return ResourcePattern(ResourceType.parse(kind), name, PatternType.parse(pattern_type))


def _entry(raw: Entry) -> AccessControlEntry:
    principal, host, operation, permission = raw
    return AccessControlEntry(
        principal, host, Operation.parse(operation), Permission.parse(permission)
    )


def _raw(entry: AccessControlEntry) -> Entry:
    return entry.principal, entry.host, entry.operation.zk_name, entry.permission.zk_name


class _Index:
    """ACLs of one resource type: literal ones by name, prefixed ones by prefix. A name's
    prefixed ACLs are found by looking up its prefixes of each length some prefixed ACL
    has (Kafka walks a sorted map the same way), not by scanning every prefix."""

    __slots__ = ("literal", "prefix_lengths", "prefixed")

    def __init__(self) -> None:
        self.literal: dict[str, frozenset[AccessControlEntry]] = {}
        self.prefixed: dict[str, frozenset[AccessControlEntry]] = {}
        self.prefix_lengths: tuple[int, ...] = ()

    def matching(self, name: str) -> list[AccessControlEntry]:
        out = list(self.literal.get(name, ()))
        if name != WILDCARD:
            out.extend(self.literal.get(WILDCARD, ()))
        prefixed = self.prefixed
        for length in self.prefix_lengths:
            if length > len(name):
                break
            entries = prefixed.get(name[:length])
            if entries is not None:
                out.extend(entries)
        return out

    def everything(self) -> Iterable[tuple[str, bool, frozenset[AccessControlEntry]]]:
        for name, entries in self.literal.items():
            yield name, False, entries
        for prefix, entries in self.prefixed.items():
            yield prefix, True, entries


class AclAuthorizer:
    def __init__(self, store: AclStore, settings: AuthorizerSettings) -> None:
        self.store = store
        self.settings = settings
        self._acls: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
        self._index: dict[ResourceType, _Index] = {}
        self._lock = threading.Lock()  # writers: request threads and the store's watcher
        # Grows with every change of the ACLs (this broker's or another's through the
        # store): whatever is kept from decisions (encoded Metadata answers) names it.
        self.generation = 0
        # Decisions already made, by (principal, host, operation, resource type, name):
        # a new dict with every change of the ACLs (set after the index, so a decision
        # kept in the new one was made from the new index). Metadata for 10,000 topics
        # asks 10,000 of them (several microseconds each) whenever a topic changes.
        self._decisions: dict[tuple[str, str, Operation, ResourceType, str], bool] = {}

    # --- lifecycle (blocking) ----------------------------------------------------------

    def start(self) -> None:
        """Load every ACL, then follow other brokers' changes."""
        acls = {}
        for key, raw in self.store.load_all().items():
            try:
                acls[_pattern(key)] = frozenset(_entry(e) for e in raw)
            except AclError as exc:
                log.error("ignoring the ACLs of %s: %s", key, exc)
        with self._lock:
            self._acls = acls
            self._rebuild()
        self.store.watch(self._reload)
        log.info("authorizer loaded ACLs of %d resources", len(acls))

    def close(self) -> None:
        self.store.close()

    def _reload(self, key: ResourceKey) -> None:
        try:
            pattern = _pattern(key)
            entries = frozenset(_entry(e) for e in self.store.load(key))
        except (AclError, ValueError) as exc:
            log.error("cannot reload the ACLs of %s: %s", key, exc)
            return
        log.info("reloaded ACLs of %s: %d entries", pattern, len(entries))
        self._set(pattern, entries)

    def _set(self, pattern: ResourcePattern, entries: frozenset[AccessControlEntry]) -> None:
        self._set_many({pattern: frozenset(_raw(e) for e in entries)})

    def _set_many(self, stored: dict[ResourcePattern, frozenset[Entry]]) -> None:
        with self._lock:
            acls = dict(self._acls)
            for pattern, raw in stored.items():
                if raw:
                    acls[pattern] = frozenset(_entry(e) for e in raw)
                else:
                    acls.pop(pattern, None)
            self._acls = acls
            self._rebuild()

    def _rebuild(self) -> None:
        index: dict[ResourceType, _Index] = {}
        for pattern, entries in self._acls.items():
            part = index.setdefault(pattern.resource_type, _Index())
            if pattern.pattern_type is PatternType.PREFIXED:
                part.prefixed[pattern.name] = entries
            else:
                part.literal[pattern.name] = entries
        for part in index.values():
            part.prefix_lengths = tuple(sorted({len(prefix) for prefix in part.prefixed}))
        self._index = index  # one reference swap: readers never see half an index
        self._decisions = {}
        self.generation += 1

    # --- decisions (no I/O) -------------------------------------------------------------

    def is_super_user(self, principal: str) -> bool:
        return principal in self.settings.super_users

    def authorize(
        self,
        principal: str,
        host: str,
        operation: Operation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        if principal in self.settings.super_users:
            return True
        decisions = self._decisions  # before the index (see __init__)
        key = (principal, host, operation, resource_type, name)
        decided = decisions.get(key)
        if decided is None:
            decided = self._decide(principal, host, operation, resource_type, name)
            if len(decisions) >= MAX_KEPT_DECISIONS:
                decisions.clear()  # bounded: a client may name any number of resources
            decisions[key] = decided
        return decided

    def _decide(
        self,
        principal: str,
        host: str,
        operation: Operation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        index = self._index.get(resource_type)
        acls = index.matching(name) if index is not None else []
        if not acls:
            return self.settings.allow_everyone_if_no_acl_found
        principals = (principal, WILDCARD_PRINCIPAL)
        hosts = (host, WILDCARD)
        for acl in acls:
            if (
                acl.permission is Permission.DENY
                and acl.principal in principals
                and acl.host in hosts
                and acl.operation in (operation, Operation.ALL)
            ):
                return False
        allowed_by = operation.implied_by()
        return any(
            acl.permission is Permission.ALLOW
            and acl.principal in principals
            and acl.host in hosts
            and acl.operation in allowed_by
            for acl in acls
        )

    def authorize_any(
        self, principal: str, host: str, operation: Operation, resource_type: ResourceType
    ) -> bool:
        """Whether some resource of the type allows the operation (Kafka's
        authorizeByResourceType: InitProducerId without a transactional id may go ahead
        with Write on any topic). A DENY on the literal ``*`` refuses; an ALLOW counts
        unless a DENY covers the same literal name or a prefix of its name."""
        if principal in self.settings.super_users:
            return True
        index = self._index.get(resource_type)
        if index is None:
            return self.settings.allow_everyone_if_no_acl_found
        principals = (principal, WILDCARD_PRINCIPAL)
        hosts = (host, WILDCARD)

        def applies(acl: AccessControlEntry, permission: Permission, ops: frozenset) -> bool:
            return (
                acl.permission is permission
                and acl.principal in principals
                and acl.host in hosts
                and acl.operation in ops
            )

        deny_ops = frozenset({operation, Operation.ALL})
        denied_literal: set[str] = set()
        denied_prefixes: list[str] = []
        for name, prefixed, entries in index.everything():
            if any(applies(acl, Permission.DENY, deny_ops) for acl in entries):
                if prefixed:
                    denied_prefixes.append(name)
                elif name == WILDCARD:
                    return False
                else:
                    denied_literal.add(name)
        allow_ops = operation.implied_by()
        for name, prefixed, entries in index.everything():
            if not any(applies(acl, Permission.ALLOW, allow_ops) for acl in entries):
                continue
            if any(name.startswith(prefix) for prefix in denied_prefixes):
                continue
            if not prefixed and name in denied_literal:
                continue
            return True
        return False

    # --- administration (blocking: the store may be ZooKeeper) --------------------------

    def create(self, bindings: Sequence[AclBinding]) -> list[AclError | None]:
        """Each binding's error (None when created or already there)."""
        results: list[AclError | None] = []
        valid: dict[ResourcePattern, set[AccessControlEntry]] = {}
        for binding in bindings:
            try:
                binding.validate()
            except AclError as exc:
                results.append(exc)
                continue
            results.append(None)
            valid.setdefault(binding.pattern, set()).add(binding.entry)
        def adding(entries: set[AccessControlEntry]) -> Callable[[frozenset], frozenset]:
            raw = frozenset(_raw(e) for e in entries)
            return lambda now: now | raw

        changes = {_key(pattern): adding(entries) for pattern, entries in valid.items()}
        stored = self.store.update_many(changes)
        self._set_many({pattern: stored[_key(pattern)] for pattern in valid})
        return results

    def describe(self, flt: AclBindingFilter) -> list[AclBinding]:
        out = []
        for pattern, entries in self._acls.items():
            if not flt.matches_pattern(pattern):
                continue
            out.extend(AclBinding(pattern, e) for e in entries if flt.matches_entry(e))
        return sorted(out)

    def delete(self, filters: Sequence[AclBindingFilter]) -> list[list[AclBinding]]:
        """The bindings each filter removed."""
        deleted: list[list[AclBinding]] = [[] for _ in filters]
        patterns = {p for p in self._acls if any(f.matches_pattern(p) for f in filters)}
        removed: dict[ResourcePattern, dict[int, list[AclBinding]]] = {}

        def change_of(pattern: ResourcePattern) -> Callable[[frozenset[Entry]], frozenset[Entry]]:
            def change(now: frozenset[Entry]) -> frozenset[Entry]:
                hits_by_filter = removed[pattern] = {}  # a retried update starts again
                keep = set()
                for raw in now:
                    entry = _entry(raw)
                    hits = [
                        i
                        for i, f in enumerate(filters)
                        if f.matches_pattern(pattern) and f.matches_entry(entry)
                    ]
                    for i in hits:
                        hits_by_filter.setdefault(i, []).append(AclBinding(pattern, entry))
                    if not hits:
                        keep.add(raw)
                return frozenset(keep)

            return change

        stored = self.store.update_many({_key(p): change_of(p) for p in sorted(patterns)})
        self._set_many({p: stored[_key(p)] for p in patterns})
        for pattern in sorted(patterns):
            for i, bindings in removed.get(pattern, {}).items():
                deleted[i].extend(bindings)
        return deleted
