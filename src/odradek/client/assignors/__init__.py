"""Consumer-group partition assignors, as in Kafka's Java client, and the consumer protocol.

* :mod:`~odradek.client.assignors.base` — :class:`Subscription`, :class:`Assignment`,
  :class:`PartitionAssignor` (the interface for custom assignors), :class:`RebalanceProtocol`
* :mod:`~odradek.client.assignors.wire` — encode/decode of ConsumerProtocolSubscription and
  ConsumerProtocolAssignment v0-v3 and of the sticky assignors' user data
* :mod:`~odradek.client.assignors.range` — ``range`` (with KIP-881 racks)
* :mod:`~odradek.client.assignors.roundrobin` — ``roundrobin``
* :mod:`~odradek.client.assignors.sticky` — ``sticky`` and ``cooperative-sticky``

These modules are pure (no I/O) and know nothing of the broker.
"""

from odradek.client.assignors.base import (
    AbstractPartitionAssignor,
    Assignment,
    GroupMetadata,
    PartitionAssignor,
    RebalanceProtocol,
    Subscription,
    TopicPartition,
)
from odradek.client.assignors.range import RangeAssignor
from odradek.client.assignors.roundrobin import RoundRobinAssignor
from odradek.client.assignors.sticky import CooperativeStickyAssignor, StickyAssignor
from odradek.client.assignors.wire import (
    ConsumerProtocolError,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)

__all__ = [
    "BUILTIN_ASSIGNORS",
    "AbstractPartitionAssignor",
    "Assignment",
    "ConsumerProtocolError",
    "CooperativeStickyAssignor",
    "GroupMetadata",
    "PartitionAssignor",
    "RangeAssignor",
    "RebalanceProtocol",
    "RoundRobinAssignor",
    "StickyAssignor",
    "Subscription",
    "TopicPartition",
    "assignor_for",
    "decode_assignment",
    "decode_subscription",
    "encode_assignment",
    "encode_subscription",
]

# Protocol name -> class, the names Java's partition.assignment.strategy accepts.
BUILTIN_ASSIGNORS: dict[str, type[AbstractPartitionAssignor]] = {
    RangeAssignor.name: RangeAssignor,
    RoundRobinAssignor.name: RoundRobinAssignor,
    StickyAssignor.name: StickyAssignor,
    CooperativeStickyAssignor.name: CooperativeStickyAssignor,
}


def assignor_for(name: str) -> AbstractPartitionAssignor:
    """A new built-in assignor by protocol name; ValueError for an unknown name."""
    try:
        return BUILTIN_ASSIGNORS[name]()
    except KeyError:
        raise ValueError(
            f"unknown partition assignor {name!r}; known: {', '.join(BUILTIN_ASSIGNORS)}"
        ) from None
