"""``odradek delete-records``: kafka-delete-records.sh (Kafka's DeleteRecordsCommand).

``--offset-json-file F`` names Kafka's file::

    {"partitions": [{"topic": "t", "partition": 0, "offset": 5}], "version": 1}

Records before ``offset`` are deleted (the partition's log start offset moves up to it);
``-1`` means the high watermark, i.e. everything written so far. Each partition is asked
of its leader (DeleteRecords). Output, as Kafka's tool prints it::

    Executing records delete operation
    Records delete operation completed:
    partition: t-0    low_watermark: 5
    partition: t-1    error: org.apache.kafka.common.errors.OffsetOutOfRangeException: The ...

(a tab after the partition; partitions sorted; the error is the Java exception Kafka's tool
shows for that error code). Unlike Kafka's tool, which exits 0 whatever the partitions
answered, a failed partition also ends the command with ``error: N partition(s) could not be
deleted`` on stderr and exit code 1, so scripts can tell. A file that cannot be used
(missing, not JSON, not the format, a partition listed twice, an offset below -1) is one
error line and nothing is deleted.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from pathlib import Path

import click

from odradek.cli.command_config import client_security
from odradek.cli.errors import CliError
from odradek.cli.java_errors import JAVA_ERRORS, JAVA_PACKAGE
from odradek.cli.output import bootstrap_option, check_bootstrap, run

TopicPartition = tuple[str, int]
HIGH_WATERMARK = -1
SUPPORTED_VERSION = 1



def _entry(entry: object) -> tuple[TopicPartition, int]:
    topic = entry.get("topic") if isinstance(entry, dict) else None
    partition = entry.get("partition") if isinstance(entry, dict) else None
    offset = entry.get("offset") if isinstance(entry, dict) else None
    if (
        not isinstance(topic, str)
        or not isinstance(partition, int)
        or isinstance(partition, bool)
        or not isinstance(offset, int)
        or isinstance(offset, bool)
    ):
        raise CliError(
            f"invalid partition entry {json.dumps(entry)}: needs a topic (string), "
            "a partition and an offset (integers)"
        )
    if offset < HIGH_WATERMARK:
        raise CliError(
            f"invalid offset {offset} for {topic}-{partition}: "
            "use an offset >= 0, or -1 for the high watermark"
        )
    return (topic, partition), offset


def parse_offset_json(text: str) -> dict[TopicPartition, int]:
    """The partitions and offsets of kafka-delete-records' JSON; a bad file is a CliError."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CliError(f"The input string is not a valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise CliError('The offset JSON must be an object: {"partitions": [...], "version": 1}')
    version = data.get("version", SUPPORTED_VERSION)
    if version != SUPPORTED_VERSION or isinstance(version, bool):
        raise CliError(f"Not supported version field value {json.dumps(version)}")
    if "partitions" not in data:
        raise CliError("Missing partitions field")
    entries = data["partitions"]
    if not isinstance(entries, list):
        raise CliError(
            '"partitions" must be a list of {"topic": ..., "partition": ..., "offset": ...}'
        )
    offsets: dict[TopicPartition, int] = {}
    duplicates: set[TopicPartition] = set()
    for raw in entries:
        tp, offset = _entry(raw)
        if tp in offsets:
            duplicates.add(tp)
        offsets[tp] = offset
    if duplicates:
        listed = ",".join(f"{t}-{p}" for t, p in sorted(duplicates))
        raise CliError(f"Offset json file contains duplicate topic partitions: {listed}")
    return offsets


def read_offset_json_file(path: Path) -> dict[TopicPartition, int]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise CliError(f"{path} is not UTF-8 text: {exc}") from None
    return parse_offset_json(text)


def error_text(error: BaseException) -> str:
    """A failed partition's error as Kafka's tool words it (Java exception: message)."""
    from odradek.client.errors import KafkaError

    if isinstance(error, KafkaError) and error.code in JAVA_ERRORS:
        java_name, message = JAVA_ERRORS[error.code]
        return f"{JAVA_PACKAGE}.{java_name}: {message}"
    return str(error) or type(error).__name__


def report_lines(
    results: Mapping[TopicPartition, int | BaseException],
) -> tuple[list[str], int]:
    """The per-partition lines (sorted) and how many partitions failed."""
    lines = []
    failed = 0
    for (topic, partition), result in sorted(results.items()):
        if isinstance(result, BaseException):
            failed += 1
            lines.append(f"partition: {topic}-{partition}\terror: {error_text(result)}")
        else:
            lines.append(f"partition: {topic}-{partition}\tlow_watermark: {result}")
    return lines, failed


@click.command("delete-records")
@bootstrap_option
@click.option(
    "--offset-json-file",
    required=True,
    metavar="FILE",
    type=click.Path(dir_okay=False, path_type=Path),
    help="REQUIRED: The JSON file with offset per partition. The format to use is: "
    '{"partitions": [{"topic": "foo", "partition": 1, "offset": 1}], "version": 1}. '
    "Offset -1 means the high watermark.",
)
def delete_records(bootstrap_server: str, offset_json_file: Path) -> None:
    """This tool helps to delete records of the given partitions down to the specified
    offset (kafka-delete-records)."""
    offsets = read_offset_json_file(offset_json_file)
    check_bootstrap(bootstrap_server)

    async def action() -> dict[TopicPartition, int | BaseException]:
        from odradek.client.admin import Admin
        from odradek.client.errors import ClientError, KafkaError

        admin = Admin(bootstrap_server, security=client_security())
        await admin.start()  # an unreachable broker fails here, before anything is printed
        try:
            click.echo("Executing records delete operation")

            # One call per partition, so each partition gets its own answer (the client
            # fails a whole call at its first bad partition, e.g. an unknown topic).
            async def one(tp: TopicPartition, offset: int) -> int | BaseException:
                try:
                    return (await admin.delete_records({tp: offset}))[tp]
                except (KafkaError, ClientError) as exc:
                    return exc

            answers = await asyncio.gather(*(one(tp, o) for tp, o in offsets.items()))
            return dict(zip(offsets, answers, strict=True))
        finally:
            await admin.close()

    results = run(action())
    click.echo("Records delete operation completed:")
    lines, failed = report_lines(results)
    for line in lines:
        click.echo(line)
    if failed:
        raise CliError(f"{failed} partition(s) could not be deleted")


def register(cli: click.Group) -> None:
    cli.add_command(delete_records)
