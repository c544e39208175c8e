"""``odradek perf produce``: kafka-producer-perf-test (Kafka's ProducerPerformance).

Sends ``--num-records`` records of ``--record-size`` random upper-case letters (or payloads
picked at random from ``--payload-file``, or increasing integers with
``--payload-monotonic``), at most ``--throughput`` records per second (-1: no limit), and
prints Kafka's lines::

    5001 records sent, 1000.2 records/sec (0.95 MB/sec), 2.1 ms avg latency, 9.0 ms max latency.
    10000 records sent, 999.800040 records/sec (0.95 MB/sec), 2.03 ms avg latency, \
9.00 ms max latency, 2 ms 50th, 3 ms 95th, 5 ms 99th, 9 ms 99.9th.

A window line every ``--reporting-interval`` ms (Kafka: always 5000), the total at the end.
Latency is per record, from the call to send until its acknowledgement arrives (Kafka's
delivery callback); only acknowledged records are counted, like Kafka. Producer settings
use the Java names, through ``--producer-props k=v ...`` or ``--producer.config FILE``
(the former wins): ``acks``, ``compression.type``, ``linger.ms``, ``batch.size`` ...
"""

from __future__ import annotations

import asyncio
import functools
import random
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from odradek.cli.command_config import note_config_file, read_client_properties, unused_warning
from odradek.cli.errors import CliError
from odradek.cli.output import DEFAULT_BOOTSTRAP, check_bootstrap, run, unescape
from odradek.cli.perf import LiveDisplay, java_div, java_fixed, take_security
from odradek.cli.perf_produce_stats import Stats, print_metric_lines

if TYPE_CHECKING:
    from odradek.client.producer import RecordMetadata

# Java producer property -> (Producer keyword, converter). Anything else is warned about and
# ignored, as the Java client does with a config it does not know.
_INT = int


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError(text)
    return lowered == "true"


def _acks(text: str) -> int | str:
    value = text.strip().lower()
    if value in ("all", "-1"):
        return "all"
    if value in ("0", "1"):
        return int(value)
    raise ValueError(text)


PRODUCER_PROPS: dict[str, tuple[str, Any]] = {
    "acks": ("acks", _acks),
    "compression.type": ("compression_type", str),
    "linger.ms": ("linger_ms", _INT),
    "batch.size": ("batch_size", _INT),
    "max.request.size": ("max_request_size", _INT),
    "enable.idempotence": ("enable_idempotence", _bool),
    "retries": ("retries", _INT),
    "delivery.timeout.ms": ("delivery_timeout_ms", _INT),
    "request.timeout.ms": ("request_timeout_ms", _INT),
    "retry.backoff.ms": ("retry_backoff_ms", _INT),
    "max.in.flight.requests.per.connection": ("max_in_flight_requests_per_connection", _INT),
    "buffer.memory": ("buffer_memory", _INT),
    "max.block.ms": ("max_block_ms", _INT),
    "partitioner.class": ("partitioner", str),
    "client.id": ("client_id", str),
}
# Set by the tool itself in Kafka too; accepted without a warning.
IGNORED_PROPS = frozenset({"key.serializer", "value.serializer"})

DEFAULT_REPORTING_INTERVAL_MS = 5000


def parse_producer_props(
    props_args: tuple[str, ...], config_file: str | None, bootstrap_option: str | None
) -> tuple[str, dict[str, Any], list[str]]:
    """(bootstrap servers, Producer keywords, warnings) from the two property sources."""
    props: dict[str, str] = {}
    if config_file is not None:
        props.update(read_client_properties(Path(config_file), "--producer.config"))
    for prop in props_args:
        pieces = prop.split("=")
        if len(pieces) != 2:
            raise CliError(f"Invalid property: {prop}")
        props[pieces[0]] = pieces[1]
    bootstrap = props.pop("bootstrap.servers", None) or bootstrap_option or DEFAULT_BOOTSTRAP
    check_bootstrap(bootstrap)
    config: dict[str, Any] = {"client_id": "perf-producer-client"}
    warnings = []
    security = take_security(props, "--producer.config")
    if security is not None:
        config["security"] = security
    for name, raw in props.items():
        if name in IGNORED_PROPS:
            continue
        if name not in PRODUCER_PROPS:
            warnings.append(unused_warning(name))
            continue
        keyword, convert = PRODUCER_PROPS[name]
        try:
            config[keyword] = convert(raw)
        except ValueError:
            raise CliError(f"Invalid value {raw} for configuration {name}") from None
    return bootstrap, config, warnings


def read_payload_file(path: str, delimiter: str) -> list[bytes]:
    """Payloads split at ``delimiter`` (empty pieces dropped, as Java's Scanner does)."""
    file = Path(path)
    try:
        if not file.exists() or file.stat().st_size == 0:
            raise CliError("File does not exist or empty file provided.")
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"--payload-file: cannot read {path}: {exc}") from None
    return [piece.encode() for piece in text.split(delimiter) if piece]


