"""``odradek consume TOPIC``: print records to standard output, one per line.

Like kafka-console-consumer. Without ``--group``, an assigned (group-less) consumer: every
partition of the topic, or only ``--partition P``, read from the end (default), from the beginning
(``--from-beginning``) or from ``--offset earliest|latest|N`` (N needs ``--partition``, as
in Kafka). An offset past the end resets to the end; one before the log start resets to
the start. It stops after ``--max-messages N`` records, after ``--timeout-ms T`` without a
new record, or on Ctrl-C, and then prints ``Processed a total of N messages`` on stderr.

With ``--group G`` it joins consumer group G as a real member (odradek's
:class:`~odradek.client.group_consumer.GroupConsumer` with Kafka's default assignors,
``range`` then ``cooperative-sticky``), reads the partitions the group assigns it from the
group's committed offsets (``--from-beginning`` or ``--offset`` only say where to start
without one, as ``auto.offset.reset``), auto-commits what it printed every 5 seconds and
when it stops, and leaves the group.

The line format is Kafka's DefaultMessageFormatter (see :mod:`odradek.cli.output`): the
value alone by default; ``--print-key``, ``--print-timestamp``, ``--print-headers``,
``--print-partition``, ``--print-offset`` add fields, and ``--property name=value`` accepts
the kafka-console-consumer properties (``print.key=true``, ``key.separator=:``, ...).
"""

from __future__ import annotations

import asyncio
import select
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import click

from odradek import timeouts
from odradek.cli.command_config import client_security, command_config_alias
from odradek.cli.consume_group import LEAVE_TIMEOUT_S, seek_to_start
from odradek.cli.errors import CliError
from odradek.cli.output import (
    NoOpFormatter,
    RecordFormatter,
    bootstrap_option,
    check_bootstrap,
    formatter_class,
    parse_key_values,
    read_formatter_config,
    run,
)

if TYPE_CHECKING:
    from odradek.client.fetcher import Consumer

UNKNOWN_TOPIC_OR_PARTITION = 3
CLIENT_ID = "odradek-console-consumer"
MAX_OFFSET = 2**63 - 1  # offsets are int64 on the wire
# Longest single poll: short enough that --timeout-ms and Ctrl-C are honoured promptly.
POLL_SLICE_MS = 500


def parse_offset(text: str | None) -> str | int | None:
    """``--offset``: 'earliest', 'latest' or a non-negative offset."""
    if text is None:
        return None
    lowered = text.strip().lower()
    if lowered in ("earliest", "latest"):
        return lowered
    try:
        offset = int(lowered)
    except ValueError:
        raise CliError(f"--offset must be earliest, latest or an offset, not {text!r}") from None
    if not 0 <= offset <= MAX_OFFSET:
        raise CliError(f"--offset must be between 0 and {MAX_OFFSET}, got {offset}")
    return offset


def reader_gone(out: BinaryIO) -> bool:
    """Whether ``out`` is a pipe whose reading end was closed.

    A writer learns that only when it next writes, and an idle consumer may never write
    again; poll() reports POLLERR on such a pipe right away.
    """
    try:
        fd = out.fileno()
    except (AttributeError, OSError, ValueError):
        return False
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


async def _partitions(consumer: Consumer, topic: str, only: int | None) -> list[int]:
    cluster = await consumer.client.metadata([topic])
    info = cluster.topics.get(topic)
    if info is None or info.error_code == UNKNOWN_TOPIC_OR_PARTITION:
        raise CliError(f"topic {topic!r} does not exist")
    if info.error_code and not info.partitions:
        from odradek.client.errors import KafkaError

        raise KafkaError(info.error_code, f"topic {topic!r}")
    partitions = sorted(info.partitions)
    if only is None:
        return partitions
    if only not in info.partitions:
        raise CliError(
            f"topic {topic!r} has no partition {only} "
            f"(it has {len(partitions)}: 0..{len(partitions) - 1})"
        )
    return [only]


