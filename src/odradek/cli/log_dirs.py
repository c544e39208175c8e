"""``odradek log-dirs describe``: what ``kafka-log-dirs.sh --describe`` shows.

Asks every broker (or ``--broker-list``) with DescribeLogDirs and prints Kafka's JSON on
one line::

    {"version":1,"brokers":[{"broker":0,"logDirs":[{"logDir":"/data","error":null,
     "partitions":[{"partition":"orders-0","size":2048,"offsetLag":0,"isFuture":false}]}]}]}

``error`` is the Java exception class Kafka's tool prints (an offline directory shows
``org.apache.kafka.common.errors.KafkaStorageException``), ``null`` when the directory
is online. ``--topic-list a,b`` keeps only those topics' partitions. The progress lines
Kafka's tool prints before the JSON go to stderr here, so stdout is JSON alone.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

from odradek.cli.command_config import client_security
from odradek.cli.errors import CliError
from odradek.cli.java_errors import JAVA_ERRORS, JAVA_PACKAGE
from odradek.cli.output import bootstrap_option, check_bootstrap, run

if TYPE_CHECKING:
    from odradek.client.errors import KafkaError
    from odradek.client.log_dirs import LogDirDescription



def _error_name(error: KafkaError | None) -> str | None:
    if error is None:
        return None
    known = JAVA_ERRORS.get(int(error.code))
    return f"{JAVA_PACKAGE}.{known[0]}" if known else error.name


def _csv(value: str | None, what: str, convert: Any = str) -> list[Any] | None:
    if value is None:
        return None
    items = [item.strip() for item in value.split(",") if item.strip()]
    try:
        return [convert(item) for item in items]
    except ValueError:
        raise CliError(f"{what} must be a comma-separated list, not {value!r}") from None


def to_json(
    described: dict[int, dict[str, LogDirDescription]], topics: list[str] | None
) -> dict[str, Any]:
    """Kafka's ``kafka-log-dirs.sh --describe`` document."""
    brokers = []
    for broker, dirs in sorted(described.items()):
        log_dirs = []
        for path, info in sorted(dirs.items()):
            partitions = [
                {
                    "partition": f"{topic}-{partition}",
                    "size": replica.size,
                    "offsetLag": replica.offset_lag,
                    "isFuture": replica.is_future,
                }
                for (topic, partition), replica in sorted(info.replicas.items())
                if topics is None or topic in topics
            ]
            log_dirs.append(
                {"logDir": path, "error": _error_name(info.error), "partitions": partitions}
            )
        brokers.append({"broker": broker, "logDirs": log_dirs})
    return {"version": 1, "brokers": brokers}


@click.group("log-dirs")
def log_dirs() -> None:
    """Inspect brokers' log directories (kafka-log-dirs)."""


@log_dirs.command("describe")
@bootstrap_option
@click.option("--topic-list", help="Comma-separated topics to show (default: all).")
@click.option("--broker-list", help="Comma-separated broker ids to ask (default: all).")
def describe(bootstrap_server: str, topic_list: str | None, broker_list: str | None) -> None:
    """Print each broker's log directories, their state and partition sizes as JSON."""
    from odradek.client.admin import Admin

    topics = _csv(topic_list, "--topic-list")
    brokers = _csv(broker_list, "--broker-list", int)
    check_bootstrap(bootstrap_server)

    async def action() -> dict[int, dict[str, LogDirDescription]]:
        admin = Admin(bootstrap_server, security=client_security())
        await admin.start()
        try:
            return await admin.describe_log_dirs(brokers)
        finally:
            await admin.close()

    click.echo("Querying brokers for log directories information", err=True)
    described = run(action())
    ids = ",".join(str(b) for b in sorted(described))
    click.echo(f"Received log directory information from brokers {ids}", err=True)
    click.echo(json.dumps(to_json(described, topics), separators=(",", ":")))


def register(cli: click.Group) -> None:
    cli.add_command(log_dirs)
