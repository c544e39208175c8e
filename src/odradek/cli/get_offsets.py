"""``odradek get-offsets``: kafka-get-offsets (Kafka's GetOffsetShell).

Prints ``topic:partition:offset`` for every partition chosen, one per line, sorted as Kafka
sorts them (by the text ``topic-partition``). ``--time`` picks the offset: ``-1``/``latest``
(the log end, default), ``-2``/``earliest`` (the log start), ``-3``/``max-timestamp`` (the
record with the largest timestamp), or a timestamp in ms (the first record at or after it).
A partition without such an offset (e.g. a timestamp after every record) is left out.

Partitions are chosen like Kafka does: ``--topic REGEX`` (the whole name must match; every
topic without it) and ``--partitions 0,1`` (every partition without it), or
``--topic-partitions`` with comma-separated rules ``REGEX[:N|:N-M|:N-|:-M]`` (ranges include
N and exclude M). Internal topics count unless ``--exclude-internal-topics``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import click

from odradek.cli.command_config import client_security
from odradek.cli.errors import CliError
from odradek.cli.output import bootstrap_option, check_bootstrap, run

TOPIC_PARTITION_RULE = re.compile(r"([^:,]*)(?::(?:([0-9]*)|(?:([0-9]*)-([0-9]*))))?")
INT32_MAX = 2**31 - 1
TIME_NAMES = {"latest": "latest", "earliest": "earliest", "max-timestamp": "max_timestamp"}
TIME_NUMBERS = {-1: "latest", -2: "earliest", -3: "max_timestamp"}
UNKNOWN_OFFSET = -1


@dataclass(frozen=True)
class Rule:
    """One topic regex and the partitions it allows."""

    topic: re.Pattern[str]
    allows: Callable[[int], bool]


def parse_time(text: str) -> str | int:
    """``--time`` as an Admin.list_offsets spec."""
    if text in TIME_NAMES:
        return TIME_NAMES[text]
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < -3:
        raise CliError(
            f"Malformed time argument {text}. Please use -1 or latest / -2 or earliest / "
            "-3 or max-timestamp, or a specified long format timestamp"
        )
    return TIME_NUMBERS.get(value, value)


def _regex(text: str) -> re.Pattern[str]:
    try:
        return re.compile(text)
    except re.error as exc:
        raise CliError(f"bad topic regular expression {text!r}: {exc}") from None


def rules_from_topic_partitions(spec: str) -> list[Rule]:
    rules = []
    for rule_spec in spec.split(","):
        match = TOPIC_PARTITION_RULE.fullmatch(rule_spec)
        if match is None:
            raise CliError(f"Invalid rule specification: {rule_spec}")
        topic, single, low, high = (g or None for g in match.groups())
        if single is not None:
            number = int(single)
            allows: Callable[[int], bool] = lambda p, n=number: p == n  # noqa: E731
        else:
            lower = int(low) if low is not None else 0
            upper = int(high) if high is not None else INT32_MAX
            allows = lambda p, lo=lower, hi=upper: lo <= p < hi  # noqa: E731
        rules.append(Rule(_regex(topic or ".*"), allows))
    return rules


def rules_from_topic_and_partitions(topic: str | None, partitions: str | None) -> list[Rule]:
    wanted: set[int] = set()
    if partitions:
        try:
            wanted = {int(p) for p in partitions.split(",")}
        except ValueError:
            raise CliError(
                "--partitions expects a comma separated list of numeric partition ids, "
                f"but received: {partitions}"
            ) from None
    return [Rule(_regex(topic or ".*"), lambda p: not wanted or p in wanted)]


async def fetch_offsets(
    bootstrap: str, rules: list[Rule], spec: str | int, exclude_internal: bool
) -> dict[tuple[str, int], int]:
    from odradek.client.admin import Admin
    from odradek.client.errors import KafkaError

    async with Admin(bootstrap, client_id="GetOffsetShell", security=client_security()) as admin:
        cluster = await admin.client.metadata(None)
        chosen = sorted(
            (name, partition)
            for name, info in cluster.topics.items()
            if not (exclude_internal and info.is_internal)
            for partition in info.partitions
            if any(r.topic.fullmatch(name) and r.allows(partition) for r in rules)
        )
        if not chosen:
            raise CliError("Could not match any topic-partitions with the specified filters")
        try:
            answers = await admin.list_offsets(dict.fromkeys(chosen, spec))
        except KafkaError:
            # Ask one partition at a time to tell the failing ones from the rest.
            answers = {}
            for tp in chosen:
                try:
                    answers.update(await admin.list_offsets({tp: spec}))
                except KafkaError as exc:
                    click.echo(
                        f"Skip getting offsets for topic-partition {tp[0]}-{tp[1]} "
                        f"due to error: {exc}",
                        err=True,
                    )
    return {tp: offset for tp, (offset, _) in answers.items() if offset != UNKNOWN_OFFSET}


@click.command("get-offsets")
@bootstrap_option
@click.option("--topic", metavar="REGEX", help="Topic(s) to get offsets for (a regex).")
@click.option("--partitions", metavar="0,1,...", help="Comma-separated partition ids.")
@click.option(
    "--topic-partitions",
    metavar="RULE,...",
    help="Rules like topic1:1,topic2:0-3,topic3,topic4:5-,topic5:-3 (topic part is a regex).",
)
@click.option(
    "--time",
    "time_text",
    default="latest",
    show_default=True,
    metavar="TIMESTAMP|-1|latest|-2|earliest|-3|max-timestamp",
    help="Which offset: latest, earliest, max-timestamp, or the first at/after a time (ms).",
)
@click.option("--exclude-internal-topics", is_flag=True, help="Leave out internal topics.")
def get_offsets(
    bootstrap_server: str,
    topic: str | None,
    partitions: str | None,
    topic_partitions: str | None,
    time_text: str,
    exclude_internal_topics: bool,
) -> None:
    """Print topic:partition:offset for the chosen partitions (kafka-get-offsets)."""
    check_bootstrap(bootstrap_server)
    if topic_partitions is not None and (topic is not None or partitions is not None):
        raise CliError("--topic-partitions cannot be used with --topic or --partitions")
    spec = parse_time(time_text)
    rules = (
        rules_from_topic_partitions(topic_partitions)
        if topic_partitions is not None
        else rules_from_topic_and_partitions(topic, partitions)
    )
    offsets = run(fetch_offsets(bootstrap_server, rules, spec, exclude_internal_topics))
    for (name, partition), offset in sorted(offsets.items(), key=lambda i: f"{i[0][0]}-{i[0][1]}"):
        click.echo(f"{name}:{partition}:{offset}")


def register(cli: click.Group) -> None:
    cli.add_command(get_offsets)
