"""The CLI's pure helpers: argument parsing, the console-consumer line format, line reading."""

from __future__ import annotations

import asyncio
import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.cli.errors import CliError
from odradek.cli.output import (
    RecordFormatter,
    parse_headers,
    parse_key_value,
    parse_key_values,
    table,
    timestamp_type_name,
    unescape,
)
from odradek.cli.produce import read_lines, split_line


def fmt(formatter: RecordFormatter, **overrides: object) -> bytes:
    record: dict[str, object] = {
        "partition": 1,
        "offset": 7,
        "timestamp_ms": 1700000000123,
        "timestamp_type": 0,
        "key": b"k",
        "value": b"v",
        "headers": [("h1", b"a"), ("h2", None)],
    }
    record.update(overrides)
    return formatter.format(**record)  # type: ignore[arg-type]


class TestRecordFormatter:
    def test_default_prints_the_value_only(self) -> None:
        assert fmt(RecordFormatter()) == b"v\n"

    def test_every_field_in_kafkas_order(self) -> None:
        everything = RecordFormatter(
            print_timestamp=True,
            print_partition=True,
            print_offset=True,
            print_headers=True,
            print_key=True,
        )
        assert (
            fmt(everything)
            == b"CreateTime:1700000000123\tPartition:1\tOffset:7\th1:a,h2:null\tk\tv\n"
        )

    def test_nulls_and_missing_parts(self) -> None:
        formatter = RecordFormatter(print_timestamp=True, print_headers=True, print_key=True)
        line = fmt(formatter, key=None, value=None, headers=[], timestamp_ms=-1)
        assert line == b"NO_TIMESTAMP\tNO_HEADERS\tnull\tnull\n"

    def test_log_append_time(self) -> None:
        line = fmt(RecordFormatter(print_timestamp=True, print_value=False), timestamp_type=1)
        assert line == b"LogAppendTime:1700000000123\n"

    def test_properties_like_kafka_console_consumer(self) -> None:
        formatter = RecordFormatter().with_properties(
            {
                "print.key": "true",
                "key.separator": " => ",
                "line.separator": "\\r\\n",
                "null.literal": "<nil>",
                "print.headers": "TRUE",
                "headers.separator": "|",
            }
        )
        assert fmt(formatter, key=None) == b"h1:a|h2:<nil> => <nil> => v\r\n"
        assert fmt(formatter.with_properties({"print.value": "false"}), headers=()) == (
            b"NO_HEADERS => k\r\n"
        )

    @pytest.mark.parametrize(
        "properties",
        [{"print.colour": "true"}, {"print.key": "maybe"}, {"key.separator": "\\x"}],
    )
    def test_bad_properties_are_cli_errors(self, properties: dict[str, str]) -> None:
        with pytest.raises(CliError):
            RecordFormatter().with_properties(properties)

    @given(
        key=st.binary(max_size=40).filter(lambda b: b"\t" not in b),
        value=st.binary(max_size=200).filter(lambda b: b"\n" not in b),
    )
    @settings(max_examples=200)
    def test_key_and_value_lines_split_back_the_way_produce_reads_them(
        self, key: bytes, value: bytes
    ) -> None:
        line = fmt(RecordFormatter(print_key=True), key=key, value=value)
        assert line.endswith(b"\n")
        assert split_line(line[:-1], 1, b"\t", None) == (key, value)


@pytest.mark.parametrize(
    ("given_type", "name"),
    [
        (0, "CreateTime"),
        (1, "LogAppendTime"),
        (-1, None),
        ("CreateTime", "CreateTime"),
        (None, None),
    ],
)
def test_timestamp_type_names(given_type: object, name: str | None) -> None:
    assert timestamp_type_name(given_type) == name


class TestArgumentParsing:
    def test_key_value_keeps_equals_and_commas_in_the_value(self) -> None:
        assert parse_key_value("cleanup.policy=compact,delete", "--config") == (
            "cleanup.policy",
            "compact,delete",
        )
        assert parse_key_value("a==b", "--config") == ("a", "=b")
        assert parse_key_value("empty=", "--config") == ("empty", "")

    @pytest.mark.parametrize("bad", ["novalue", "=value", " =x"])
    def test_key_value_needs_a_key_and_equals(self, bad: str) -> None:
        with pytest.raises(CliError, match="--config expects KEY=VALUE"):
            parse_key_value(bad, "--config")

    def test_repeated_key_is_an_error(self) -> None:
        assert parse_key_values(["a=1", "b=2"], "--config") == {"a": "1", "b": "2"}
        with pytest.raises(CliError, match="more than once"):
            parse_key_values(["a=1", "a=2"], "--config")

    def test_headers_keep_order_and_allow_null_and_repeats(self) -> None:
        assert parse_headers(["a=1", "flag", "a=x=y", "e="]) == [
            ("a", b"1"),
            ("flag", None),
            ("a", b"x=y"),
            ("e", b""),
        ]
        with pytest.raises(CliError):
            parse_headers(["=v"])

    def test_unescape(self) -> None:
        assert unescape("\\t|\\n|\\\\|\\0|plain", "--x") == "\t|\n|\\|\0|plain"
        for bad in ("\\", "\\q"):
            with pytest.raises(CliError, match="unknown escape"):
                unescape(bad, "--x")


class TestSplitLine:
    def test_key_separator_splits_at_the_first_occurrence(self) -> None:
        assert split_line(b"k:v:w", 1, b":", None) == (b"k", b"v:w")
        assert split_line(b":v", 1, b":", None) == (b"", b"v")

    def test_missing_separator_names_the_line(self) -> None:
        with pytest.raises(CliError, match="line 12: no key separator"):
            split_line(b"no separator", 12, b":", None)

    def test_null_marker_makes_tombstones(self) -> None:
        assert split_line(b"k:NULL", 1, b":", b"NULL") == (b"k", None)
        assert split_line(b"NULL:v", 1, b":", b"NULL") == (None, b"v")
        assert split_line(b"NULL", 1, None, b"NULL") == (None, None)
        assert split_line(b"value", 1, None, None) == (None, b"value")


def collect_lines(data: bytes) -> list[bytes]:
    async def collect() -> list[bytes]:
        return [line async for line in read_lines(io.BytesIO(data))]

    return asyncio.run(collect())


class TestReadLines:
    def test_line_endings(self) -> None:
        assert collect_lines(b"") == []
        assert collect_lines(b"a") == [b"a"]
        assert collect_lines(b"a\n") == [b"a"]
        assert collect_lines(b"a\r\nb\n\nc") == [b"a", b"b", b"", b"c"]

    def test_lines_spanning_chunks(self) -> None:
        long_line = b"x" * 200_000
        assert collect_lines(long_line + b"\n" + long_line) == [long_line, long_line]

    @given(
        st.lists(
            st.binary(max_size=50).filter(lambda b: b"\n" not in b and not b.endswith(b"\r")),
            max_size=50,
        )
    )
    @settings(max_examples=50, deadline=None)
    def test_round_trip(self, lines: list[bytes]) -> None:
        data = b"".join(line + b"\n" for line in lines)
        assert collect_lines(data) == lines


def test_table_aligns_columns() -> None:
    text = table(["GROUP", "STATE"], [["a-long-name", "Stable"], ["b", "Empty"]])
    assert text.splitlines() == [
        "GROUP        STATE",
        "a-long-name  Stable",
        "b            Empty",
    ]