class Payloads:
    """The value of each record, chosen the way Kafka's tool chooses it."""

    def __init__(self, record_size: int | None, payload_list: list[bytes], monotonic: bool) -> None:
        self._rng = random.Random(0)
        self._size = record_size
        self._list = payload_list
        self._monotonic = monotonic

    def next(self, i: int) -> bytes:
        if self._list:
            return self._list[self._rng.randrange(len(self._list))]
        if self._size is not None:
            # Random upper-case letters, new for every record, as Kafka does.
            return self._rng.randbytes(self._size).translate(_LETTERS)
        return str(i).encode()


_LETTERS = bytes(65 + (b % 26) for b in range(256))


async def run_producer_perf(
    *,
    bootstrap: str,
    config: dict[str, Any],
    topic: str,
    num_records: int,
    payloads: Payloads,
    throughput: float,
    warmup_records: int,
    reporting_interval_ms: int,
    print_metrics: bool,
) -> int:
    """Run the test; return how many records failed."""
    from odradek.cli.produce import _check_topic
    from odradek.client.errors import ClientError, KafkaError
    from odradek.client.producer import Producer

    out = sys.stdout
    display = LiveDisplay("producing", num_records)
    failures = 0
    first_error: str | None = None
    steady: Stats | None = None
    try:
        producer = Producer(bootstrap, **config)
    except ValueError as exc:
        raise CliError(str(exc)) from None

    def on_done(
        future: asyncio.Future[RecordMetadata],
        *,
        sent_at: float,
        size: int,
        trackers: tuple[Stats, ...],
    ) -> None:
        nonlocal failures, first_error
        now = time.monotonic()
        if future.cancelled() or future.exception() is not None:
            failures += 1
            if first_error is None:
                first_error = "cancelled" if future.cancelled() else str(future.exception())
            return
        latency = int((now - sent_at) * 1000)
        for tracker in trackers:
            tracker.record(latency, size, now)

    async with producer:
        await _check_topic(producer, topic, None)
        if warmup_records > 0:
            out.write(
                f"Warmup first {warmup_records} records. Steady state results will print "
                "after the complete test summary.\n"
            )
        stats = Stats(num_records, reporting_interval_ms, emit=display.print)
        start = stats.start
        pending: set[asyncio.Future[RecordMetadata]] = set()
        refresher = (
            asyncio.create_task(refresh_display(display, stats)) if display.enabled else None
        )
        with display:
            for i in range(num_records):
                payload = payloads.next(i)
                sent_at = time.monotonic()
                if warmup_records > 0 and i == warmup_records:
                    steady = Stats(
                        num_records - warmup_records,
                        reporting_interval_ms,
                        steady_state=True,
                        emit=display.print,
                    )
                    stats.print_windows = False
                trackers = (stats,) if steady is None else (stats, steady)
                try:
                    future = await producer.send(topic, payload)
                except (KafkaError, ClientError, ValueError) as exc:
                    # Kafka hands such errors to the callback: the record is not counted.
                    failures += 1
                    first_error = first_error or str(exc)
                    continue
                pending.add(future)
                future.add_done_callback(pending.discard)
                future.add_done_callback(
                    functools.partial(
                        on_done, sent_at=sent_at, size=len(payload), trackers=trackers
                    )
                )
                if throughput >= 0:
                    # Pace to the target rate: record i is due (i + 1) / throughput s in.
                    ahead = start + (i + 1) / throughput - time.monotonic()
                    if ahead > 0:
                        await asyncio.sleep(ahead)
                        continue
                if i % 512 == 511:
                    # send() rarely has to wait; let the sender and the callbacks run.
                    await asyncio.sleep(0)
            await producer.flush()
            if pending:
                await asyncio.wait(list(pending))
            if refresher is not None:
                refresher.cancel()
        now = time.monotonic()
        out.write(stats.total_line(now) + "\n")
        if steady is not None:
            out.write(steady.total_line(now) + "\n")
        if print_metrics:
            print_metric_lines(out, stats, failures, config.get("client_id", ""), now)
        out.flush()
    if failures:
        click.echo(f"error: {failures} records were not written; first: {first_error}", err=True)
    return failures


async def refresh_display(display: LiveDisplay, stats: Stats) -> None:
    """Show acknowledged records, rate and average latency a few times a second."""
    while True:
        elapsed = max(time.monotonic() - stats.start, 1e-9)
        display.update(
            stats.count,
            f"{stats.count / elapsed:,.0f} records/sec, "
            f"{java_fixed(java_div(stats.total_latency, stats.count), 1)} ms avg latency",
        )
        await asyncio.sleep(0.25)


