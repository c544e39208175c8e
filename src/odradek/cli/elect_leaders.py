"""``odradek elect-leaders``: preferred or unclean leader elections, as
kafka-leader-election.sh.

Exactly one of ``--all-topic-partitions``, ``--topic T --partition P`` or
``--path-to-json-file F`` (``{"partitions": [{"topic": "t", "partition": 0}, ...]}``)
chooses the partitions; ``--election-type preferred|unclean`` the election. The request
(ElectLeaders) goes to the controller. Output, as LeaderElectionCommand prints it
(partitions sorted)::

    Successfully completed leader election (PREFERRED) for partitions t-0, t-1
    Valid replica already elected for partitions t-2
    Error completing leader election (PREFERRED) for partition: t-3: <ERROR_NAME>: ...

(the error is Kafka's error name and the broker's message) and, when any partition
failed, ``error: N replica(s) could not be elected`` on stderr with exit code 1.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from odradek.cli.command_config import client_security
from odradek.cli.errors import CliError
from odradek.cli.output import bootstrap_option, check_bootstrap, run

if TYPE_CHECKING:
    from odradek.client.errors import KafkaError

TopicPartition = tuple[str, int]


def parse_election_file(path: Path) -> list[TopicPartition]:
    """The partitions of kafka-leader-election's JSON file; a bad file is a CliError."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CliError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict) or "partitions" not in data:
        raise CliError('Replica election data is missing "partitions" field')
    entries = data["partitions"]
    if not isinstance(entries, list):
        raise CliError('"partitions" must be a list of {"topic": ..., "partition": ...}')
    partitions: list[TopicPartition] = []
    for entry in entries:
        topic = entry.get("topic") if isinstance(entry, dict) else None
        partition = entry.get("partition") if isinstance(entry, dict) else None
        if (
            not isinstance(topic, str)
            or not isinstance(partition, int)
            or isinstance(partition, bool)
        ):
            raise CliError(f"invalid partition entry {entry!r}: needs a topic and a partition")
        partitions.append((topic, partition))
    duplicates = sorted({tp for tp in partitions if partitions.count(tp) > 1})
    if duplicates:
        listed = ", ".join(f"{t}-{p}" for t, p in duplicates)
        raise CliError(f"Replica election data contains duplicate partitions: {listed}")
    return partitions


def report_lines(
    election_type: str, results: dict[TopicPartition, KafkaError | None]
) -> tuple[list[str], int]:
    """The tool's lines for ``results`` and the number of failed partitions."""
    kind = election_type.upper()
    succeeded = [tp for tp, error in sorted(results.items()) if error is None]
    noop = [
        tp
        for tp, error in sorted(results.items())
        if error is not None and error.name == "ELECTION_NOT_NEEDED"
    ]
    failed = [
        (tp, error)
        for tp, error in sorted(results.items())
        if error is not None and error.name != "ELECTION_NOT_NEEDED"
    ]
    lines = []
    if succeeded:
        listed = ", ".join(f"{t}-{p}" for t, p in succeeded)
        lines.append(f"Successfully completed leader election ({kind}) for partitions {listed}")
    if noop:
        listed = ", ".join(f"{t}-{p}" for t, p in noop)
        lines.append(f"Valid replica already elected for partitions {listed}")
    for (topic, partition), error in failed:
        lines.append(
            f"Error completing leader election ({kind}) for partition: {topic}-{partition}: {error}"
        )
    return lines, len(failed)


@click.command("elect-leaders")
@bootstrap_option
@click.option(
    "--election-type",
    required=True,
    type=click.Choice(["preferred", "unclean"], case_sensitive=False),
    help="preferred: the first replica leads again; unclean: elect a leader for "
    "leaderless partitions, even an out-of-sync replica.",
)
@click.option("--all-topic-partitions", is_flag=True, help="Every partition of the cluster.")
@click.option("--topic", help="The topic of the one partition to elect for.")
@click.option("--partition", type=click.IntRange(min=0), help="Its partition (with --topic).")
@click.option(
    "--path-to-json-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help='Partitions from a file: {"partitions": [{"topic": "t", "partition": 0}]}.',
)
def elect_leaders(
    bootstrap_server: str,
    election_type: str,
    all_topic_partitions: bool,
    topic: str | None,
    partition: int | None,
    path_to_json_file: Path | None,
) -> None:
    """Elect partition leaders (kafka-leader-election)."""
    chosen = sum((all_topic_partitions, topic is not None, path_to_json_file is not None))
    if chosen != 1:
        raise CliError(
            "One and only one of the following options is required: "
            "--topic, --all-topic-partitions, --path-to-json-file"
        )
    if topic is not None and partition is None:
        raise CliError("Missing required option(s): --partition")
    if topic is None and partition is not None:
        raise CliError("Option --partition is only allowed if --topic is used")
    partitions: list[TopicPartition] | None = None
    if topic is not None and partition is not None:
        partitions = [(topic, partition)]
    elif path_to_json_file is not None:
        partitions = parse_election_file(path_to_json_file)
    election_type = election_type.lower()

    async def action() -> Any:
        from odradek.client.admin import Admin

        admin = Admin(check_bootstrap(bootstrap_server), security=client_security())
        await admin.start()
        try:
            return await admin.elect_leaders(election_type, partitions)
        except ValueError as exc:
            raise CliError(str(exc)) from None
        finally:
            await admin.close()

    lines, failures = report_lines(election_type, run(action()))
    for line in lines:
        click.echo(line)
    if failures:
        raise CliError(f"{failures} replica(s) could not be elected")


def register(cli: click.Group) -> None:
    cli.add_command(elect_leaders)
