"""``odradek topics create|list|describe|delete|alter``: topic administration.

The verbs of kafka-topics / kafka-configs, through :class:`odradek.client.admin.Admin`:

* ``create NAME [--partitions N] [--replication-factor R] [--config k=v ...]`` — omitted
  counts take the broker's ``num.partitions`` / ``default.replication.factor``; or
  ``--replica-assignment 1:2,2:3`` (kafka-topics' form: partitions separated by commas,
  each one's broker ids by colons, the first being the preferred leader).
* ``list [--exclude-internal]`` — topic names, sorted, one per line.
* ``describe [NAME ...] [--all-configs]`` — kafka-topics' layout::

      Topic: events  PartitionCount: 2  ReplicationFactor: 1  Configs: retention.ms=1000
          Topic: events  Partition: 0  Leader: 0  Replicas: 0  Isr: 0

  (fields are tab-separated; ``Configs`` lists the topic's non-default settings, or all of
  them with ``--all-configs``).
* ``delete NAME ...`` and ``alter NAME [--partitions N] [--add-config k=v ...]
  [--delete-config k ...]`` — config changes are incremental (IncrementalAlterConfigs):
  keys not named keep their values; a deleted key returns to its default.

A config value may contain ``=`` and ``,`` (``--config cleanup.policy=compact,delete``): each
``--config`` holds exactly one key. Per-topic failures (TOPIC_ALREADY_EXISTS,
INVALID_CONFIG, ...) print ``error: <KAFKA_ERROR_NAME>: ...`` and exit 1.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from odradek.cli.command_config import client_security
from odradek.cli.errors import CliError
from odradek.cli.output import bootstrap_option, check_bootstrap, parse_key_values, run

if TYPE_CHECKING:
    from odradek.client.admin import Admin

UNKNOWN_TOPIC_OR_PARTITION = 3


def _admin(bootstrap_server: str) -> Admin:
    from odradek.client.admin import Admin

    check_bootstrap(bootstrap_server)
    return Admin(bootstrap_server, security=client_security())


async def _with_admin(bootstrap_server: str, action: Any) -> Any:
    admin = _admin(bootstrap_server)
    await admin.start()
    try:
        return await action(admin)
    except (ValueError, TypeError) as exc:
        # The admin client validates arguments (e.g. an empty topic name) before sending.
        raise CliError(str(exc)) from None
    finally:
        await admin.close()


@click.group("topics")
def topics() -> None:
    """Create, list, describe, alter and delete topics."""


@topics.command("create")
@click.argument("name")
@bootstrap_option
@click.option(
    "--partitions",
    "-p",
    type=click.IntRange(min=1),
    help="Number of partitions (default: the broker's num.partitions).",
)
@click.option(
    "--replication-factor",
    "-r",
    type=click.IntRange(min=1, max=32767),
    help="Replicas per partition (default: the broker's default.replication.factor).",
)
@click.option(
    "--config",
    "-c",
    "config_args",
    multiple=True,
    metavar="KEY=VALUE",
    help="A topic config, e.g. retention.ms=86400000; repeatable.",
)
@click.option(
    "--replica-assignment",
    metavar="B1:B2,B1:B2",
    help="Broker ids of each partition's replicas (partitions by commas, replicas by colons).",
)
@click.option("--if-not-exists", is_flag=True, help="Succeed if the topic already exists.")
@click.option("--validate-only", is_flag=True, help="Check the request without creating.")
def create(
    name: str,
    bootstrap_server: str,
    partitions: int | None,
    replication_factor: int | None,
    config_args: tuple[str, ...],
    replica_assignment: str | None,
    if_not_exists: bool,
    validate_only: bool,
) -> None:
    """Create topic NAME."""
    from odradek.client.admin import NewTopic
    from odradek.client.errors import KafkaError

    configs = parse_key_values(config_args, "--config")
    if "." in name or "_" in name:
        # kafka-topics' warning: 'a.b' and 'a_b' collide (the broker refuses the second).
        click.echo(
            "WARNING: Due to limitations in metric names, topics with a period ('.') or "
            "underscore ('_') could collide. To avoid issues it is best to use either, "
            "but not both.",
            err=True,
        )
    assignment = None
    if replica_assignment is not None:
        counts = (("partitions", partitions), ("replication-factor", replication_factor))
        for option, value in counts:
            if value is not None:
                # kafka-topics' wording for the same mistake.
                raise CliError(
                    f'Option "[replica-assignment]" can\'t be used with option "[{option}]"'
                )
        assignment = parse_replica_assignment(replica_assignment)
    new_topic = NewTopic(
        name,
        num_partitions=partitions if partitions is not None else -1,
        replication_factor=replication_factor if replication_factor is not None else -1,
        configs=configs,
        replica_assignment=assignment,
    )

    async def action(admin: Admin) -> bool:
        try:
            await admin.create_topics([new_topic], validate_only=validate_only)
        except KafkaError as exc:
            if if_not_exists and exc.name == "TOPIC_ALREADY_EXISTS":
                return False
            raise
        return True

    created = run(_with_admin(bootstrap_server, action))
    if validate_only:
        click.echo(f"Topic {name} is valid (not created: --validate-only).")
    elif created:
        click.echo(f"Created topic {name}.")
    else:
        click.echo(f"Topic {name} already exists.")


def parse_replica_assignment(text: str) -> dict[int, list[int]]:
    """``1:2,2:3`` -> {0: [1, 2], 1: [2, 3]} (kafka-topics' --replica-assignment)."""
    assignment: dict[int, list[int]] = {}
    for partition, replicas in enumerate(text.split(",")):
        try:
            brokers = [int(b) for b in replicas.split(":")]
        except ValueError:
            raise CliError(
                f"--replica-assignment: partition {partition} has {replicas.strip()!r}; "
                "expected broker ids separated by ':'"
            ) from None
        if len(set(brokers)) != len(brokers):
            # kafka-topics checks this before asking the broker.
            raise CliError(
                f"Partition replica lists may not contain duplicate entries: "
                f"{', '.join(map(str, brokers))}"
            )
        assignment[partition] = brokers
    return assignment


@topics.command("list")
@bootstrap_option
@click.option("--exclude-internal", is_flag=True, help="Leave out internal topics.")
def list_topics(bootstrap_server: str, exclude_internal: bool) -> None:
    """List topic names."""

    async def action(admin: Admin) -> list[str]:
        cluster = await admin.list_topics()
        return sorted(
            name
            for name, info in cluster.topics.items()
            if not (exclude_internal and info.is_internal)
        )

    for name in run(_with_admin(bootstrap_server, action)):
        click.echo(name)


@topics.command("describe")
@click.argument("names", nargs=-1)
@bootstrap_option
@click.option("--all-configs", is_flag=True, help="Show every config, defaults included.")
@click.option("--exclude-internal", is_flag=True, help="Leave out internal topics.")
@click.option(
    "--under-replicated-partitions",
    is_flag=True,
    help="Only partitions whose ISR is smaller than their replica list.",
)
@click.option(
    "--unavailable-partitions",
    is_flag=True,
    help="Only partitions without a leader or whose leader is not a live broker.",
)
@click.option(
    "--under-min-isr-partitions",
    is_flag=True,
    help="Only partitions whose ISR is smaller than min.insync.replicas (or leaderless).",
)
@click.option(
    "--at-min-isr-partitions",
    is_flag=True,
    help="Only partitions whose ISR size equals min.insync.replicas.",
)
def describe(
    names: tuple[str, ...],
    bootstrap_server: str,
    all_configs: bool,
    exclude_internal: bool,
    under_replicated_partitions: bool,
    unavailable_partitions: bool,
    under_min_isr_partitions: bool,
    at_min_isr_partitions: bool,
) -> None:
    """Describe topics NAMES (default: every topic).

    With any of the partition filters only the matching partitions are printed, without
    the topic header lines (kafka-topics' behaviour)."""
    from odradek.cli.topic_report import PartitionFilter, describe_lines
    from odradek.client.admin import ConfigResource
    from odradek.client.errors import KafkaError

    wanted_filter = PartitionFilter(
        under_replicated=under_replicated_partitions,
        unavailable=unavailable_partitions,
        under_min_isr=under_min_isr_partitions,
        at_min_isr=at_min_isr_partitions,
    )

    async def action(admin: Admin) -> list[str]:
        cluster = await admin.list_topics()
        if names:
            missing = [n for n in names if n not in cluster.topics]
            if missing:
                raise CliError(f"topic {missing[0]!r} does not exist")
            wanted = list(dict.fromkeys(names))
        else:
            wanted = sorted(
                n
                for n, info in cluster.topics.items()
                if not (exclude_internal and info.is_internal)
            )
        for name in wanted:
            info = cluster.topics[name]
            if info.error_code and not info.partitions:
                raise KafkaError(info.error_code, f"topic {name!r}")
        configs: dict[str, dict[str, Any]] = {}
        if wanted:
            resources = [ConfigResource("topic", n) for n in wanted]
            described = await admin.describe_configs(resources)
            for resource, entries in described.items():
                configs[resource.name] = entries
        live = set((await admin.describe_cluster()).brokers)
        lines: list[str] = []
        for name in wanted:
            lines += describe_lines(
                cluster.topics[name], configs.get(name, {}), live, wanted_filter, all_configs
            )
        return lines

    for line in run(_with_admin(bootstrap_server, action)):
        click.echo(line)


@topics.command("delete")
@click.argument("names", nargs=-1, required=True)
@bootstrap_option
@click.option("--if-exists", is_flag=True, help="Succeed if a topic does not exist.")
def delete(names: tuple[str, ...], bootstrap_server: str, if_exists: bool) -> None:
    """Delete topics NAMES."""
    from odradek.client.errors import KafkaError

    async def action(admin: Admin) -> list[str]:
        results = []
        for name in dict.fromkeys(names):
            try:
                await admin.delete_topics([name])
            except KafkaError as exc:
                if if_exists and exc.name == "UNKNOWN_TOPIC_OR_PARTITION":
                    results.append(f"Topic {name} does not exist.")
                    continue
                raise
            results.append(f"Deleted topic {name}.")
        return results

    for line in run(_with_admin(bootstrap_server, action)):
        click.echo(line)


@topics.command("alter")
@click.argument("name")
@bootstrap_option
@click.option(
    "--partitions",
    "-p",
    type=click.IntRange(min=1),
    help="New total number of partitions (can only grow).",
)
@click.option(
    "--add-config",
    "add_args",
    multiple=True,
    metavar="KEY=VALUE",
    help="Set a topic config; repeatable.",
)
@click.option(
    "--delete-config",
    "delete_args",
    multiple=True,
    metavar="KEY",
    help="Return a topic config to its default; repeatable.",
)
def alter(
    name: str,
    bootstrap_server: str,
    partitions: int | None,
    add_args: tuple[str, ...],
    delete_args: tuple[str, ...],
) -> None:
    """Change topic NAME's partition count or configs."""
    from odradek.client.admin import ConfigResource

    additions = parse_key_values(add_args, "--add-config")
    deletions = list(dict.fromkeys(k.strip() for k in delete_args))
    if any(not k or "=" in k for k in deletions):
        raise CliError("--delete-config expects a config name (KEY), not KEY=VALUE")
    both = sorted(set(additions) & set(deletions))
    if both:
        raise CliError(f"{both[0]!r} is both in --add-config and --delete-config")
    if partitions is None and not additions and not deletions:
        raise CliError("nothing to alter: give --partitions, --add-config or --delete-config")

    async def action(admin: Admin) -> list[str]:
        done = []
        cluster = await admin.list_topics()
        if name not in cluster.topics:
            raise CliError(f"topic {name!r} does not exist")
        if additions or deletions:
            operations = [(k, "set", v) for k, v in additions.items()]
            operations += [(k, "delete", None) for k in deletions]
            await admin.incremental_alter_configs({ConfigResource("topic", name): operations})
            done.append(f"Updated config of topic {name}.")
        if partitions is not None:
            current = len(cluster.topics[name].partitions)
            if partitions != current:
                await admin.create_partitions({name: partitions})
                done.append(f"Topic {name} now has {partitions} partitions.")
            else:
                done.append(f"Topic {name} already has {partitions} partitions.")
        return done

    for line in run(_with_admin(bootstrap_server, action)):
        click.echo(line)


def register(cli: click.Group) -> None:
    cli.add_command(topics)
