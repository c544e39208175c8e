"""``odradek groups list|describe|delete|delete-offsets|reset-offsets``: kafka-consumer-groups.

Built on :class:`odradek.client.group_admin.GroupAdmin`. The verbs and their output follow
Kafka's ``kafka-consumer-groups`` (columns two spaces apart, ``-`` for "none"):

* ``list [--state STATE ...]`` — group ids, one per line; with ``--state``, a GROUP / STATE
  table of the groups in those states.
* ``describe --group G ... | --all-groups [--members | --state] [--topic T ...]`` — per
  partition::

      GROUP  TOPIC  PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG  CONSUMER-ID  HOST  CLIENT-ID

  ``CURRENT-OFFSET`` is the committed offset, ``LOG-END-OFFSET`` the high watermark and
  ``LAG`` their difference; a partition assigned but never committed shows ``-`` for both.
  ``--members`` lists GROUP / CONSUMER-ID / GROUP-INSTANCE-ID / HOST / CLIENT-ID /
  #PARTITIONS; ``--state`` GROUP / COORDINATOR (ID) / ASSIGNMENT-STRATEGY / STATE / #MEMBERS.
  As in Kafka, "Consumer group 'G' has no active members." (Empty) or "... is rebalancing."
  goes to stderr, and a group that does not exist is an error.
* ``delete --group G ...`` — only groups without members (NON_EMPTY_GROUP otherwise).
* ``delete-offsets --group G --topic T[:P,P...] ...`` — forget some committed offsets.
* ``reset-offsets --group G ... | --all-groups`` with ``--topic T[:P,P...] ... | --all-topics``
  and exactly one of ``--to-earliest``, ``--to-latest``, ``--to-offset N``, ``--to-datetime
  YYYY-MM-DDTHH:mm:SS[.sss][zone]`` (no zone: local time, as Kafka), ``--shift-by N``.
  A dry run (the default, or ``--dry-run``) prints GROUP / TOPIC / PARTITION / NEW-OFFSET and
  changes nothing; ``--execute`` commits the new offsets. Targets are clamped to each
  partition's [log start, log end]. A group with members is refused in both modes ("offsets
  can only be reset if the group is inactive"), because its members would overwrite them.
  When stderr is a terminal a live progress bar (cli/progress.py) shows, per group, how
  many partitions are looked up, then the commit; otherwise nothing but the table is shown.

Every failure is one ``error: ...`` line on stderr with exit code 1.
"""

from __future__ import annotations

import datetime
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import click

from odradek.cli.command_config import client_security
from odradek.cli.errors import CliError
from odradek.cli.output import bootstrap_option, check_bootstrap, run, table
from odradek.cli.progress import StepProgress

if TYPE_CHECKING:
    from odradek.client.group_admin import GroupAdmin, GroupDescription, ResetSpec

T = TypeVar("T")
TopicPartition = tuple[str, int]

GROUP_STATES = ("Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead")
# Partitions looked up per step of a reset (the progress display advances per step).
RESET_STEP = 100
RESET_OPTIONS = ("--to-earliest", "--to-latest", "--to-offset", "--to-datetime", "--shift-by")


async def _with_group_admin(
    bootstrap_server: str, action: Callable[[GroupAdmin], Awaitable[T]]
) -> T:
    from odradek.client.group_admin import GroupAdmin

    check_bootstrap(bootstrap_server)
    admin = GroupAdmin(bootstrap_server, security=client_security())
    await admin.start()
    try:
        return await action(admin)
    finally:
        await admin.close()


def _group_options(command: Callable[..., Any]) -> Callable[..., Any]:
    command = click.option(
        "--all-groups", is_flag=True, help="Every group in the cluster instead of --group."
    )(command)
    return click.option(
        "--group",
        "-g",
        "groups",
        multiple=True,
        metavar="GROUP",
        help="A consumer group; repeatable.",
    )(command)


def _chosen_groups(groups: tuple[str, ...], all_groups: bool) -> list[str] | None:
    """The named groups (None: --all-groups, resolved later with ListGroups)."""
    if all_groups and groups:
        raise CliError("give either --group or --all-groups, not both")
    if not all_groups and not groups:
        raise CliError("missing --group GROUP (or --all-groups)")
    if any(not g for g in groups):
        raise CliError("--group must not be empty")
    return None if all_groups else list(dict.fromkeys(groups))


async def _resolve_groups(admin: GroupAdmin, chosen: list[str] | None) -> list[str]:
    if chosen is not None:
        return chosen
    return [g.group_id for g in await admin.list_groups()]