async def consume_records(
    bootstrap_server: str,
    topic: str,
    out: BinaryIO,
    *,
    formatter: RecordFormatter | NoOpFormatter,
    partition: int | None,
    start: str | int,
    max_messages: int | None,
    timeout_ms: int | None,
    isolation_level: str,
    group: str | None = None,
) -> int:
    """Print records of ``topic`` to ``out`` until a stop condition; return how many."""
    from odradek.client.fetcher import Consumer
    from odradek.client.group_consumer import GroupConsumer

    # Where an out-of-range position goes; kafka-console-consumer does the same. For a
    # group member it is also where a partition without a committed offset starts.
    reset = "earliest" if start == "earliest" else "latest"
    consumer: Consumer
    if group is None:
        consumer = Consumer(
            bootstrap_server,
            client_id=CLIENT_ID,
            security=client_security(),
            fetch_max_wait_ms=POLL_SLICE_MS,
            isolation_level=isolation_level,
            auto_offset_reset=reset,
        )
    else:
        consumer = GroupConsumer(
            bootstrap_server,
            group_id=group,
            client_id=CLIENT_ID,
            security=client_security(),
            fetch_max_wait_ms=POLL_SLICE_MS,
            isolation_level=isolation_level,
            auto_offset_reset=reset,
        )
    count = 0
    consuming = False
    # SIGTERM ends it as --max-messages does (Kafka's console consumer closes its consumer
    # in a shutdown hook): the final commit and LeaveGroup happen, the summary is printed.
    terminated = False
    task = asyncio.current_task()

    def on_sigterm() -> None:
        nonlocal terminated
        terminated = True
        if task is not None:
            task.cancel()

    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, on_sigterm)
    try:
        await consumer.start()
        partitions = await _partitions(consumer, topic, partition)
        if group is None:
            assigned = [(topic, p) for p in partitions]
            consumer.assign(assigned)
            await seek_to_start(consumer, assigned, start)
        else:
            assert isinstance(consumer, GroupConsumer)
            consumer.subscribe([topic])
        consuming = True
        last_progress = time.monotonic()
        while max_messages is None or count < max_messages:
            wait_ms = POLL_SLICE_MS
            if timeout_ms is not None:
                left_ms = timeout_ms - (time.monotonic() - last_progress) * 1000
                if left_ms <= 0:
                    break
                wait_ms = max(1, min(wait_ms, int(left_ms)))
            wanted = None if max_messages is None else max_messages - count
            # A group member polls even without partitions: poll() takes part in rebalances.
            records = await consumer.poll(timeout_ms=wait_ms, max_records=wanted)
            if not records:
                if reader_gone(out):
                    break  # `consume ... | head`: nobody reads any more, so stop waiting
                continue
            last_progress = time.monotonic()
            out.write(
                b"".join(
                    formatter.format(
                        partition=r.partition,
                        offset=r.offset,
                        timestamp_ms=r.timestamp_ms,
                        timestamp_type=r.timestamp_type,
                        key=r.key,
                        value=r.value,
                        headers=r.headers,
                    )
                    for r in records
                )
            )
            out.flush()
            count += len(records)
    except asyncio.CancelledError:
        if not terminated:
            raise
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
        try:
            # A group member commits what was printed and leaves the group here.
            await timeouts.wait_for(consumer.close(), LEAVE_TIMEOUT_S)
        except TimeoutError:
            pass  # the coordinator expires the member after its session timeout
        if consuming:
            # Ctrl-C, --max-messages and --timeout-ms all end here, as in Kafka's console
            # consumer; a failure before the first poll gets only its error line.
            click.echo(f"Processed a total of {count} messages", err=True)
    return count


