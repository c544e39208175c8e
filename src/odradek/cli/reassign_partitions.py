"""``odradek reassign-partitions``: move partition replicas, as kafka-reassign-partitions.sh.

Exactly one action:

- ``--generate --topics-to-move-json-file F --broker-list 1,2,3``: print the current
  assignment of those topics and a proposed one over the listed brokers (Kafka's
  placement, rack-aware unless ``--disable-rack-aware``); nothing changes.
- ``--execute --reassignment-json-file F [--throttle BYTES_PER_S] [--additional]``: print
  the current assignment (to keep for a rollback), set the throttles when asked, then
  start the reassignments (AlterPartitionReassignments to the controller).
- ``--verify --reassignment-json-file F [--preserve-throttles]``: say per partition
  whether its reassignment is completed or still in progress; when none is in progress,
  remove every replication throttle (broker rates and the topics' throttled replicas).
  Under each partition still in progress, one line per replica being added says how far
  its copy is: its bytes against the leader's (DescribeLogDirs), odradek's addition.
- ``--cancel --reassignment-json-file F [--preserve-throttles]``: cancel those of the
  file's partitions still moving (they return to their original replicas), then remove
  the throttles.
- ``--list``: the reassignments in progress.

The files are Kafka's (:mod:`odradek.cli.reassign_json`); so are the output lines.
Errors (bad JSON, unknown brokers or topics, an error from the controller) are one
``error:`` line and exit code 1, and nothing is changed for them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from odradek import timeouts
from odradek.cli.command_config import client_security
from odradek.cli.errors import CliError
from odradek.cli.output import bootstrap_option, check_bootstrap, run
from odradek.cli.reassign_json import (
    format_reassignment,
    parse_broker_list,
    parse_reassignment,
    parse_topics_to_move,
    tp_name,
)
from odradek.client.errors import KafkaError

if TYPE_CHECKING:
    from odradek.client.admin import Admin

TopicPartition = tuple[str, int]
# How long --verify waits for a broker's DescribeLogDirs (a stopped broker never answers).
LOG_DIRS_TIMEOUT_S = 5.0
LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
VERIFY_WARNING = (
    "Warning: You must run --verify periodically, until the reassignment completes, to "
    "ensure the throttle is removed."
)


def _sorted_names(partitions: Iterable[TopicPartition]) -> str:
    return ",".join(tp_name(tp) for tp in sorted(partitions))


def _plural(items: Sequence[Any] | Mapping[Any, Any], word: str) -> str:
    return word if len(items) == 1 else word + "s"


# --- reading the cluster ------------------------------------------------------------------


async def _check_brokers(admin: Admin, brokers: Iterable[int]) -> set[int]:
    """Kafka's verifyBrokerIds: every broker must be registered. Returns the live ones."""
    live = set((await admin.describe_cluster()).brokers)
    for broker in sorted(set(brokers)):
        if broker not in live:
            raise CliError(f"Unknown broker id {broker}")
    return live


async def _current_replicas(
    admin: Admin, partitions: Iterable[TopicPartition]
) -> dict[TopicPartition, tuple[int, ...]]:
    """Each partition's replicas (the origin replicas while it is being reassigned)."""
    wanted = sorted(set(partitions))
    metadata = await admin.list_topics()
    moving = await admin.list_partition_reassignments(wanted)
    found = {}
    for tp in wanted:
        info = metadata.topics.get(tp[0])
        part = info.partitions.get(tp[1]) if info is not None else None
        if part is None:
            raise CliError(f"Unable to find partition: {tp_name(tp)}")
        replicas = tuple(part.replicas)
        if tp in moving:
            adding = moving[tp].adding_replicas
            replicas = tuple(r for r in moving[tp].replicas if r not in adding)
        found[tp] = replicas
    return found


# --- throttles ----------------------------------------------------------------------------


def throttle_configs(
    current: Mapping[TopicPartition, Sequence[int]],
    proposed: Mapping[TopicPartition, Sequence[int]],
) -> dict[str, dict[str, str]]:
    """Per topic the throttled-replica lists, as Kafka's calculateLeaderThrottles (every
    current replica) and calculateFollowerThrottles (every replica being added)."""
    leaders: dict[str, set[str]] = {}
    followers: dict[str, set[str]] = {}
    for (topic, partition), target in proposed.items():
        sources = current[(topic, partition)]
        leaders.setdefault(topic, set()).update(f"{partition}:{r}" for r in sources)
        followers.setdefault(topic, set()).update(
            f"{partition}:{r}" for r in target if r not in sources
        )
    return {
        topic: {
            LEADER_REPLICAS: ",".join(sorted(leaders[topic])),
            FOLLOWER_REPLICAS: ",".join(sorted(followers[topic])),
        }
        for topic in sorted(leaders)
    }


