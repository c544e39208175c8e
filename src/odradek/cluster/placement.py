"""Where a new topic's replicas go: Kafka's AdminUtils.assignReplicasToBrokers.

Without racks (or when no broker has one) partition ``p``'s first replica is broker
``(p + start) mod n`` of the broker list, and the others follow at a shift that grows by
one every ``n`` partitions, so leaders and followers both spread evenly. ``start`` and the
initial shift are random unless fixed (tests). When every broker has a rack, the list is
first rearranged to alternate racks (``rack_alternated_broker_list``) and a replica is
skipped while some rack, or some broker, has none yet, so each partition spans
``min(replication factor, racks)`` racks. Some brokers with a rack and some without is
refused, as Kafka's enforced rack-aware mode does.

Failures are :class:`MetadataError` with Kafka's error names, ready for CreateTopics.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from odradek.cluster.metadata import MetadataError


@dataclass(frozen=True)
class BrokerRack:
    broker_id: int
    rack: str | None = None


def assign_replicas_to_brokers(
    brokers: Sequence[BrokerRack],
    num_partitions: int,
    replication_factor: int,
    *,
    fixed_start_index: int = -1,
    start_partition_id: int = -1,
    rng: random.Random | None = None,
) -> dict[int, list[int]]:
    """Partition id -> replica list (the first is the preferred leader)."""
    if num_partitions <= 0:
        raise MetadataError("INVALID_PARTITIONS", "Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise MetadataError(
            "INVALID_REPLICATION_FACTOR", "Replication factor must be larger than 0."
        )
    if replication_factor > len(brokers):
        raise MetadataError(
            "INVALID_REPLICATION_FACTOR",
            f"Replication factor: {replication_factor} larger than available brokers: "
            f"{len(brokers)}.",
        )
    rng = rng or random.Random()
    if all(b.rack is None for b in brokers):
        order = [b.broker_id for b in brokers]
        return _assign(
            order,
            None,
            num_partitions,
            replication_factor,
            fixed_start_index,
            start_partition_id,
            rng,
        )
    if any(b.rack is None for b in brokers):
        # Kafka raises AdminOperationException here, which CreateTopics answers with
        # UNKNOWN_SERVER_ERROR and this message.
        raise MetadataError(
            "UNKNOWN_SERVER_ERROR",
            "Not all brokers have rack information for replica rack aware assignment.",
        )
    racks = {b.broker_id: b.rack for b in brokers if b.rack is not None}
    return _assign(
        rack_alternated_broker_list(racks),
        racks,
        num_partitions,
        replication_factor,
        fixed_start_index,
        start_partition_id,
        rng,
    )


def rack_alternated_broker_list(racks: Mapping[int, str]) -> list[int]:
    """Brokers taken one per rack in turn (racks sorted, brokers sorted within a rack):
    {0: r1, 1: r3, 2: r3, 3: r2, 4: r2, 5: r1} -> [0, 3, 1, 5, 4, 2]."""
    by_rack: dict[str, list[int]] = {}
    for broker_id, rack in racks.items():
        by_rack.setdefault(rack, []).append(broker_id)
    queues = [sorted(by_rack[rack]) for rack in sorted(by_rack)]
    result: list[int] = []
    depth = 0
    while len(result) < len(racks):
        for queue in queues:
            if depth < len(queue):
                result.append(queue[depth])
        depth += 1
    return result


def _replica_index(first: int, shift: int, j: int, n: int) -> int:
    # Never 0 modulo n: a follower is never the partition's first replica's broker.
    return (first + 1 + (shift + j) % (n - 1)) % n


def _assign(
    order: list[int],
    racks: Mapping[int, str] | None,
    num_partitions: int,
    replication_factor: int,
    fixed_start_index: int,
    start_partition_id: int,
    rng: random.Random,
) -> dict[int, list[int]]:
    n = len(order)
    start = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    shift = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    num_racks = len(set(racks.values())) if racks is not None else 1
    result: dict[int, list[int]] = {}
    partition = max(0, start_partition_id)
    for _ in range(num_partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start) % n
        replicas = [order[first]]
        if racks is None:
            replicas += [
                order[_replica_index(first, shift, j, n)] for j in range(replication_factor - 1)
            ]
        else:
            used_racks = {racks[order[first]]}
            used = {order[first]}
            k = 0
            while len(replicas) < replication_factor:
                broker = order[_replica_index(first, shift * num_racks, k, n)]
                k += 1
                rack = racks[broker]
                # Skip a rack that has a replica while another has none, and a broker
                # that has one while another has none.
                if (rack not in used_racks or len(used_racks) == num_racks) and (
                    broker not in used or len(used) == n
                ):
                    replicas.append(broker)
                    used_racks.add(rack)
                    used.add(broker)
        result[partition] = replicas
        partition += 1
    return result


def validate_manual_assignment(
    assignment: Mapping[int, Sequence[int]], live_brokers: set[int]
) -> None:
    """A CreateTopics request's own assignment: partitions 0..n-1, the same replication
    factor everywhere, no broker twice in a partition, every broker registered
    (INVALID_REPLICA_ASSIGNMENT, as KRaft's ReplicationControlManager; nothing is
    created)."""
    if not assignment:
        raise MetadataError("INVALID_REPLICA_ASSIGNMENT", "the replica assignment is empty")
    if sorted(assignment) != list(range(len(assignment))):
        raise MetadataError(
            "INVALID_REPLICA_ASSIGNMENT",
            f"partitions should be a consecutive 0-based integer sequence, got "
            f"{sorted(assignment)}",
        )
    sizes = {len(replicas) for replicas in assignment.values()}
    if len(sizes) != 1 or 0 in sizes:
        raise MetadataError(
            "INVALID_REPLICA_ASSIGNMENT", "All partitions should have the same number of replicas"
        )
    for partition, replicas in sorted(assignment.items()):
        if len(set(replicas)) != len(replicas):
            raise MetadataError(
                "INVALID_REPLICA_ASSIGNMENT",
                f"Duplicate replica assignment found for partition {partition}: {list(replicas)}",
            )
        unknown = sorted(set(replicas) - live_brokers)
        if unknown:
            raise MetadataError(
                "INVALID_REPLICA_ASSIGNMENT",
                f"The manual partition assignment includes broker {unknown[0]}, but no such "
                "broker is registered.",
            )