@click.command("consume")
@click.argument("topic")
@bootstrap_option
@command_config_alias("--consumer.config", "kafka-console-consumer")
@click.option("--from-beginning", is_flag=True, help="Start at the earliest offset.")
@click.option(
    "--offset",
    "offset_text",
    metavar="earliest|latest|N",
    help="Where to start (default latest). N needs --partition.",
)
@click.option("--partition", "-p", type=click.IntRange(min=0), help="Read only this partition.")
@click.option(
    "--group",
    metavar="GROUP_ID",
    help="Join this consumer group: read the partitions it assigns, from its committed "
    "offsets, and commit what was read (every 5 s and at exit).",
)
@click.option("--max-messages", type=click.IntRange(min=1), help="Exit after this many records.")
@click.option(
    "--timeout-ms",
    type=click.IntRange(min=0),
    help="Exit when no record arrived for this long.",
)
@click.option("--print-key", is_flag=True, help="Print the key (print.key).")
@click.option(
    "--print-timestamp",
    is_flag=True,
    help="Print 'CreateTime:<ms>' / 'LogAppendTime:<ms>' (print.timestamp).",
)
@click.option("--print-headers", is_flag=True, help="Print 'k:v,k2:v2' (print.headers).")
@click.option("--print-partition", is_flag=True, help="Print 'Partition:<n>'.")
@click.option("--print-offset", is_flag=True, help="Print 'Offset:<n>'.")
@click.option(
    "--property",
    "properties",
    multiple=True,
    metavar="NAME=VALUE",
    help="kafka-console-consumer formatter property (print.key, key.separator, ...).",
)
@click.option(
    "--formatter",
    "formatter_name",
    metavar="CLASS",
    help="kafka-console-consumer's --formatter: DefaultMessageFormatter (the default) or "
    "NoOpMessageFormatter (print nothing, count only), by short or Kafka class name.",
)
@click.option(
    "--formatter-config",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A properties file of formatter properties; --property settings override it.",
)
@click.option(
    "--isolation-level",
    type=click.Choice(["read_uncommitted", "read_committed"]),
    default="read_uncommitted",
    show_default=True,
)
def consume(
    topic: str,
    bootstrap_server: str,
    from_beginning: bool,
    offset_text: str | None,
    partition: int | None,
    group: str | None,
    max_messages: int | None,
    timeout_ms: int | None,
    print_key: bool,
    print_timestamp: bool,
    print_headers: bool,
    print_partition: bool,
    print_offset: bool,
    properties: tuple[str, ...],
    formatter_name: str | None,
    formatter_config: Path | None,
    isolation_level: str,
) -> None:
    """Print records of TOPIC, one per line."""
    check_bootstrap(bootstrap_server)
    offset = parse_offset(offset_text)
    if from_beginning and offset is not None:
        raise CliError("--from-beginning and --offset cannot be used together")
    if isinstance(offset, int) and partition is None:
        raise CliError("--offset N needs --partition (offsets are per partition)")
    if group is not None:
        if not group:
            raise CliError("--group must not be empty")
        if partition is not None:
            raise CliError(
                "--group and --partition cannot be used together: "
                "a group member reads the partitions the group assigns it"
            )
    start: str | int = (
        "earliest" if from_beginning else (offset if offset is not None else "latest")
    )
    settings = read_formatter_config(formatter_config)
    settings.update(parse_key_values(properties, "--property"))
    formatter: RecordFormatter | NoOpFormatter = RecordFormatter(
        print_timestamp=print_timestamp,
        print_partition=print_partition,
        print_offset=print_offset,
        print_headers=print_headers,
        print_key=print_key,
    ).with_properties(settings)
    if formatter_class(formatter_name) == "NoOpMessageFormatter":
        formatter = NoOpFormatter()
    run(
        consume_records(
            bootstrap_server,
            topic,
            sys.stdout.buffer,
            formatter=formatter,
            partition=partition,
            start=start,
            max_messages=max_messages,
            timeout_ms=timeout_ms,
            isolation_level=isolation_level,
            group=group,
        )
    )


def register(cli: click.Group) -> None:
    cli.add_command(consume)
