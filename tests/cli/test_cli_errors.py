"""Every way a user can get an ``odradek`` command wrong ends in one line on stderr.

Runtime failures exit 1 with ``error: ...``; usage mistakes (an unknown option, a value
click rejects) exit 2 with the same one line and a pointer to ``--help``. Never a traceback.
The paths already covered next to their feature (test_produce_consume, test_topics,
test_groups_cli, test_server_cli, test_consume_group) are not repeated here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.helpers import Result, odradek
from tests.cli.test_produce_consume import create, unique
from tests.helpers.broker import BrokerProcess, free_port

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def bootstrap(shared_broker: BrokerProcess) -> str:
    return shared_broker.bootstrap


@pytest.fixture(scope="module")
def topic(bootstrap: str) -> str:
    name = unique("cli-err")
    create(bootstrap, name, partitions=2)
    return name


def usage_error(result: Result, *fragments: str) -> None:
    assert result.code == 2, f"exit {result.code}; stderr {result.stderr!r}"
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "--help'" in lines[0]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


# -- produce ---------------------------------------------------------------------------------


def test_a_bad_line_is_text_and_says_what_was_sent(bootstrap: str, topic: str) -> None:
    result = odradek("produce", topic, "-b", bootstrap, "--key-separator", ":",
                     stdin=b"a:1\nb:2\nno separator \xff here\nc:3\n")  # fmt: skip
    result.check_error()
    assert result.stderr.strip() == (
        "error: line 3: no key separator ':' found in 'no separator \ufffd here'; "
        "2 records sent before it"
    )
    # The two lines before it really are in the topic, the one after it is not.
    consumed = odradek("consume", topic, "-b", bootstrap, "--from-beginning",
                       "--timeout-ms", "3000", "--property", "print.key=true")  # fmt: skip
    assert sorted(consumed.check().lines) == ["a\t1", "b\t2"]


def test_a_tab_separator_is_shown_escaped(bootstrap: str, topic: str) -> None:
    odradek("produce", topic, "-b", bootstrap, "--key-separator", "\\t",
            stdin=b"one\n").check_error("line 1: no key separator '\\t' found in 'one'",
                                        "0 records sent before it")  # fmt: skip


def test_a_long_bad_line_is_shortened(bootstrap: str, topic: str) -> None:
    result = odradek("produce", topic, "-b", bootstrap, "--key-separator", "|",
                     stdin=b"x" * 500 + b"\n")  # fmt: skip
    result.check_error("x" * 60 + "...'")
    assert len(result.stderr) < 200


def test_a_record_too_large_for_the_request_names_its_line(bootstrap: str, topic: str) -> None:
    odradek("produce", topic, "-b", bootstrap, "--max-request-size", "100",
            stdin=b"small\n" + b"y" * 300 + b"\n").check_error(
        "line 2: MESSAGE_TOO_LARGE", "1 record sent before it")  # fmt: skip


def test_a_record_the_broker_refuses_says_how_many_were_written(bootstrap: str, topic: str) -> None:
    big = b"z" * 1_100_000
    odradek("produce", topic, "-b", bootstrap, "--max-request-size", "2000000",
            stdin=b"ok\n" + big + b"\n").check_error(
        "record from line 2 was not written", "MESSAGE_TOO_LARGE", "1 record written")  # fmt: skip


def test_unreadable_standard_input(bootstrap: str, topic: str) -> None:
    fd = os.open(os.devnull, os.O_WRONLY)
    try:
        completed = subprocess.run(
            [sys.executable, "-m", "odradek", "produce", topic, "-b", bootstrap],
            stdin=fd, capture_output=True, timeout=60, check=False,
        )  # fmt: skip
    finally:
        os.close(fd)
    Result(completed.returncode, completed.stdout, completed.stderr.decode()).check_error(
        "cannot read standard input"
    )


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--key-separator", ""], "--key-separator must not be empty"),
        (["--header", "k=v", "--header", ""], "--header expects KEY=VALUE or KEY"),
        (["--key-separator", "\\"], "unknown escape"),
    ],
)
def test_produce_argument_errors(
    bootstrap: str, topic: str, args: list[str], fragment: str
) -> None:
    odradek("produce", topic, "-b", bootstrap, *args, stdin=b"x\n").check_error(fragment)


# -- consume ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--property", "print.key"], "--property expects KEY=VALUE"),
        (["--property", "print.key=true", "--property", "print.key=false"], "more than once"),
        (["--property", "print.key=maybe"], "expected true or false"),
        (["--property", "key.separator=\\x"], "unknown escape"),
        (["--offset", "-1", "-p", "0"], "--offset"),
    ],
)
def test_consume_argument_errors(
    bootstrap: str, topic: str, args: list[str], fragment: str
) -> None:
    odradek("consume", topic, "-b", bootstrap, "--timeout-ms", "1000", *args).check_error(fragment)


def test_consume_an_invalid_topic_name(bootstrap: str) -> None:
    # A consumer never creates topics, so an impossible name simply does not exist.
    odradek("consume", "bad/name", "-b", bootstrap, "--timeout-ms", "1000").check_error(
        "topic 'bad/name' does not exist"
    )


# -- every client verb: an unreachable broker, a bad --bootstrap-server -------------------


@pytest.mark.parametrize(
    "command",
    [
        ["produce", "t"],
        ["consume", "t"],
        ["consume", "t", "--group", "g"],
        ["topics", "list"],
        ["topics", "create", "t"],
        ["topics", "describe"],
        ["topics", "alter", "t", "--partitions", "2"],
        ["topics", "delete", "t"],
        ["groups", "describe", "--group", "g"],
        ["groups", "delete", "--group", "g"],
        ["groups", "reset-offsets", "--group", "g", "--all-topics", "--to-earliest"],
    ],
)
def test_unreachable_broker(command: list[str]) -> None:
    port = free_port()
    odradek(*command, "--bootstrap-server", f"127.0.0.1:{port}", stdin=b"x\n").check_error(
        "no broker reachable", f"127.0.0.1:{port}"
    )
    odradek(*command, "--bootstrap-server", "127.0.0.1:port", stdin=b"x\n").check_error(
        "--bootstrap-server"
    )


# -- usage mistakes: one line too ------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["nosuch"], ["No such command 'nosuch'", "'odradek --help'"]),
        (["produce"], ["Missing argument 'TOPIC'", "'odradek produce --help'"]),
        (["produce", "t", "--acks", "2"], ["--acks", "'odradek produce --help'"]),
        (["consume", "t", "--max-messages", "0"], ["--max-messages"]),
        (["consume", "t", "--isolation-level", "dirty"], ["--isolation-level"]),
        (["consume", "t", "--no-such-option"], ["No such option"]),
        (["topics", "create", "t", "--partitions", "many"], ["--partitions"]),
        (["groups", "describe", "--bogus"], ["No such option"]),
        (["groups", "reset-offsets", "--group", "g", "--to-offset", "x"], ["--to-offset"]),
        (["server", "--log-level", "LOUD"], ["--log-level", "'odradek server --help'"]),
    ],
)
def test_usage_errors_are_one_line(args: list[str], fragments: list[str]) -> None:
    usage_error(odradek(*args), *fragments)


def test_a_group_alone_prints_its_help() -> None:
    result = odradek("topics")
    assert "Usage: odradek topics" in result.out + result.stderr
    assert "error:" not in result.stderr


# -- server ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("log_dir", "fragment"),
    [("afile", "exists and is not a directory"), ("afile/below", "cannot create")],
)
def test_server_with_an_unusable_data_directory(
    tmp_path: Path, log_dir: str, fragment: str
) -> None:
    (tmp_path / "afile").write_text("")
    result = odradek("server", "--override", f"log.dirs={tmp_path / log_dir}",
                     "--override", f"listeners=PLAINTEXT://127.0.0.1:{free_port()}")  # fmt: skip
    result.check_error("log.dirs", fragment)


def test_server_refuses_a_misspelt_key_with_a_suggestion() -> None:
    odradek("server", "--override", "log.retention.hour=1").check_error(
        "unknown config key 'log.retention.hour'; did you mean 'log.retention.hours'?"
    )


def test_server_refuses_a_malformed_zookeeper_connect() -> None:
    # A reachable-looking but malformed address is a config error, before any connecting
    # (an unreachable one is tests/integration/cluster/test_join.py's).
    odradek("server", "--override", "zookeeper.connect=localhost:notaport").check_error(
        "zookeeper.connect"
    )
