"""Unit tests of the perf tools' pieces: Kafka's line formats, percentiles, properties files,
SimpleDateFormat patterns, producer property parsing."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from odradek.cli.errors import CliError
from odradek.cli.perf import java_fixed
from odradek.cli.perf_consume import (
    Totals,
    consumer_config,
    java_date_format,
    progress_line,
    summary_line,
)
from odradek.cli.perf_produce import Payloads, parse_producer_props
from odradek.cli.perf_produce_stats import Stats, percentiles


def test_percentiles_are_kafkas_index_rule() -> None:
    sample = list(range(1, 1001))  # 1..1000 ms
    assert percentiles(sample, 0.5, 0.95, 0.99, 0.999) == [501, 951, 991, 1000]
    assert percentiles([7], 0.5, 0.999) == [7, 7]
    assert percentiles([], 0.5) == [0]


def test_stats_window_and_total_lines() -> None:
    lines: list[str] = []
    stats = Stats(4, 1000, emit=lines.append, start=100.0)
    stats.window_start = 100.0
    stats.record(2, 1024 * 1024, 100.5)
    stats.record(4, 1024 * 1024, 101.0)  # 1 s into the window: printed
    assert lines == [
        "2 records sent, 2.0 records/sec (2.00 MB/sec), 3.0 ms avg latency, 4.0 ms max latency."
    ]
    stats.record(6, 0, 101.2)
    assert stats.total_line(102.0) == (
        "3 records sent, 1.500000 records/sec (1.00 MB/sec), 4.00 ms avg latency, "
        "6.00 ms max latency, 4 ms 50th, 6 ms 95th, 6 ms 99th, 6 ms 99.9th."
    )
    empty = Stats(1, 1000, start=0.0)
    assert "NaN ms avg latency" in empty.total_line(1.0)


def test_latency_sampling_beyond_half_a_million() -> None:
    stats = Stats(1_500_000, 10**9, start=0.0)
    assert stats.sampling == 3
    for i in range(9):
        stats.record(i, 1, 0.0)
    assert stats.latencies == [0, 3, 6]


def test_java_fixed() -> None:
    assert java_fixed(1.23456, 4) == "1.2346"
    assert java_fixed(float("nan"), 2) == "NaN"
    assert java_fixed(float("inf"), 4) == "Infinity"


def test_consumer_lines() -> None:
    fmt = java_date_format("HH:mm:ss")
    totals = Totals(messages=2000, bytes=2 * 1024 * 1024)
    line = summary_line(totals, 0, 2000, 500, fmt)
    parts = line.split(", ")
    assert parts[2:] == [
        "2.0000",
        "1.0000",
        "2000",
        "1000.0000",
        "500",
        "1500",
        "1.3333",
        "1333.3333",
    ]
    zero = summary_line(Totals(), 0, 0, 0, fmt).split(", ")
    assert zero[3] == "NaN" and zero[5] == "NaN"
    progress = progress_line(totals, 1024 * 1024, 1000, 1000, 2000, fmt, 0).split(", ")
    assert progress[1:] == [
        "0",
        "2.0000",
        "1.0000",
        "2000",
        "1000.0000",
        "0",
        "1000",
        "1.0000",
        "1000.0000",
    ]


def test_java_date_format() -> None:
    ms = 1_700_000_000_123
    from datetime import datetime

    moment = datetime.fromtimestamp(ms / 1000)
    assert java_date_format("yyyy-MM-dd HH:mm:ss:SSS")(ms) == moment.strftime(
        "%Y-%m-%d %H:%M:%S:123"
    )
    assert java_date_format("yy 'at' H")(ms) == moment.strftime("%y at ") + str(moment.hour)
    assert java_date_format("''")(ms) == "'"
    with pytest.raises(CliError, match="pattern letter 'Q'"):
        java_date_format("QQ")
    with pytest.raises(CliError, match="unterminated quote"):
        java_date_format("'abc")


def test_config_files_are_read_as_java_properties(tmp_path: Path) -> None:
    """--producer.config / --consumer.config go through the one properties parser
    (odradek.properties, tests/test_properties.py): escapes and continuations as Java."""
    path = tmp_path / "p.properties"
    path.write_text(
        "# comment\n! also a comment\n\nacks=all\nlinger.ms : 5\nclient.id perf\\u002d1\n"
        "long.value = a\\\n    b\nempty=\n"
    )
    _, kwargs, _ = parse_producer_props((), str(path), "127.0.0.1:1")
    assert kwargs["client_id"] == "perf-1"
    assert kwargs["linger_ms"] == 5
    config, warnings = consumer_config(path, 1024)
    assert config["client_id"] == "perf-1"
    assert any("long.value" in warning for warning in warnings)
    with pytest.raises(CliError, match=r"--producer\.config .*cannot read config file"):
        parse_producer_props((), str(tmp_path / "missing"), "127.0.0.1:1")
    path.write_bytes(b"acks=\xff\n")
    with pytest.raises(CliError, match=r"--consumer\.config .*not a text properties file"):
        consumer_config(path, 1024)


def test_producer_props(tmp_path: Path) -> None:
    config = tmp_path / "c.properties"
    config.write_text("bootstrap.servers=h1:1\nacks=0\nlinger.ms=7\n")
    bootstrap, kwargs, warnings = parse_producer_props(
        ("acks=all", "enable.idempotence=false", "foo.bar=1", "value.serializer=x"),
        str(config),
        None,
    )
    assert bootstrap == "h1:1"
    assert kwargs == {
        "client_id": "perf-producer-client",
        "acks": "all",
        "linger_ms": 7,
        "enable_idempotence": False,
    }
    assert warnings == ["The configuration 'foo.bar' was supplied but isn't a known config."]
    assert parse_producer_props((), None, "h2:2")[0] == "h2:2"
    assert parse_producer_props((), None, None)[0] == "127.0.0.1:9092"
    with pytest.raises(CliError, match="Invalid property: a=b=c"):
        parse_producer_props(("a=b=c",), None, None)
    with pytest.raises(CliError, match=r"Invalid value x for configuration linger\.ms"):
        parse_producer_props(("linger.ms=x",), None, None)
    with pytest.raises(CliError, match="--bootstrap-server"):
        parse_producer_props(("bootstrap.servers=:",), None, None)


def test_payloads() -> None:
    letters = Payloads(50, [], False)
    first, second = letters.next(0), letters.next(1)
    assert len(first) == 50 and first.isalpha() and first.isupper() and first != second
    assert Payloads(None, [], True).next(41) == b"41"
    chosen = Payloads(None, [b"a", b"b"], False)
    assert {chosen.next(i) for i in range(50)} == {b"a", b"b"}


def test_stats_lines_go_to_emit_only() -> None:
    out = io.StringIO()
    stats = Stats(2, 0, emit=lambda line: out.write(line + "\n"), start=0.0)
    stats.print_windows = False
    stats.record(1, 1, 1.0)
    assert out.getvalue() == ""
