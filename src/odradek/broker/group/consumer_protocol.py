"""Just enough of the *consumer* embedded protocol for the coordinator to know subscriptions.

The coordinator treats member metadata as opaque bytes, except for groups of protocol type
``consumer``: there it needs the subscribed topics, to refuse deleting offsets of a topic the
group still consumes (OffsetDelete -> GROUP_SUBSCRIBED_TO_TOPIC) and to let offsets of
topics no longer subscribed expire while the group is Stable. Every version of Kafka's
``ConsumerProtocolSubscription`` (non-flexible) starts the same way::

    version: int16
    topics: int32 count, then each topic as int16 length + UTF-8 bytes
    ... (user_data, owned_partitions v1+, generation_id v2+, rack_id v3+: not needed here)
"""

from __future__ import annotations

import struct

__all__ = ["CONSUMER_PROTOCOL_TYPE", "subscribed_topics"]

CONSUMER_PROTOCOL_TYPE = "consumer"


def subscribed_topics(metadata: bytes) -> frozenset[str]:
    """The topics in a consumer subscription; ValueError if the bytes are not one."""
    data = memoryview(metadata)
    if len(data) < 6:
        raise ValueError("consumer subscription shorter than its header")
    version, count = struct.unpack_from(">hi", data, 0)
    if version < 0:
        raise ValueError(f"consumer subscription has negative version {version}")
    if count < 0 or count > len(data):
        raise ValueError(f"consumer subscription has an impossible topic count {count}")
    pos = 6
    topics = set()
    for _ in range(count):
        if pos + 2 > len(data):
            raise ValueError("consumer subscription truncated in its topic list")
        (length,) = struct.unpack_from(">h", data, pos)
        pos += 2
        if length < 0 or pos + length > len(data):
            raise ValueError("consumer subscription has a bad topic name length")
        try:
            topics.add(bytes(data[pos : pos + length]).decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise ValueError(f"consumer subscription topic is not UTF-8: {exc}") from None
        pos += length
    return frozenset(topics)
