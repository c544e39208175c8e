"""Kafka's ACL model: resource patterns, access control entries, bindings and filters.

The numeric ids are the wire codes of Kafka's ``ResourceType``, ``PatternType``,
``AclOperation`` and ``AclPermissionType`` (CreateAcls / DescribeAcls / DeleteAcls); the
names are the ones Kafka writes in ZooKeeper (``Topic``, ``Read``, ``Allow``) and prints in
``kafka-acls`` output (``TOPIC``, ``READ``, ``ALLOW``).

Matching rules of a *filter* (DescribeAcls / DeleteAcls), as Kafka's
``ResourcePatternFilter`` and ``AccessControlEntryFilter``: ANY matches every value, a null
name/principal/host matches every value; pattern type MATCH matches the literal resource of
that name, the literal wildcard ``*`` and every prefixed pattern the name starts with.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = [
    "CLUSTER_NAME",
    "WILDCARD",
    "AccessControlEntry",
    "AclBinding",
    "AclBindingFilter",
    "AclError",
    "Operation",
    "PatternType",
    "Permission",
    "ResourcePattern",
    "ResourceType",
]

CLUSTER_NAME = "kafka-cluster"  # the one Cluster resource's name
WILDCARD = "*"  # literal wildcard resource name, principal name and host
WILDCARD_PRINCIPAL = "User:*"


class AclError(ValueError):
    """A malformed ACL or filter (Kafka answers INVALID_REQUEST)."""


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7

    @property
    def zk_name(self) -> str:
        """``Topic``, ``TransactionalId``: Kafka's SecurityUtils.resourceTypeName."""
        return _camel(self.name)

    @classmethod
    def parse(cls, text: str) -> ResourceType:
        key = text.strip().replace("-", "_").upper()
        for member in cls:
            if key in (member.name, member.name.replace("_", "")):
                return member
        raise AclError(f"unknown resource type {text!r}")


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4

    @classmethod
    def parse(cls, text: str) -> PatternType:
        try:
            return cls[text.strip().upper()]
        except KeyError:
            raise AclError(f"unknown resource pattern type {text!r}") from None


class Operation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14

    @property
    def zk_name(self) -> str:
        """``Read``, ``IdempotentWrite``: Kafka's SecurityUtils.operationName."""
        return _camel(self.name)

    @classmethod
    def parse(cls, text: str) -> Operation:
        key = text.strip().replace("-", "_").upper()
        for member in cls:
            if key in (member.name, member.name.replace("_", "")):
                return member
        raise AclError(f"unknown operation {text!r}")

    def implied_by(self) -> frozenset[Operation]:
        """Operations whose ALLOW also allows this one (Kafka: Describe is implied by
        Read, Write, Delete and Alter; DescribeConfigs by AlterConfigs; All implies all)."""
        if self is Operation.DESCRIBE:
            extra = {Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER}
        elif self is Operation.DESCRIBE_CONFIGS:
            extra = {Operation.ALTER_CONFIGS}
        else:
            extra = set()
        return frozenset({self, Operation.ALL, *extra})


class Permission(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3

    @property
    def zk_name(self) -> str:
        return _camel(self.name)

    @classmethod
    def parse(cls, text: str) -> Permission:
        try:
            return cls[text.strip().upper()]
        except KeyError:
            raise AclError(f"unknown permission type {text!r}") from None


def check_principal(principal: str) -> None:
    """Kafka's KafkaPrincipal form ``Type:name``."""
    kind, sep, name = principal.partition(":")
    if not sep or not kind or not name:
        raise AclError(f"principal {principal!r} must be of the form Type:name (e.g. User:alice)")


@dataclass(frozen=True, slots=True, order=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType

    def validate(self) -> None:
        """A pattern an ACL can be stored under (no ANY/MATCH/UNKNOWN)."""
        if self.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
            raise AclError(f"resource type {self.resource_type.name} is not specific")
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise AclError(f"pattern type {self.pattern_type.name} is not specific")
        if not self.name:
            raise AclError("resource name must not be empty")
        if self.resource_type is ResourceType.CLUSTER and self.name != CLUSTER_NAME:
            raise AclError(f"the cluster resource is named {CLUSTER_NAME!r}")

    def matches(self, resource_type: ResourceType, name: str) -> bool:
        """Whether this stored pattern applies to the named resource (authorisation)."""
        if self.resource_type is not resource_type:
            return False
        if self.pattern_type is PatternType.PREFIXED:
            return name.startswith(self.name)
        return self.name in (name, WILDCARD)

    def __str__(self) -> str:
        return (
            f"ResourcePattern(resourceType={self.resource_type.name}, name={self.name}, "
            f"patternType={self.pattern_type.name})"
        )


@dataclass(frozen=True, slots=True, order=True)
class AccessControlEntry:
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def validate(self) -> None:
        check_principal(self.principal)
        if not self.host:
            raise AclError("host must not be empty (use * for any host)")
        if self.operation in (Operation.ANY, Operation.UNKNOWN):
            raise AclError(f"operation {self.operation.name} is not specific")
        if self.permission not in (Permission.ALLOW, Permission.DENY):
            raise AclError(f"permission type {self.permission.name} is not specific")

    def __str__(self) -> str:
        return (
            f"(principal={self.principal}, host={self.host}, operation={self.operation.name}, "
            f"permissionType={self.permission.name})"
        )


@dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry

    def validate(self) -> None:
        self.pattern.validate()
        self.entry.validate()


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """DescribeAcls / DeleteAcls filter; None name, principal or host match anything."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def validate(self) -> None:
        if self.resource_type is ResourceType.UNKNOWN or self.pattern_type is PatternType.UNKNOWN:
            raise AclError("the filter has an unknown resource or pattern type")
        if self.operation is Operation.UNKNOWN or self.permission is Permission.UNKNOWN:
            raise AclError("the filter has an unknown operation or permission type")

    def matches_pattern(self, pattern: ResourcePattern) -> bool:
        if self.resource_type is not ResourceType.ANY and self.resource_type is not (
            pattern.resource_type
        ):
            return False
        kind = self.pattern_type
        if kind is PatternType.MATCH:
            if self.name is None:
                return True
            if pattern.pattern_type is PatternType.PREFIXED:
                return self.name.startswith(pattern.name)
            return pattern.name in (self.name, WILDCARD)
        if kind is not PatternType.ANY and kind is not pattern.pattern_type:
            return False
        return self.name is None or self.name == pattern.name

    def matches_entry(self, entry: AccessControlEntry) -> bool:
        return (
            (self.principal is None or self.principal == entry.principal)
            and (self.host is None or self.host == entry.host)
            and self.operation in (Operation.ANY, entry.operation)
            and self.permission in (Permission.ANY, entry.permission)
        )

    def matches(self, binding: AclBinding) -> bool:
        return self.matches_pattern(binding.pattern) and self.matches_entry(binding.entry)

    def __str__(self) -> str:
        name = self.name if self.name is not None else "<any>"
        return (
            f"ResourcePatternFilter(resourceType={self.resource_type.name}, name={name}, "
            f"patternType={self.pattern_type.name})"
        )