@click.command("produce", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--topic", required=True, metavar="TOPIC", help="Produce messages to this topic.")
@click.option(
    "--num-records",
    required=True,
    type=int,
    metavar="NUM-RECORDS",
    help="Number of messages to produce.",
)
@click.option("--record-size", type=int, metavar="RECORD-SIZE", help="Message size in bytes.")
@click.option(
    "--payload-file",
    metavar="PAYLOAD-FILE",
    help="UTF-8 file of payloads; each record gets one chosen at random.",
)
@click.option(
    "--payload-monotonic", is_flag=True, help="Payload is an increasing integer (0, 1, ...)."
)
@click.option(
    "--payload-delimiter",
    default="\\n",
    show_default=True,
    metavar="PAYLOAD-DELIMITER",
    help="Separator of the payloads in --payload-file.",
)
@click.option(
    "--throughput",
    required=True,
    type=float,
    metavar="THROUGHPUT",
    help="Throttle to about THROUGHPUT messages/sec; -1 for no limit.",
)
@click.option(
    "--producer-props",
    "producer_props",
    multiple=True,
    metavar="PROP-NAME=PROP-VALUE ...",
    help="Producer properties (Java names); they take precedence over --producer.config.",
)
@click.option(
    "--producer.config",
    "--command-config",
    "producer_config",
    metavar="CONFIG-FILE",
    help="Producer config properties file (security.*, sasl.*, ssl.* included).",
)
@click.option(
    "--bootstrap-server",
    "bootstrap_server",
    metavar="HOST:PORT[,...]",
    help="Broker(s), when bootstrap.servers is not among the properties "
    f"(default {DEFAULT_BOOTSTRAP}).",
)
@click.option("--print-metrics", is_flag=True, help="Print metrics at the end of the test.")
@click.option(
    "--warmup-records",
    type=int,
    default=0,
    show_default=True,
    metavar="WARMUP-RECORDS",
    help="Records left out of the steady-state statistics (an extra summary line).",
)
@click.option(
    "--reporting-interval",
    type=click.IntRange(min=1),
    default=DEFAULT_REPORTING_INTERVAL_MS,
    show_default=True,
    metavar="MS",
    help="Interval between the window lines.",
)
@click.argument("more_props", nargs=-1, metavar="")
def produce(
    topic: str,
    num_records: int,
    record_size: int | None,
    payload_file: str | None,
    payload_monotonic: bool,
    payload_delimiter: str,
    throughput: float,
    producer_props: tuple[str, ...],
    producer_config: str | None,
    bootstrap_server: str | None,
    print_metrics: bool,
    warmup_records: int,
    reporting_interval: int,
    more_props: tuple[str, ...],
) -> None:
    """Measure producer throughput and latency (kafka-producer-perf-test)."""
    # `--producer-props a=1 b=2`: click takes one value per option, the rest arrive here.
    if more_props and not producer_props:
        raise CliError(f"unexpected argument {more_props[0]!r}")
    chosen = [
        name
        for name, given in (
            ("--record-size", record_size is not None),
            ("--payload-file", payload_file is not None),
            ("--payload-monotonic", payload_monotonic),
        )
        if given
    ]
    if len(chosen) != 1:
        raise CliError(
            "exactly one of --record-size, --payload-file or --payload-monotonic is required"
            + (f" (got {' and '.join(chosen)})" if chosen else "")
        )
    if num_records <= 0:
        raise CliError("--num-records should be greater than zero")
    if warmup_records >= num_records:
        raise CliError(
            "The value for --warmup-records must be strictly fewer than the number of records "
            "in the test, --num-records."
        )
    if record_size is not None and record_size <= 0:
        raise CliError("--record-size should be greater than zero")
    if throughput == 0 or throughput != throughput:
        raise CliError("--throughput must be positive, or -1 for no limit")
    delimiter = unescape(payload_delimiter, "--payload-delimiter")
    payload_list = read_payload_file(payload_file, delimiter) if payload_file else []
    if payload_file:
        print(f"Reading payloads from: {Path(payload_file).absolute()}")
        print(f"Number of messages read: {len(payload_list)}")
        if not payload_list:
            raise CliError("--payload-file holds no payloads")
    note_config_file(producer_config, "--producer.config")
    bootstrap, config, warnings = parse_producer_props(
        producer_props + more_props, producer_config, bootstrap_server
    )
    for warning in warnings:
        click.echo(f"WARN {warning}", err=True)
    failures = run(
        run_producer_perf(
            bootstrap=bootstrap,
            config=config,
            topic=topic,
            num_records=num_records,
            payloads=Payloads(record_size, payload_list, payload_monotonic),
            throughput=throughput,
            warmup_records=max(warmup_records, 0),
            reporting_interval_ms=reporting_interval,
            print_metrics=print_metrics,
        )
    )
    if failures:
        sys.exit(1)
