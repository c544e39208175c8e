"""The JSON files of kafka-reassign-partitions.sh, parsed and printed as Kafka does.

Reassignment file (``--reassignment-json-file``, also what ``--generate`` proposes)::

    {"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2],
                                "log_dirs":["any","any"]}]}

``log_dirs`` is optional; only ``"any"`` is accepted (odradek has no intra-broker moves).
Topics file (``--topics-to-move-json-file``)::

    {"version":1,"topics":[{"topic":"t"}]}

Every problem is a :class:`CliError` with one line, as the tool's messages.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from odradek.cli.errors import CliError

TopicPartition = tuple[str, int]
ANY_LOG_DIR = "any"


def _load(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        return json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CliError(f"{path} is not valid JSON: {exc}") from None


def _version(data: Mapping[str, Any]) -> None:
    version = data.get("version", 1)
    if version != 1:
        raise CliError(f"Not supported version field value {version}")


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def tp_name(tp: TopicPartition) -> str:
    return f"{tp[0]}-{tp[1]}"


def parse_reassignment(path: Path) -> dict[TopicPartition, tuple[int, ...]]:
    """Kafka's parsePartitionReassignmentData plus its duplicate checks."""
    data = _load(path)
    if not isinstance(data, dict):
        raise CliError(f"{path}: a reassignment is a JSON object with \"partitions\"")
    _version(data)
    entries = data.get("partitions")
    if not isinstance(entries, list):
        raise CliError('Partition reassignment data is missing a "partitions" list')
    if not entries:
        raise CliError("Partition reassignment list cannot be empty")
    found: list[tuple[TopicPartition, tuple[int, ...]]] = []
    for entry in entries:
        if not isinstance(entry, dict):
            raise CliError(f"invalid partition entry {entry!r}")
        topic, partition = entry.get("topic"), entry.get("partition")
        replicas = entry.get("replicas")
        shown = json.dumps(entry)
        if not isinstance(topic, str) or not topic or not _int(partition) or partition < 0:
            raise CliError(f"invalid partition entry {shown}: needs a topic and a partition")
        if not isinstance(replicas, list) or not all(_int(r) for r in replicas):
            raise CliError(f"invalid partition entry {shown}: replicas must be broker ids")
        if not replicas:
            raise CliError(f"Partition replica list for {topic}-{partition} cannot be empty")
        log_dirs = entry.get("log_dirs")
        if log_dirs is not None:
            if not isinstance(log_dirs, list) or len(log_dirs) != len(replicas):
                raise CliError(
                    f"Length of replicas and log_dirs must be the same for {topic}-{partition}"
                )
            if any(d != ANY_LOG_DIR for d in log_dirs):
                raise CliError(
                    f'{topic}-{partition}: log_dirs other than "any" are not supported '
                    "(odradek has one log directory per broker)"
                )
        found.append(((topic, partition), tuple(replicas)))
    partitions = [tp for tp, _replicas in found]
    duplicates = sorted({tp for tp in partitions if partitions.count(tp) > 1})
    if duplicates:
        raise CliError(
            "Partition reassignment contains duplicate topic partitions: "
            + ",".join(tp_name(tp) for tp in duplicates)
        )
    with_duplicates = [
        (tp, sorted({r for r in replicas if replicas.count(r) > 1}))
        for tp, replicas in found
        if len(set(replicas)) != len(replicas)
    ]
    if with_duplicates:
        raise CliError(
            "Partition replica lists may not contain duplicate entries: "
            + ". ".join(
                f"{tp_name(tp)} contains multiple entries for {','.join(map(str, dupes))}"
                for tp, dupes in with_duplicates
            )
        )
    return dict(found)


def parse_topics_to_move(path: Path) -> list[str]:
    data = _load(path)
    if not isinstance(data, dict):
        raise CliError(f"{path}: the topics to move are a JSON object with \"topics\"")
    _version(data)
    entries = data.get("topics")
    if not isinstance(entries, list) or not entries:
        raise CliError('Topics-to-move data is missing a non-empty "topics" list')
    topics = []
    for entry in entries:
        topic = entry.get("topic") if isinstance(entry, dict) else None
        if not isinstance(topic, str) or not topic:
            raise CliError(f"invalid topic entry {json.dumps(entry)}: needs a topic")
        topics.append(topic)
    duplicates = sorted({t for t in topics if topics.count(t) > 1})
    if duplicates:
        raise CliError(f"Topic list contains duplicate entries: {','.join(duplicates)}")
    return topics


def parse_broker_list(value: str) -> list[int]:
    try:
        brokers = [int(b) for b in value.split(",") if b.strip()]
    except ValueError:
        raise CliError(f"--broker-list must be broker ids and commas, not {value!r}") from None
    if not brokers:
        raise CliError("--broker-list names no broker")
    duplicates = sorted({b for b in brokers if brokers.count(b) > 1})
    if duplicates:
        raise CliError(f"Broker list contains duplicate entries: {','.join(map(str, duplicates))}")
    return brokers


def format_reassignment(assignment: Mapping[TopicPartition, Sequence[int]]) -> str:
    """Kafka's formatAsReassignmentJson: compact, partitions sorted, log_dirs "any"."""
    partitions = [
        {
            "topic": topic,
            "partition": partition,
            "replicas": list(assignment[(topic, partition)]),
            "log_dirs": [ANY_LOG_DIR] * len(assignment[(topic, partition)]),
        }
        for topic, partition in sorted(assignment)
    ]
    return json.dumps({"version": 1, "partitions": partitions}, separators=(",", ":"))