def parse_topic_partitions(spec: str) -> tuple[str, list[int] | None]:
    """``--topic``: ``T`` (every partition) or ``T:0,2`` (those partitions)."""
    topic, sep, rest = spec.partition(":")
    topic = topic.strip()
    if not topic:
        raise CliError(f"--topic expects TOPIC or TOPIC:P[,P...], got {spec!r}")
    if not sep:
        return topic, None
    partitions: list[int] = []
    for item in rest.split(","):
        try:
            partition = int(item.strip())
        except ValueError:
            raise CliError(
                f"--topic {spec!r}: {item.strip()!r} is not a partition number"
            ) from None
        if partition < 0:
            raise CliError(f"--topic {spec!r}: partition numbers are >= 0")
        partitions.append(partition)
    return topic, list(dict.fromkeys(partitions))


def parse_datetime(text: str) -> int:
    """``--to-datetime`` as epoch milliseconds: ISO 8601 like Kafka's
    ``YYYY-MM-DDTHH:mm:SS.sss`` with an optional zone (``Z``, ``+01:00``); local time if none."""
    try:
        moment = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise CliError(
            f"--to-datetime expects YYYY-MM-DDTHH:mm:SS[.sss][zone], got {text!r}"
        ) from None
    if moment.tzinfo is None:
        moment = moment.astimezone()  # local time, as kafka-consumer-groups does
    epoch_ms = int(moment.timestamp() * 1000)
    if epoch_ms < 0:
        raise CliError(f"--to-datetime {text!r} is before 1970")
    return epoch_ms


async def _partitions_of(
    admin: GroupAdmin, specs: Sequence[tuple[str, list[int] | None]]
) -> list[TopicPartition]:
    """Expand ``--topic`` arguments with the cluster's metadata; unknown topics or partitions
    are errors."""
    cluster = await admin.client.metadata([t for t, _ in specs], refresh=True)
    result: list[TopicPartition] = []
    for topic, partitions in specs:
        info = cluster.topics.get(topic)
        if info is None or not info.partitions:
            raise CliError(f"topic {topic!r} does not exist")
        if partitions is None:
            result.extend((topic, p) for p in sorted(info.partitions))
            continue
        for partition in partitions:
            if partition not in info.partitions:
                raise CliError(
                    f"topic {topic!r} has no partition {partition} "
                    f"({len(info.partitions)} partitions)"
                )
            result.append((topic, partition))
    return list(dict.fromkeys(result))


@click.group("groups")
def groups() -> None:
    """List, describe, delete consumer groups and reset their offsets."""


# -- list ------------------------------------------------------------------------------------


@groups.command("list")
@bootstrap_option
@click.option(
    "--state",
    "states",
    multiple=True,
    type=click.Choice(GROUP_STATES, case_sensitive=False),
    help="Only groups in this state (repeatable); prints a GROUP/STATE table.",
)
def list_groups(bootstrap_server: str, states: tuple[str, ...]) -> None:
    """List consumer groups."""
    listings = run(_with_group_admin(bootstrap_server, lambda a: a.list_groups(states)))
    if states:
        if listings:
            click.echo(table(["GROUP", "STATE"], [(g.group_id, g.state) for g in listings]))
        return
    for listing in listings:
        click.echo(listing.group_id)


# -- describe --------------------------------------------------------------------------------


def _state_note(description: GroupDescription) -> str | None:
    """Kafka's note for a group that is not Stable (stderr); raises for a missing group."""
    if not description.exists:
        raise CliError(f"Consumer group '{description.group_id}' does not exist.")
    if description.state == "Empty":
        return f"Consumer group '{description.group_id}' has no active members."
    if description.state in ("PreparingRebalance", "CompletingRebalance"):
        return f"Warning: Consumer group '{description.group_id}' is rebalancing."
    return None


