"""``odradek perf consume``: kafka-consumer-perf-test (Kafka's ConsumerPerformance).

Reads ``--messages`` records from ``--topic`` (or every topic matching ``--include``) and
prints Kafka's header and summary line::

    start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, \
rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
    2026-11-24 01:02:03:456, 2026-11-24 01:02:04:789, 9.5367, 7.1536, 100000, 75018.7547, \
12, 1321, 7.2193, 75700.2271

With ``--show-detailed-stats`` a line per ``--reporting-interval`` instead (first fields
``time, threadId``), and no summary, as in Kafka. It stops after ``--messages`` records or
after ``--timeout`` ms without one (then the WARNING line Kafka prints).

odradek's client assigns partitions itself instead of joining ``--group`` as a member: it
starts every partition at the group's committed offset (else at the earliest offset, or the
latest with ``--from-latest``) and commits its final positions for the group on exit, as the
Java consumer's auto-commit does on close. ``rebalance.time.ms`` is the time that setup took
(metadata, committed offsets, starting positions): Kafka's join time has no other meaning
without a membership protocol.
"""

from __future__ import annotations

import random
import re
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from odradek.cli.command_config import (
    command_config_path,
    note_config_file,
    read_client_properties,
    unused_warning,
)
from odradek.cli.errors import CliError
from odradek.cli.output import bootstrap_option, check_bootstrap, run
from odradek.cli.perf import LiveDisplay, java_div, java_fixed, take_security

if TYPE_CHECKING:
    from odradek.client.fetcher import Consumer

HEADER_TAIL = ", rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"
SUMMARY_HEADER = (
    "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec"
    + HEADER_TAIL
)
DETAILED_HEADER = "time, threadId, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec" + (
    HEADER_TAIL
)
POLL_MS = 100  # Kafka's tool polls with this timeout
MB = 1024 * 1024

# Java consumer property -> (Consumer keyword, converter); others warned about and ignored.
CONSUMER_PROPS: dict[str, tuple[str, Any]] = {
    "fetch.min.bytes": ("fetch_min_bytes", int),
    "fetch.max.wait.ms": ("fetch_max_wait_ms", int),
    "fetch.max.bytes": ("fetch_max_bytes", int),
    "max.partition.fetch.bytes": ("max_partition_fetch_bytes", int),
    "isolation.level": ("isolation_level", str),
    "request.timeout.ms": ("request_timeout_ms", int),
    "retry.backoff.ms": ("retry_backoff_ms", int),
    "client.id": ("client_id", str),
}
# Settings the tool itself decides (or that have no meaning for odradek's client).
IGNORED_PROPS = frozenset(
    {"key.deserializer", "value.deserializer", "group.id", "auto.offset.reset", "check.crcs"}
)


def java_date_format(pattern: str) -> Any:
    """A formatter of epoch milliseconds for a SimpleDateFormat pattern (the common letters:
    y M d H h m s S a E, and 'quoted' text)."""
    parts: list[Any] = []
    pos = 0
    while pos < len(pattern):
        char = pattern[pos]
        if char == "'":
            end = pattern.find("'", pos + 1)
            if end < 0:
                raise CliError(f"--date-format: unterminated quote in {pattern!r}")
            parts.append(pattern[pos + 1 : end] or "'")
            pos = end + 1
            continue
        if not char.isalpha():
            parts.append(char)
            pos += 1
            continue
        run_len = 1
        while pos + run_len < len(pattern) and pattern[pos + run_len] == char:
            run_len += 1
        pos += run_len
        parts.append(_date_field(char, run_len, pattern))

    def format_ms(ms: int) -> str:
        moment = datetime.fromtimestamp(ms / 1000)
        millis = ms % 1000
        return "".join(p if isinstance(p, str) else p(moment, millis) for p in parts)

    return format_ms