async def _set_throttles(
    admin: Admin,
    current: Mapping[TopicPartition, Sequence[int]],
    proposed: Mapping[TopicPartition, Sequence[int]],
    rate: int,
) -> None:
    from odradek.client.admin import ConfigResource

    topic_changes = {
        ConfigResource("topic", topic): [(key, "set", value) for key, value in values.items()]
        for topic, values in throttle_configs(current, proposed).items()
    }
    await admin.incremental_alter_configs(topic_changes)
    brokers = {r for replicas in [*current.values(), *proposed.values()] for r in replicas}
    await admin.incremental_alter_configs(
        {
            ConfigResource("broker", str(b)): [
                (LEADER_RATE, "set", str(rate)),
                (FOLLOWER_RATE, "set", str(rate)),
            ]
            for b in sorted(brokers)
        }
    )


async def _clear_throttles(admin: Admin, targets: Mapping[TopicPartition, Sequence[int]]) -> None:
    """Kafka's clearAllThrottles: the rates on every live broker, the lists on the topics."""
    from odradek.client.admin import ConfigResource

    live = set((await admin.describe_cluster()).brokers)
    brokers = sorted(live | {r for replicas in targets.values() for r in replicas})
    click.echo(f"Clearing broker-level throttles on {_plural(brokers, 'broker')} "
               f"{','.join(map(str, brokers))}")
    await admin.incremental_alter_configs(
        {
            ConfigResource("broker", str(b)): [
                (LEADER_RATE, "delete", None),
                (FOLLOWER_RATE, "delete", None),
            ]
            for b in brokers
            if b in live  # a broker that is down cannot be reached (its configs stay)
        }
    )
    topics = sorted({tp[0] for tp in targets})
    click.echo(f"Clearing topic-level throttles on {_plural(topics, 'topic')} {','.join(topics)}")
    await admin.incremental_alter_configs(
        {
            ConfigResource("topic", t): [
                (LEADER_REPLICAS, "delete", None),
                (FOLLOWER_REPLICAS, "delete", None),
            ]
            for t in topics
        }
    )


# --- the actions --------------------------------------------------------------------------


async def run_generate(
    admin: Admin, topics: list[str], brokers: list[int], rack_aware: bool
) -> None:
    from odradek.cluster.metadata import MetadataError
    from odradek.cluster.placement import BrokerRack, assign_replicas_to_brokers

    cluster = await admin.describe_cluster()
    await _check_brokers(admin, brokers)
    metadata = await admin.list_topics()
    current: dict[TopicPartition, tuple[int, ...]] = {}
    proposed: dict[TopicPartition, tuple[int, ...]] = {}
    racks = [
        BrokerRack(b, cluster.brokers[b].rack if rack_aware else None) for b in sorted(brokers)
    ]
    for topic in topics:
        info = metadata.topics.get(topic)
        if info is None or not info.partitions:
            raise CliError(f"Topic {topic} not found")
        for partition, part in sorted(info.partitions.items()):
            current[(topic, partition)] = tuple(part.replicas)
        replication_factor = len(info.partitions[min(info.partitions)].replicas)
        try:
            placed = assign_replicas_to_brokers(racks, len(info.partitions), replication_factor)
        except MetadataError as exc:
            raise CliError(str(exc)) from None
        for partition, replicas in placed.items():
            proposed[(topic, partition)] = tuple(replicas)
    click.echo(f"Current partition replica assignment\n{format_reassignment(current)}\n")
    click.echo(f"Proposed partition reassignment configuration\n{format_reassignment(proposed)}")


async def run_execute(
    admin: Admin, proposed: dict[TopicPartition, tuple[int, ...]], throttle: int, additional: bool
) -> None:
    await _check_brokers(admin, {r for replicas in proposed.values() for r in replicas})
    if not additional and await admin.list_partition_reassignments():
        raise CliError(
            "Cannot execute because there is an existing partition assignment.  Use "
            "--additional to override this and create a new partition assignment in "
            "addition to the existing one. The --additional flag can also be used to change "
            "the throttle by resubmitting the current reassignment."
        )
    current = await _current_replicas(admin, proposed)
    click.echo(
        f"Current partition replica assignment\n\n{format_reassignment(current)}\n\n"
        "Save this to use as the --reassignment-json-file option during rollback"
    )
    if throttle >= 0:
        click.echo(VERIFY_WARNING)
        await _set_throttles(admin, current, proposed, throttle)
        click.echo(f"The inter-broker throttle limit was set to {throttle} B/s")
    results = await admin.alter_partition_reassignments(proposed)
    errors = {tp: e for tp, e in results.items() if e is not None}
    if errors:
        listed = "; ".join(f"{tp_name(tp)}: {errors[tp]}" for tp in sorted(errors))
        raise CliError(f"Error reassigning partition(s): {listed}")
    click.echo(
        f"Successfully started partition {_plural(proposed, 'reassignment')} for "
        f"{_sorted_names(proposed)}"
    )