@groups.command("describe")
@bootstrap_option
@_group_options
@click.option("--members", "show_members", is_flag=True, help="Show the members instead.")
@click.option("--state", "show_state", is_flag=True, help="Show the group's state instead.")
@click.option(
    "--topic",
    "-t",
    "topics",
    multiple=True,
    metavar="TOPIC",
    help="Only these topics' partitions (repeatable).",
)
def describe(
    bootstrap_server: str,
    groups: tuple[str, ...],
    all_groups: bool,
    show_members: bool,
    show_state: bool,
    topics: tuple[str, ...],
) -> None:
    """Describe groups: offsets and lag per partition (default), members, or state."""
    chosen = _chosen_groups(groups, all_groups)
    if show_members and show_state:
        raise CliError("give at most one of --members and --state")

    async def action(admin: GroupAdmin) -> list[tuple[str | None, str]]:
        output: list[tuple[str | None, str]] = []  # (note for stderr, table for stdout)
        names = await _resolve_groups(admin, chosen)
        described = await admin.describe_groups(names) if names else {}
        for name in names:
            group = described[name]
            note = _state_note(group)
            if show_state:
                coordinator = admin.client.cluster.brokers.get(group.coordinator)
                where = (
                    f"{coordinator.host}:{coordinator.port} ({group.coordinator})"
                    if coordinator is not None
                    else f"({group.coordinator})"
                )
                text = table(
                    ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
                    [(name, where, group.protocol or "", group.state, len(group.members))],
                )
                output.append((None, text))
                continue
            if show_members:
                rows = [
                    (
                        name,
                        m.member_id,
                        m.group_instance_id or "-",
                        m.client_host,
                        m.client_id,
                        len(m.partitions),
                    )
                    for m in sorted(group.members, key=lambda m: m.member_id)
                ]
                headers = [
                    "GROUP",
                    "CONSUMER-ID",
                    "GROUP-INSTANCE-ID",
                    "HOST",
                    "CLIENT-ID",
                    "#PARTITIONS",
                ]
                output.append((note, table(headers, rows) if rows else ""))
                continue
            offsets = await admin.describe_offsets(
                name, topics=list(topics) or None, description=group
            )
            rows = [
                (
                    name,
                    row.topic,
                    row.partition,
                    "-" if row.committed is None else row.committed,
                    "-" if row.log_end_offset is None else row.log_end_offset,
                    "-" if row.lag is None else row.lag,
                    row.member.member_id if row.member else "-",
                    row.member.client_host if row.member else "-",
                    row.member.client_id if row.member else "-",
                )
                for row in offsets
            ]
            headers = [
                "GROUP",
                "TOPIC",
                "PARTITION",
                "CURRENT-OFFSET",
                "LOG-END-OFFSET",
                "LAG",
                "CONSUMER-ID",
                "HOST",
                "CLIENT-ID",
            ]
            output.append((note, table(headers, rows) if rows else ""))
        return output

    results = run(_with_group_admin(bootstrap_server, action))
    for index, (note, text) in enumerate(results):
        if note:
            click.echo(note, err=True)
        if text:
            if index:
                click.echo("")
            click.echo(text)


# -- delete / delete-offsets -----------------------------------------------------------------


@groups.command("delete")
@bootstrap_option
@_group_options
def delete(bootstrap_server: str, groups: tuple[str, ...], all_groups: bool) -> None:
    """Delete groups that have no members, with their committed offsets."""
    chosen = _chosen_groups(groups, all_groups)

    async def action(admin: GroupAdmin) -> list[str]:
        names = await _resolve_groups(admin, chosen)
        if names:
            await admin.delete_groups(names)
        return names

    names = run(_with_group_admin(bootstrap_server, action))
    if names:
        quoted = ", ".join(f"'{n}'" for n in names)
        click.echo(f"Deletion of requested consumer groups ({quoted}) was successful.")
    else:
        click.echo("No consumer groups to delete.")


@groups.command("delete-offsets")
@bootstrap_option
@click.option("--group", "-g", "group", required=True, help="The consumer group.")
@click.option(
    "--topic",
    "-t",
    "topic_specs",
    multiple=True,
    required=True,
    metavar="TOPIC[:P,...]",
    help="A topic, or some of its partitions; repeatable.",
)
def delete_offsets(bootstrap_server: str, group: str, topic_specs: tuple[str, ...]) -> None:
    """Forget a group's committed offsets of some topics or partitions."""
    specs = [parse_topic_partitions(s) for s in topic_specs]

    async def action(admin: GroupAdmin) -> list[TopicPartition]:
        partitions = await _partitions_of(admin, specs)
        await admin.delete_offsets(group, partitions)
        return partitions

    partitions = run(_with_group_admin(bootstrap_server, action))
    click.echo(
        table(
            ["TOPIC", "PARTITION", "STATUS"],
            [(topic, partition, "Successful") for topic, partition in partitions],
        )
    )


# -- reset-offsets ---------------------------------------------------------------------------