def _date_field(letter: str, width: int, pattern: str) -> Any:
    def number(get: Any) -> Any:
        return lambda d, ms: str(get(d, ms)).zfill(width)

    fields = {
        "y": (lambda d, ms: f"{d.year % 100:02d}") if width == 2 else number(lambda d, ms: d.year),
        "M": number(lambda d, ms: d.month),
        "d": number(lambda d, ms: d.day),
        "H": number(lambda d, ms: d.hour),
        "h": number(lambda d, ms: d.hour % 12 or 12),
        "m": number(lambda d, ms: d.minute),
        "s": number(lambda d, ms: d.second),
        "S": number(lambda d, ms: ms),
        "a": lambda d, ms: "AM" if d.hour < 12 else "PM",
        "E": lambda d, ms: d.strftime("%a" if width < 4 else "%A"),
    }
    if letter not in fields:
        raise CliError(f"--date-format: pattern letter {letter!r} is not supported in {pattern!r}")
    return fields[letter]


def f4(value: float) -> str:
    return java_fixed(value, 4)


@dataclass
class Totals:
    messages: int = 0
    bytes: int = 0


async def _topics(consumer: Consumer, topic: str | None, include: str | None) -> list[str]:
    from odradek.client.errors import KafkaError

    if topic is not None:
        cluster = await consumer.client.metadata([topic])
        info = cluster.topics.get(topic)
        if info is None or info.error_code == 3:  # UNKNOWN_TOPIC_OR_PARTITION
            raise CliError(f"topic {topic!r} does not exist")
        if info.error_code and not info.partitions:
            raise KafkaError(info.error_code, f"topic {topic!r}")
        return [topic]
    assert include is not None
    try:
        pattern = re.compile(include)
    except re.error as exc:
        raise CliError(f"--include: bad regular expression {include!r}: {exc}") from None
    cluster = await consumer.client.metadata(None)
    names = sorted(name for name in cluster.topics if pattern.fullmatch(name))
    if not names:
        raise CliError(f"no topic matches --include {include!r}")
    return names


async def _assign(consumer: Consumer, topics: list[str], group: str, from_latest: bool) -> None:
    """Assign every partition of ``topics`` and position each at the group's offset."""
    from odradek.client.group_admin import GroupAdmin

    cluster = await consumer.client.metadata(topics)
    assigned = [(t, p) for t in topics for p in sorted(cluster.topics[t].partitions)]
    consumer.assign(assigned)
    async with GroupAdmin(consumer.client, client_id="perf-consumer-client") as admin:
        committed = await admin.fetch_offsets(group, assigned)
    reset = []
    for tp in assigned:
        entry = committed.get(tp)
        if entry is not None and entry.offset >= 0:
            consumer.seek(*tp, entry.offset)
        else:
            reset.append(tp)
    if reset:
        if from_latest:
            await consumer.seek_to_end(*reset)
        else:
            await consumer.seek_to_beginning(*reset)


async def _commit(consumer: Consumer, group: str) -> None:
    from odradek.client.errors import ClientError, KafkaError
    from odradek.client.group_admin import GroupAdmin

    positions = {tp: consumer.position(*tp) for tp in consumer.assignment()}
    try:
        async with GroupAdmin(consumer.client, client_id="perf-consumer-client") as admin:
            await admin.commit_offsets(group, positions)
    except (KafkaError, ClientError, ValueError) as exc:
        click.echo(f"WARN could not commit offsets for group {group!r}: {exc}", err=True)


