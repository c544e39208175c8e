"""Which replica a consumer should read from (KIP-392, fetch from follower).

A leader with ``replica.selector.class`` set answers a consumer's Fetch (v11+, which
carries the client's ``rack_id``, librdkafka's ``client.rack``) with a
``preferred_read_replica`` instead of records when the selector picks another replica;
the consumer then fetches from that replica, which serves it up to its own high
watermark.

Only Kafka's :class:`RackAwareReplicaSelector` is offered (the name Kafka users set:
``org.apache.kafka.common.replica.RackAwareReplicaSelector``). As in Kafka's
ReplicaManager.findPreferredReadReplica, the candidates are the leader and the ISR
followers whose log holds the fetch offset; the leader is never sent as a preferred
replica (the fetch is simply served).
"""

from __future__ import annotations

from dataclasses import dataclass

RACK_AWARE_REPLICA_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
SELECTOR_CLASSES = ("", RACK_AWARE_REPLICA_SELECTOR)


@dataclass(frozen=True)
class ReplicaView:
    """One candidate (Kafka's ReplicaView): its broker, rack and how caught up it is."""

    broker_id: int
    rack: str | None
    log_end_offset: int
    ms_since_caught_up: float


class RackAwareReplicaSelector:
    """A replica in the client's rack, else the leader (Kafka's RackAwareReplicaSelector)."""

    def select(
        self, client_rack: str, leader: ReplicaView, replicas: list[ReplicaView]
    ) -> ReplicaView:
        if not client_rack:
            return leader
        same_rack = [r for r in replicas if r.rack == client_rack]
        if not same_rack:
            return leader
        if any(r.broker_id == leader.broker_id for r in same_rack):
            return leader  # the leader is in the client's rack: read from it
        # The most caught-up one: highest log end, then the most recently caught up.
        return max(same_rack, key=lambda r: (r.log_end_offset, -r.ms_since_caught_up))


def make_selector(class_name: str) -> RackAwareReplicaSelector | None:
    """The selector ``replica.selector.class`` names; None when it is unset (the default:
    consumers read from the leader)."""
    if not class_name:
        return None
    if class_name == RACK_AWARE_REPLICA_SELECTOR:
        return RackAwareReplicaSelector()
    raise ValueError(f"unsupported replica.selector.class {class_name!r}")