async def run_verify(
    admin: Admin, targets: dict[TopicPartition, tuple[int, ...]], preserve: bool
) -> None:
    moving = await admin.list_partition_reassignments(sorted(targets))
    metadata = await admin.list_topics()
    copied = await _copy_progress(admin, moving, metadata)
    lines = ["Status of partition reassignment:"]
    for tp in sorted(targets):
        if tp in moving:
            lines.append(f"Reassignment of partition {tp_name(tp)} is still in progress.")
            lines.extend(copied.get(tp, []))
            continue
        info = metadata.topics.get(tp[0])
        part = info.partitions.get(tp[1]) if info is not None else None
        if part is None:
            raise CliError(f"Unable to find partition: {tp_name(tp)}")
        if tuple(part.replicas) == targets[tp]:
            lines.append(f"Reassignment of partition {tp_name(tp)} is completed.")
        else:
            lines.append(
                f"There is no active reassignment of partition {tp_name(tp)}, but replica set "
                f"is {','.join(map(str, part.replicas))} rather than "
                f"{','.join(map(str, targets[tp]))}."
            )
    click.echo("\n".join(lines))
    if not moving and not preserve:
        await _clear_throttles(admin, targets)


async def _sizes_on(
    admin: Admin, broker: int, partitions: list[TopicPartition]
) -> dict[TopicPartition, int] | None:
    """The size of each of ``partitions`` on ``broker`` (a replica it does not have yet is
    left out); None when the broker does not answer within LOG_DIRS_TIMEOUT_S."""
    try:
        found = await timeouts.wait_for(
            admin.describe_log_dirs([broker], partitions), LOG_DIRS_TIMEOUT_S
        )
    except (TimeoutError, OSError, KafkaError):
        return None
    sizes: dict[TopicPartition, int] = {}
    for description in found.get(broker, {}).values():
        for tp, replica in description.replicas.items():
            if not replica.is_future:
                sizes[tp] = replica.size
    return sizes


async def _copy_progress(
    admin: Admin, moving: Mapping[TopicPartition, Any], metadata: Any
) -> dict[TopicPartition, list[str]]:
    """Per moving partition, one line per replica being added: the bytes it holds against
    its leader's (DescribeLogDirs of both brokers), as ``kafka-log-dirs`` would show them.
    Kafka's --verify says only "still in progress"; these lines come after that one."""
    wanted: dict[int, set[TopicPartition]] = {}
    leaders: dict[TopicPartition, int] = {}
    for tp, reassignment in moving.items():
        leader = metadata.leader(*tp)
        if leader is not None:
            leaders[tp] = leader
            wanted.setdefault(leader, set()).add(tp)
        for replica in reassignment.adding_replicas:
            wanted.setdefault(replica, set()).add(tp)
    brokers = sorted(wanted)
    answers = await asyncio.gather(*(_sizes_on(admin, b, sorted(wanted[b])) for b in brokers))
    sizes = dict(zip(brokers, answers, strict=True))
    lines: dict[TopicPartition, list[str]] = {}
    for tp in sorted(moving):
        leader = leaders.get(tp)
        leader_sizes = sizes.get(leader) if leader is not None else None
        total = None if leader_sizes is None else leader_sizes.get(tp)
        for replica in moving[tp].adding_replicas:
            held = sizes.get(replica)
            if held is None:
                line = f"  Replica {replica}: broker {replica} did not answer"
            elif total is None:
                line = f"  Replica {replica}: {held.get(tp, 0)} bytes copied (leader unknown)"
            else:
                done = held.get(tp, 0)
                share = min(done / total, 1.0) if total else 1.0
                line = (
                    f"  Replica {replica}: {done} of {total} bytes copied from leader "
                    f"{leader} ({share:.0%})"
                )
            lines.setdefault(tp, []).append(line)
    return lines


