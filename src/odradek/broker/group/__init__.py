"""The group coordinator: consumer groups and committed offsets over ``__consumer_offsets``.

Modules: ``group`` (state machine, members, offsets in memory), ``offsets_records`` (the
binary key/value formats of the offsets topic), ``persistence`` (memory <-> records, and the
rebuild of a partition's groups), ``offsets_log`` (appends to the offsets topic and what their
failures mean), ``registry`` (the groups and partitions held, the request checks),
``delayed_ops`` (join/sync/session waits in the purgatory), ``rebalance`` (rebalances and
sessions), ``membership`` (JoinGroup/SyncGroup/Heartbeat/LeaveGroup), ``offsets`` (offset
commits, fetches, deletes, expiry), ``txn_offsets`` (transactional offset commits), ``admin``
(list/describe/delete groups), ``coordinator`` (the assembly: partition loading, lifecycle),
``handlers`` (kio requests -> responses), ``partitioning`` (group id -> offsets partition, as
Kafka), ``consumer_protocol`` (the subscription topics of a consumer member), ``config``
(Kafka-named settings).
"""

from odradek.broker.group.config import GroupConfig
from odradek.broker.group.coordinator import GroupCoordinator
from odradek.broker.group.group import GroupState, JoinGroupResult, SyncGroupResult
from odradek.broker.group.handlers import GROUP_API_VERSIONS, GroupHandlers
from odradek.broker.group.offsets import OffsetCommitRequestData
from odradek.broker.group.offsets_log import OffsetsLogAccess
from odradek.broker.group.partitioning import java_string_hashcode, partition_for

__all__ = [
    "GROUP_API_VERSIONS",
    "GroupConfig",
    "GroupCoordinator",
    "GroupHandlers",
    "GroupState",
    "JoinGroupResult",
    "OffsetCommitRequestData",
    "OffsetsLogAccess",
    "SyncGroupResult",
    "java_string_hashcode",
    "partition_for",
]
