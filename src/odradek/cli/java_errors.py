"""Kafka's Java exception names and default messages for error codes, as Kafka's tools
print them (Kafka's ``Errors`` enum): ``org.apache.kafka.common.errors.<Name>: <message>``.

Only the codes odradek's tools print this way are listed; a tool prints any other error
as odradek's own ``KafkaError`` (its name and message).
"""

from __future__ import annotations

JAVA_PACKAGE = "org.apache.kafka.common.errors"

JAVA_ERRORS: dict[int, tuple[str, str]] = {
    -1: (
        "UnknownServerException",
        "The server experienced an unexpected error when processing the request.",
    ),
    1: (
        "OffsetOutOfRangeException",
        "The requested offset is not within the range of offsets maintained by the server.",
    ),
    3: ("UnknownTopicOrPartitionException", "This server does not host this topic-partition."),
    5: (
        "LeaderNotAvailableException",
        "There is no leader for this topic-partition as we are in the middle of a leadership "
        "election.",
    ),
    6: (
        "NotLeaderOrFollowerException",
        "For requests intended only for the leader, this error indicates that the broker is "
        "not the current leader. For requests intended for any replica, this error indicates "
        "that the broker is not a replica of the topic partition.",
    ),
    7: ("TimeoutException", "The request timed out."),
    17: (
        "InvalidTopicException",
        "The request attempted to perform an operation on an invalid topic.",
    ),
    29: ("TopicAuthorizationException", "Topic authorization failed."),
    44: ("PolicyViolationException", "Request parameters do not satisfy the configured policy."),
    56: ("KafkaStorageException", "Disk error when trying to access log file on the disk."),
}
