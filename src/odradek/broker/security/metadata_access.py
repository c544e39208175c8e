"""What one Metadata request may see: Kafka's ``KafkaApis.handleTopicMetadataRequest``.

The Metadata handlers answer from kept encoded topic entries (``metadata_answers``), also
under an authorizer: they ask a :class:`MetadataAccess` which topics to answer and with
which authorized operations, instead of building every topic as dicts and filtering them
per principal afterwards. Kafka's rules:

* a topic the principal may not Describe is left out of an answer for every topic, and
  answered ``TOPIC_AUTHORIZATION_FAILED`` (no id, no partitions) when named;
* a named topic that does not exist and would be auto-created needs Create on the cluster
  or on the topic, else it is answered ``TOPIC_AUTHORIZATION_FAILED`` too;
* ``include_topic_authorized_operations`` (v8+): every answered topic but those refused
  carries the bit field of the topic operations the principal may do (all of them without
  an authorizer); ``include_cluster_authorized_operations`` (v8-v10): the cluster's, or 0
  without Describe on the cluster.

An answer depends on the principal and host, the ACLs (the authorizer's ``generation``
grows with every change, whoever made it) and the authorizer settings: :attr:`key` names
them all, so a kept answer is never served to another principal or after an ACL change.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.broker.security.acl import Operation
from odradek.broker.security.enforcement import Check
from odradek.protocol.metadata_encoder import encode_topic

__all__ = [
    "NOT_REQUESTED",
    "TOPIC_DENIED",
    "MetadataAccess",
    "describe_cluster_operations",
    "operations_field",
]

NOT_REQUESTED = -(2**31)  # authorized operations not asked for (KIP-430)
TOPIC_DENIED = int(ErrorCode.topic_authorization_failed)

# Kafka's AclEntry.supportedOperations of each resource type, reported as bit fields.
TOPIC_OPERATIONS = (
    Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DESCRIBE, Operation.DELETE,
    Operation.ALTER, Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS,
)  # fmt: skip
CLUSTER_OPERATIONS = (
    Operation.CREATE, Operation.CLUSTER_ACTION, Operation.DESCRIBE_CONFIGS,
    Operation.ALTER_CONFIGS, Operation.IDEMPOTENT_WRITE, Operation.ALTER, Operation.DESCRIBE,
)  # fmt: skip


def operations_field(operations: Iterable[Operation]) -> int:
    """Kafka's Utils.to32BitField: bit ``code`` set for each operation."""
    value = 0
    for operation in operations:
        value |= 1 << int(operation)
    return value


ALL_TOPIC_OPERATIONS = operations_field(TOPIC_OPERATIONS)
ALL_CLUSTER_OPERATIONS = operations_field(CLUSTER_OPERATIONS)


@dataclass(slots=True)
class MetadataAccess:
    """One request's principal (``check``, None without an authorizer) and what it asks."""

    check: Check | None
    topic_operations_asked: bool = False
    cluster_operations_asked: bool = False
    _may_create_any: bool | None = field(default=None, repr=False)
    # Named topics answered TOPIC_AUTHORIZATION_FAILED, in the order asked (after the rest).
    refused: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, ctx: Any, request: Any, version: int) -> MetadataAccess:
        return cls(
            ctx.authz,
            version >= 8 and bool(getattr(request, "include_topic_authorized_operations", False)),
            8 <= version <= 10
            and bool(getattr(request, "include_cluster_authorized_operations", False)),
        )

    @property
    def key(self) -> Hashable:
        """Everything an answer depends on besides the metadata and the request's topics."""
        asked = (self.topic_operations_asked, self.cluster_operations_asked)
        check = self.check
        if check is None:
            return asked
        authorizer = check.authorizer
        return (*asked, check.principal, check.host, authorizer.generation, authorizer.settings)

    def answers(self, name: str, every_topic: bool) -> bool:
        """Whether ``name`` is answered: without Describe it is left out of an answer for
        every topic, and refused when named."""
        if self.check is None or self.check.topic(Operation.DESCRIBE, name):
            return True
        if not every_topic:
            self.refused.append(name)
        return False

    def may_auto_create(self, name: str) -> bool:
        """Whether the missing topic ``name`` may be auto-created (Create on the cluster,
        else on it); if not, it is refused."""
        check = self.check
        if check is None:
            return True
        if self._may_create_any is None:
            self._may_create_any = check.cluster(Operation.CREATE)
        if self._may_create_any or check.topic(Operation.CREATE, name):
            return True
        self.refused.append(name)
        return False

    def refused_entries(self, version: int) -> list[bytes]:
        """The encoded entries of the refused topics (no id, no partitions)."""
        return [encode_topic(version, TOPIC_DENIED, n, None, False, ()) for n in self.refused]

    def topic_operations(self, name: str) -> int:
        """The ``topic_authorized_operations`` of an answered topic."""
        if not self.topic_operations_asked:
            return NOT_REQUESTED
        check = self.check
        if check is None:
            return ALL_TOPIC_OPERATIONS
        return operations_field(op for op in TOPIC_OPERATIONS if check.topic(op, name))

    def cluster_operations(self) -> int:
        """The ``cluster_authorized_operations`` of the answer (v8-v10)."""
        if not self.cluster_operations_asked:
            return NOT_REQUESTED
        check = self.check
        if check is None:
            return ALL_CLUSTER_OPERATIONS
        if not check.cluster(Operation.DESCRIBE):
            return 0
        return operations_field(op for op in CLUSTER_OPERATIONS if check.cluster(op))


def describe_cluster_operations(ctx: Any, request: Any) -> int:
    """DescribeCluster's ``cluster_authorized_operations``, by the same rule as Metadata's
    (Kafka's AuthHelper.computeDescribeClusterResponse)."""
    asked = bool(getattr(request, "include_cluster_authorized_operations", False))
    return MetadataAccess(ctx.authz, cluster_operations_asked=asked).cluster_operations()
