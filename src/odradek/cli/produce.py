"""``odradek produce TOPIC``: one record per line of standard input.

Like kafka-console-producer: each line (without its ``\\n`` or ``\\r\\n``) is a record value;
with ``--key-separator SEP`` the text before the first SEP is the key and the rest the value
(a line without SEP is an error, as Kafka's ``parse.key=true`` makes it). ``--header k=v``
adds the same headers to every record; ``--null-marker`` turns a key or value equal to it
into null (a tombstone for compacted topics). Lines are raw bytes: no decoding happens.

Records go through :class:`odradek.client.producer.Producer` (batching, ``--linger-ms``,
``--batch-size``, ``--compression``, ``--acks``; idempotent when acks=all). Standard input is
read in chunks on a worker thread, so typing records interactively still sends each one
after ``linger.ms``, and piping millions of lines is not slowed down by per-line reads.

Exit status is 0 only if every record was acknowledged (or sent, with ``--acks 0``). A bad
line stops the input there; the lines before it are still delivered, and the one error line
says so: ``error: line 3: no key separator ':' found in 'abc'; 2 records sent before it``.
A record the broker refused is reported with its line number and how many were written.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import io
import os
import sys
import threading
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, BinaryIO

import click

from odradek.cli.command_config import client_security, command_config_alias
from odradek.cli.errors import CliError
from odradek.cli.output import bootstrap_option, check_bootstrap, parse_headers, run, unescape

if TYPE_CHECKING:
    from odradek.client.producer import Producer

# How many unacknowledged records may pile up before reading more input waits: bounds memory
# when stdin is much faster than the broker (the producer's buffer.memory bounds bytes too).
MAX_PENDING = 200_000
READ_CHUNK = 1 << 16
READ_AHEAD_CHUNKS = 8

UNKNOWN_TOPIC_OR_PARTITION = 3


async def read_lines(stream: BinaryIO) -> AsyncIterator[bytes]:
    """Lines of ``stream`` without their line endings; the last one may lack a newline.

    A daemon thread does the blocking reads, a few chunks ahead at most. Not the loop's
    default executor: ``asyncio.run`` joins that on exit, which would hang an aborted
    interactive session until the user pressed Enter.
    """
    loop = asyncio.get_running_loop()
    chunks: asyncio.Queue[bytes | BaseException] = asyncio.Queue(maxsize=READ_AHEAD_CHUNKS)
    try:
        # Straight from the file descriptor: a daemon thread blocked inside a buffered
        # reader holds its lock, and interpreter shutdown aborts on that lock (Ctrl-C).
        fd = stream.fileno()

        def read(size: int) -> bytes:
            return os.read(fd, size)
    except (AttributeError, OSError, io.UnsupportedOperation):
        read = getattr(stream, "read1", stream.read)

    def reader() -> None:
        while True:
            try:
                chunk: bytes | BaseException = read(READ_CHUNK)
            except BaseException as exc:  # handed to the loop, which re-raises it
                chunk = exc
            put = chunks.put(chunk)
            try:
                asyncio.run_coroutine_threadsafe(put, loop).result()
            except (RuntimeError, concurrent.futures.CancelledError):
                # The loop is gone (input stopped at a bad line, or the end): nobody wants
                # more. Close the coroutine it never ran, or Python warns at exit.
                put.close()
                return
            if not isinstance(chunk, bytes) or not chunk:
                return

    threading.Thread(target=reader, name="odradek-stdin", daemon=True).start()
    pending = b""
    while True:
        chunk = await chunks.get()
        if isinstance(chunk, BaseException):
            raise CliError(f"cannot read standard input: {chunk}")
        if not chunk:
            break
        pending += chunk
        lines = pending.split(b"\n")
        pending = lines.pop()
        for line in lines:
            yield line[:-1] if line.endswith(b"\r") else line
    if pending:
        yield pending[:-1] if pending.endswith(b"\r") else pending


def _text(data: bytes, limit: int = 60) -> str:
    """Input bytes as the user typed them, quoted: text, not a Python bytes literal."""
    shown = data[:limit].decode(errors="replace")
    quoted = repr(shown)  # escapes control characters such as a tab
    return quoted[:-1] + "...'" if len(data) > limit and quoted.endswith("'") else quoted


def _records(count: int) -> str:
    return f"{count} record{'' if count == 1 else 's'}"


def split_line(
    line: bytes, number: int, key_separator: bytes | None, null_marker: bytes | None
) -> tuple[bytes | None, bytes | None]:
    """(key, value) of one input line."""
    key: bytes | None = None
    value: bytes | None = line
    if key_separator is not None:
        key, sep, value = line.partition(key_separator)
        if not sep:
            raise CliError(
                f"line {number}: no key separator {_text(key_separator)} found in {_text(line)}"
            )
        if null_marker is not None and key == null_marker:
            key = None
    if null_marker is not None and value == null_marker:
        value = None
    return key, value


async def _check_topic(producer: Producer, topic: str, partition: int | None) -> None:
    """Fail fast, with a clear message, on a topic that does not exist or a bad partition."""
    from odradek.client.errors import KafkaError

    cluster = await producer.client.metadata([topic], allow_auto_create=True)
    info = cluster.topics.get(topic)
    if info is None or info.error_code == UNKNOWN_TOPIC_OR_PARTITION:
        raise CliError(f"topic {topic!r} does not exist (and the broker does not auto-create it)")
    if info.error_code and not info.partitions:
        error = KafkaError(info.error_code, f"topic {topic!r}")
        if not error.retriable:  # e.g. INVALID_TOPIC_EXCEPTION; LEADER_NOT_AVAILABLE passes
            raise error
    if partition is not None and info.partitions and partition not in info.partitions:
        raise CliError(
            f"topic {topic!r} has no partition {partition} "
            f"(it has {len(info.partitions)}: 0..{len(info.partitions) - 1})"
        )


async def produce_lines(
    bootstrap_server: str,
    topic: str,
    stream: BinaryIO,
    *,
    key_separator: bytes | None,
    null_marker: bytes | None,
    partition: int | None,
    headers: list[tuple[str, bytes | None]],
    producer_config: dict[str, object],
    print_offsets: bool,
) -> int:
    """Send every line of ``stream`` to ``topic``; return how many records were acknowledged."""
    from odradek.client.errors import ClientError, KafkaError
    from odradek.client.producer import Producer, RecordMetadata

    out = sys.stdout
    acknowledged = 0
    failure: CliError | None = None
    # Records in input order; settled (counted, printed, checked) strictly in that order as
    # their acknowledgements arrive, so --print-offsets lines appear while typing.
    pending: collections.deque[tuple[int, asyncio.Future[RecordMetadata]]] = collections.deque()

    def settle_done(_: object = None) -> None:
        nonlocal acknowledged, failure
        printed = False
        while pending and pending[0][1].done():
            number, future = pending.popleft()
            try:
                metadata = future.result()
            except (KafkaError, ClientError) as exc:
                if failure is None:
                    failure = CliError(f"record from line {number} was not written: {exc}")
                continue
            acknowledged += 1
            if print_offsets:
                out.write(f"{metadata.topic}\t{metadata.partition}\t{metadata.offset}\n")
                printed = True
        if printed:
            out.flush()

    try:
        producer = Producer(
            bootstrap_server,
            security=client_security(),
            **producer_config,  # type: ignore[arg-type]
        )
    except ValueError as exc:
        raise CliError(str(exc)) from None
    bad_line: CliError | None = None
    async with producer:
        await _check_topic(producer, topic, partition)
        number = 0
        async for line in read_lines(stream):
            number += 1
            try:
                key, value = split_line(line, number, key_separator, null_marker)
                future = await producer.send(
                    topic, value, key, partition=partition, headers=headers
                )
            except CliError as exc:
                bad_line = exc
                break
            except (ValueError, KafkaError) as exc:
                bad_line = CliError(f"line {number}: {exc}")
                break
            pending.append((number, future))
            future.add_done_callback(settle_done)
            if failure is not None:
                break
            if len(pending) >= MAX_PENDING:
                await asyncio.wait([pending[0][1]])
        # Lines before a bad one are still delivered (as kafka-console-producer's close
        # does), so the message can say exactly what reached the topic.
        await producer.flush()
        # Wait on the records themselves too: what counts is each record's own outcome.
        if pending:
            await asyncio.wait([future for _, future in pending])
        settle_done()
    if failure is not None:
        # An earlier line than any bad one: records go out in input order.
        raise CliError(f"{failure.message}; {_records(acknowledged)} written")
    if bad_line is not None:
        raise CliError(f"{bad_line.message}; {_records(acknowledged)} sent before it")
    return acknowledged


@click.command("produce")
@click.argument("topic")
@bootstrap_option
@command_config_alias("--producer.config", "kafka-console-producer")
@click.option(
    "--key-separator",
    metavar="SEP",
    help="Split each line at the first SEP into key and value (escapes like \\t work).",
)
@click.option(
    "--null-marker",
    metavar="TEXT",
    help="A key or value equal to TEXT is sent as null (a tombstone).",
)
@click.option(
    "--partition",
    "-p",
    type=click.IntRange(min=0),
    help="Send every record to this partition (default: by key hash, sticky for no key).",
)
@click.option(
    "--acks",
    type=click.Choice(["0", "1", "all", "-1"]),
    default="all",
    show_default=True,
    help="Acknowledgements to wait for (acks).",
)
@click.option(
    "--compression",
    type=click.Choice(["none", "gzip", "snappy", "lz4", "zstd"]),
    default="none",
    show_default=True,
    help="Batch compression (compression.type).",
)
@click.option(
    "--header",
    "header_args",
    multiple=True,
    metavar="KEY=VALUE",
    help="A header on every record; repeatable. KEY alone gives a null value.",
)
@click.option("--linger-ms", type=click.IntRange(min=0), default=5, show_default=True)
@click.option("--batch-size", type=click.IntRange(min=0), default=16384, show_default=True)
@click.option("--max-request-size", type=click.IntRange(min=1), default=1048576, show_default=True)
@click.option(
    "--delivery-timeout-ms",
    type=click.IntRange(min=1),
    default=120000,
    show_default=True,
    help="Give up on a record not acknowledged after this long (delivery.timeout.ms).",
)
@click.option(
    "--print-offsets",
    is_flag=True,
    help="Print 'topic<TAB>partition<TAB>offset' for every acknowledged record.",
)
def produce(
    topic: str,
    bootstrap_server: str,
    key_separator: str | None,
    null_marker: str | None,
    partition: int | None,
    acks: str,
    compression: str,
    header_args: tuple[str, ...],
    linger_ms: int,
    batch_size: int,
    max_request_size: int,
    delivery_timeout_ms: int,
    print_offsets: bool,
) -> None:
    """Send lines from standard input to TOPIC, one record per line."""
    check_bootstrap(bootstrap_server)
    separator = unescape(key_separator, "--key-separator") if key_separator is not None else None
    if separator == "":
        raise CliError("--key-separator must not be empty")
    request_timeout_ms = min(30000, max(1, delivery_timeout_ms - linger_ms))
    run(
        produce_lines(
            bootstrap_server,
            topic,
            sys.stdin.buffer,
            key_separator=None if separator is None else separator.encode(),
            null_marker=None if null_marker is None else null_marker.encode(),
            partition=partition,
            headers=parse_headers(header_args),
            producer_config={
                "acks": "all" if acks == "-1" else (acks if acks == "all" else int(acks)),
                "compression_type": compression,
                "linger_ms": linger_ms,
                "batch_size": batch_size,
                "max_request_size": max_request_size,
                "delivery_timeout_ms": delivery_timeout_ms,
                "request_timeout_ms": request_timeout_ms,
                "client_id": "odradek-cli-producer",
            },
            print_offsets=print_offsets,
        )
    )


def register(cli: click.Group) -> None:
    cli.add_command(produce)