async def run_consumer_perf(
    *,
    bootstrap: str,
    config: dict[str, Any],
    topic: str | None,
    include: str | None,
    group: str,
    from_latest: bool,
    num_messages: int,
    timeout_ms: int,
    reporting_interval_ms: int,
    detailed: bool,
    hide_header: bool,
    date_format: Any,
    print_metrics: bool,
) -> None:
    from odradek.client.fetcher import Consumer

    out = sys.stdout
    if not hide_header:
        out.write((DETAILED_HEADER if detailed else SUMMARY_HEADER) + "\n")
        out.flush()
    try:
        consumer = Consumer(bootstrap, check_crcs=False, auto_offset_reset="earliest", **config)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    display = LiveDisplay("consuming", num_messages)
    totals = Totals()
    start_ms = int(time.time() * 1000)
    try:
        await consumer.start()
        topics = await _topics(consumer, topic, include)
        await _assign(consumer, topics, group, from_latest)
        join_ms = int(time.time() * 1000) - start_ms
        join_in_round = join_ms
        # Like Kafka, the first interval starts before the join, which it then leaves out.
        last_report_ms = start_ms
        last_consumed_ms = now_ms = int(time.time() * 1000)
        last_messages = last_bytes = 0
        with display:
            while totals.messages < num_messages and now_ms - last_consumed_ms <= timeout_ms:
                records = await consumer.poll(POLL_MS, max_records=num_messages - totals.messages)
                now_ms = int(time.time() * 1000)
                if records:
                    last_consumed_ms = now_ms
                for record in records:
                    totals.messages += 1
                    totals.bytes += len(record.key or b"") + len(record.value or b"")
                if records and now_ms - last_report_ms >= reporting_interval_ms:
                    if detailed:
                        display.print(
                            progress_line(
                                totals,
                                last_bytes,
                                last_messages,
                                last_report_ms,
                                now_ms,
                                date_format,
                                join_in_round,
                            )
                        )
                    join_in_round = 0
                    last_report_ms = now_ms
                    last_messages, last_bytes = totals.messages, totals.bytes
                display.update(totals.messages, f"{totals.bytes / MB:.2f} MB")
        if totals.messages < num_messages:
            out.write(
                f"WARNING: Exiting before consuming the expected number of messages: timeout "
                f"({timeout_ms} ms) exceeded. You can use the --timeout option to increase the "
                "timeout.\n"
            )
        end_ms = int(time.time() * 1000)
        await _commit(consumer, group)
    finally:
        await consumer.close()
    if not detailed:
        out.write(summary_line(totals, start_ms, end_ms, join_ms, date_format) + "\n")
    if print_metrics:
        elapsed_s = max((end_ms - start_ms) / 1000, 1e-9)
        tags = f"{{client-id={config.get('client_id', 'perf-consumer-client')}}}"
        metrics = {
            f"consumer-fetch-manager-metrics:records-consumed-total:{tags}": totals.messages,
            f"consumer-fetch-manager-metrics:records-consumed-rate:{tags}": totals.messages
            / elapsed_s,
            f"consumer-fetch-manager-metrics:bytes-consumed-total:{tags}": totals.bytes,
            f"consumer-fetch-manager-metrics:bytes-consumed-rate:{tags}": totals.bytes / elapsed_s,
        }
        width = max(len(name) for name in metrics)
        out.write(f"\n{'Metric Name'.ljust(width)} Value\n")
        for name in sorted(metrics):
            out.write(f"{name.ljust(width)} : {float(metrics[name]):.3f}\n")
    out.flush()


def summary_line(totals: Totals, start_ms: int, end_ms: int, join_ms: int, fmt: Any) -> str:
    elapsed_s = (end_ms - start_ms) / 1000
    fetch_ms = end_ms - start_ms - join_ms
    mb = totals.bytes / MB
    return ", ".join(
        [
            fmt(start_ms),
            fmt(end_ms),
            f4(mb),
            f4(java_div(mb, elapsed_s)),
            str(totals.messages),
            f4(java_div(totals.messages, elapsed_s)),
            str(join_ms),
            str(fetch_ms),
            f4(java_div(mb, fetch_ms / 1000)),
            f4(java_div(totals.messages, fetch_ms / 1000)),
        ]
    )


def progress_line(
    totals: Totals,
    last_bytes: int,
    last_messages: int,
    start_ms: int,
    end_ms: int,
    fmt: Any,
    join_in_round: int,
) -> str:
    elapsed_ms = end_ms - start_ms
    interval_mb = (totals.bytes - last_bytes) / MB
    interval_messages = totals.messages - last_messages
    fetch_ms = elapsed_ms - join_in_round
    return ", ".join(
        [
            fmt(end_ms),
            "0",
            f4(totals.bytes / MB),
            f4(java_div(1000.0 * interval_mb, elapsed_ms)),
            str(totals.messages),
            f4(java_div(interval_messages, elapsed_ms) * 1000.0),
            str(join_in_round),
            str(fetch_ms),
            f4(0.0 if fetch_ms <= 0 else 1000.0 * interval_mb / fetch_ms),
            f4(0.0 if fetch_ms <= 0 else 1000.0 * interval_messages / fetch_ms),
        ]
    )