async def run_cancel(
    admin: Admin, targets: dict[TopicPartition, tuple[int, ...]], preserve: bool
) -> None:
    moving = await admin.list_partition_reassignments(sorted(targets))
    if moving:
        results = await admin.alter_partition_reassignments({tp: None for tp in moving})
        errors = {tp: e for tp, e in results.items() if e is not None}
        if errors:
            listed = "; ".join(f"{tp_name(tp)}: {errors[tp]}" for tp in sorted(errors))
            raise CliError(f"Error cancelling partition reassignment(s): {listed}")
        click.echo(
            f"Successfully cancelled partition {_plural(moving, 'reassignment')} for: "
            f"{_sorted_names(moving)}"
        )
    else:
        click.echo("None of the specified partition reassignments are active.")
    if not preserve:
        await _clear_throttles(admin, targets)


async def list_reassignments(admin: Admin) -> None:
    moving = await admin.list_partition_reassignments()
    if not moving:
        click.echo("No partition reassignments found.")
        return
    lines = ["Current partition reassignments:"]
    for tp in sorted(moving):
        r = moving[tp]
        line = f"{tp_name(tp)}: replicas: {','.join(map(str, r.replicas))}."
        if r.adding_replicas:
            line += f" adding: {','.join(map(str, r.adding_replicas))}."
        if r.removing_replicas:
            line += f" removing: {','.join(map(str, r.removing_replicas))}."
        lines.append(line)
    click.echo("\n".join(lines))


# --- the command --------------------------------------------------------------------------


@click.command("reassign-partitions")
@bootstrap_option
@click.option("--generate", is_flag=True, help="Propose an assignment over --broker-list.")
@click.option("--execute", is_flag=True, help="Start the reassignment of the JSON file.")
@click.option("--verify", is_flag=True, help="Report progress; remove throttles when done.")
@click.option("--cancel", is_flag=True, help="Cancel the file's reassignments in progress.")
@click.option("--list", "list_", is_flag=True, help="List the reassignments in progress.")
@click.option(
    "--topics-to-move-json-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help='With --generate: {"topics":[{"topic":"t"}],"version":1}.',
)
@click.option("--broker-list", help="With --generate: brokers to place on, e.g. 1,2,3.")
@click.option("--disable-rack-aware", is_flag=True, help="With --generate: ignore racks.")
@click.option(
    "--reassignment-json-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The reassignment (Kafka's format) for --execute, --verify and --cancel.",
)
@click.option(
    "--throttle",
    type=int,
    default=-1,
    show_default=True,
    help="With --execute: inter-broker replication limit in bytes/s (-1: none).",
)
@click.option("--additional", is_flag=True, help="With --execute: even while others move.")
@click.option(
    "--preserve-throttles", is_flag=True, help="With --verify / --cancel: keep the throttles."
)
def reassign_partitions(
    bootstrap_server: str,
    generate: bool,
    execute: bool,
    verify: bool,
    cancel: bool,
    list_: bool,
    topics_to_move_json_file: Path | None,
    broker_list: str | None,
    disable_rack_aware: bool,
    reassignment_json_file: Path | None,
    throttle: int,
    additional: bool,
    preserve_throttles: bool,
) -> None:
    """Move partition replicas between brokers (kafka-reassign-partitions)."""
    actions = [generate, execute, verify, cancel, list_]
    if sum(actions) != 1:
        raise CliError(
            "Command must include exactly one action: --generate, --execute, --verify, "
            "--cancel, --list"
        )
    check_bootstrap(bootstrap_server)
    if generate:
        if topics_to_move_json_file is None or broker_list is None:
            raise CliError("--generate needs --topics-to-move-json-file and --broker-list")
        topics = parse_topics_to_move(topics_to_move_json_file)
        brokers = parse_broker_list(broker_list)
        _run(
            bootstrap_server,
            lambda admin: run_generate(admin, topics, brokers, not disable_rack_aware),
        )
        return
    if list_:
        _run(bootstrap_server, list_reassignments)
        return
    if reassignment_json_file is None:
        raise CliError("Missing required argument \"--reassignment-json-file\"")
    targets = parse_reassignment(reassignment_json_file)
    if execute:
        _run(bootstrap_server, lambda admin: run_execute(admin, targets, throttle, additional))
    elif verify:
        _run(bootstrap_server, lambda admin: run_verify(admin, targets, preserve_throttles))
    else:
        _run(bootstrap_server, lambda admin: run_cancel(admin, targets, preserve_throttles))


def _run(bootstrap: str, action: Any) -> None:
    async def go() -> None:
        from odradek.client.admin import Admin

        admin = Admin(bootstrap, security=client_security())
        await admin.start()
        try:
            await action(admin)
        except ValueError as exc:
            raise CliError(str(exc)) from None
        finally:
            await admin.close()

    run(go())


def register(cli: click.Group) -> None:
    cli.add_command(reassign_partitions)