@groups.command("reset-offsets")
@bootstrap_option
@_group_options
@click.option(
    "--topic",
    "-t",
    "topic_specs",
    multiple=True,
    metavar="TOPIC[:P,...]",
    help="A topic, or some of its partitions; repeatable.",
)
@click.option("--all-topics", is_flag=True, help="Every topic the group has offsets for.")
@click.option("--to-earliest", is_flag=True, help="Reset to each partition's log start.")
@click.option("--to-latest", is_flag=True, help="Reset to each partition's log end.")
@click.option("--to-offset", type=click.IntRange(min=0), help="Reset to this offset.")
@click.option(
    "--to-datetime",
    metavar="YYYY-MM-DDTHH:mm:SS.sss",
    help="Reset to the first record at or after this time.",
)
@click.option("--shift-by", type=int, help="Move each committed offset by N (may be negative).")
@click.option("--dry-run", is_flag=True, help="Only show the new offsets (the default).")
@click.option("--execute", is_flag=True, help="Commit the new offsets.")
def reset_offsets(
    bootstrap_server: str,
    groups: tuple[str, ...],
    all_groups: bool,
    topic_specs: tuple[str, ...],
    all_topics: bool,
    to_earliest: bool,
    to_latest: bool,
    to_offset: int | None,
    to_datetime: str | None,
    shift_by: int | None,
    dry_run: bool,
    execute: bool,
) -> None:
    """Reset a group's committed offsets (dry run unless --execute)."""
    from odradek.client.group_admin import ResetSpec

    chosen = _chosen_groups(groups, all_groups)
    present = (to_earliest, to_latest, to_offset is not None, to_datetime is not None)
    present += (shift_by is not None,)
    given = [name for name, on in zip(RESET_OPTIONS, present, strict=True) if on]
    if len(given) != 1:
        raise CliError(
            "reset-offsets takes exactly one of "
            + ", ".join(RESET_OPTIONS)
            + (f" (got {', '.join(given)})" if given else "")
        )
    if dry_run and execute:
        raise CliError("give either --dry-run or --execute, not both")
    if bool(topic_specs) == all_topics:
        raise CliError("give --topic TOPIC[:P,...] (repeatable) or --all-topics")
    if to_earliest:
        spec = ResetSpec("earliest")
    elif to_latest:
        spec = ResetSpec("latest")
    elif to_offset is not None:
        spec = ResetSpec("offset", to_offset)
    elif to_datetime is not None:
        spec = ResetSpec("datetime", parse_datetime(to_datetime))
    else:
        assert shift_by is not None
        spec = ResetSpec("shift", shift_by)
    topic_partitions = [parse_topic_partitions(s) for s in topic_specs]

    async def action(admin: GroupAdmin) -> list[tuple[str, str, int, int]]:
        rows: list[tuple[str, str, int, int]] = []
        names = await _resolve_groups(admin, chosen)
        explicit = await _partitions_of(admin, topic_partitions) if topic_partitions else None
        described = await admin.describe_groups(names) if names else {}
        for name in names:
            group = described[name]
            if not group.is_empty:
                raise CliError(
                    f"Assignments can only be reset if the group '{name}' is inactive, "
                    f"but the current state is {group.state}."
                )
            if explicit is not None:
                partitions = explicit
            else:
                partitions = sorted(await admin.fetch_offsets(name))
            planned = await _plan_in_steps(admin, name, partitions, spec, progress)
            if execute and planned:
                progress.update(name, len(partitions), len(partitions), "committing")
                await admin.commit_offsets(name, planned)
            rows.extend((name, tp[0], tp[1], offset) for tp, offset in sorted(planned.items()))
        return rows

    with StepProgress("partitions") as progress:
        rows = run(_with_group_admin(bootstrap_server, action))
    if rows:
        click.echo(table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], rows))
    if not execute:
        click.echo("(dry run: nothing was changed; add --execute to commit)", err=True)


async def _plan_in_steps(
    admin: GroupAdmin,
    group: str,
    partitions: list[TopicPartition],
    spec: ResetSpec,
    progress: StepProgress,
) -> dict[TopicPartition, int]:
    """plan_reset over ``RESET_STEP`` partitions at a time, so that a reset of thousands
    of partitions shows how far it is. Offsets are still committed in one request."""
    planned: dict[TopicPartition, int] = {}
    total = len(partitions)
    progress.update(group, 0, total, "looking up offsets")
    for start in range(0, total, RESET_STEP):
        step = partitions[start : start + RESET_STEP]
        try:
            planned.update(await admin.plan_reset(group, step, spec))
        except ValueError as exc:
            raise CliError(str(exc)) from None
        progress.update(group, start + len(step), total, "looking up offsets")
    return planned


def register(cli: click.Group) -> None:
    cli.add_command(groups)