def consumer_config(
    config_file: str | Path | None, fetch_size: int
) -> tuple[dict[str, Any], list[str]]:
    props = (
        read_client_properties(Path(config_file), "--consumer.config") if config_file else {}
    )
    config: dict[str, Any] = {"client_id": "perf-consumer-client"}
    warnings = []
    security = take_security(props, "--consumer.config")
    if security is not None:
        config["security"] = security
    for name, raw in props.items():
        if name in IGNORED_PROPS or name == "bootstrap.servers":
            continue
        if name not in CONSUMER_PROPS:
            warnings.append(unused_warning(name))
            continue
        keyword, convert = CONSUMER_PROPS[name]
        try:
            config[keyword] = convert(raw)
        except ValueError:
            raise CliError(f"Invalid value {raw} for configuration {name}") from None
    # The tool's own --fetch-size wins over the file, as in Kafka.
    config["max_partition_fetch_bytes"] = fetch_size
    return config, warnings


@click.command("consume", context_settings={"help_option_names": ["-h", "--help"]})
@bootstrap_option
@click.option("--topic", metavar="TOPIC", help="The topic to consume from.")
@click.option("--include", metavar="REGEX", help="Consume every topic matching this regex.")
@click.option(
    "--messages",
    "num_messages",
    required=True,
    type=click.IntRange(min=1),
    metavar="COUNT",
    help="The number of messages to consume.",
)
@click.option("--group", metavar="GID", help="Group id (default perf-consumer-<random>).")
@click.option(
    "--fetch-size",
    type=click.IntRange(min=1),
    default=1024 * 1024,
    show_default=True,
    help="Bytes to fetch per partition in one request (max.partition.fetch.bytes).",
)
@click.option(
    "--from-latest",
    is_flag=True,
    help="Without a committed offset, start at the latest offset rather than the earliest.",
)
@click.option(
    "--consumer.config",
    "consumer_config_file",
    metavar="CONFIG-FILE",
    help="Consumer config properties file (security.*, sasl.*, ssl.* included).",
)
@click.option("--print-metrics", is_flag=True, help="Print metrics at the end.")
@click.option(
    "--show-detailed-stats",
    is_flag=True,
    help="A line per reporting interval instead of one summary.",
)
@click.option(
    "--timeout",
    "timeout_ms",
    type=click.IntRange(min=0),
    default=10_000,
    show_default=True,
    metavar="MS",
    help="Longest time allowed between returned records.",
)
@click.option(
    "--reporting-interval",
    type=int,
    default=5000,
    show_default=True,
    metavar="MS",
    help="Interval between progress lines (--show-detailed-stats).",
)
@click.option(
    "--date-format",
    default="yyyy-MM-dd HH:mm:ss:SSS",
    show_default=True,
    help="java.text.SimpleDateFormat pattern of the time fields.",
)
@click.option("--hide-header", is_flag=True, help="Do not print the header line.")
def consume(
    bootstrap_server: str,
    topic: str | None,
    include: str | None,
    num_messages: int,
    group: str | None,
    fetch_size: int,
    from_latest: bool,
    consumer_config_file: str | None,
    print_metrics: bool,
    show_detailed_stats: bool,
    timeout_ms: int,
    reporting_interval: int,
    date_format: str,
    hide_header: bool,
) -> None:
    """Measure consumer throughput (kafka-consumer-perf-test)."""
    check_bootstrap(bootstrap_server)
    if (topic is None) == (include is None):
        raise CliError("exactly one of --topic or --include is required")
    if group is not None and not group.strip():
        raise CliError("--group must not be empty")
    if reporting_interval <= 0:
        raise CliError("Reporting interval must be greater than 0.")
    formatter = java_date_format(date_format)
    # --command-config (Kafka 4's name for it) is the same file when --consumer.config is not.
    note_config_file(consumer_config_file, "--consumer.config")
    config, warnings = consumer_config(consumer_config_file or command_config_path(), fetch_size)
    for warning in warnings:
        click.echo(f"WARN {warning}", err=True)
    run(
        run_consumer_perf(
            bootstrap=bootstrap_server,
            config=config,
            topic=topic,
            include=include,
            group=group or f"perf-consumer-{random.randrange(100_000)}",
            from_latest=from_latest,
            num_messages=num_messages,
            timeout_ms=timeout_ms,
            reporting_interval_ms=reporting_interval,
            detailed=show_detailed_stats,
            hide_header=hide_header,
            date_format=formatter,
            print_metrics=print_metrics,
        )
    )
