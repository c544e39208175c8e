"""``odradek broker-api-versions`` (kafka-broker-api-versions): NodeApiVersions' text as
units, then against real brokers, checked against the ApiVersions answer read on a raw
connection of the test's own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from odradek.cli.broker_api_versions import (
    api_text,
    broker_api_versions,
    node_api_versions_text,
    node_text,
)
from odradek.client.versions import client_range
from tests.cli.helpers import odradek
from tests.helpers.broker import BrokerProcess, free_port
from tests.helpers.raw import advertised_versions

API_VERSIONS = 18

# -- units ----------------------------------------------------------------------------------


def test_api_text_as_kafka_prints_it() -> None:
    assert api_text(0, (3, 11), (3, 12)) == "Produce(0): 3 to 11 [usable: 11]"
    assert api_text(18, (0, 4), (0, 3)) == "ApiVersions(18): 0 to 4 [usable: 3]"
    assert api_text(47, (0, 0), (0, 0)) == "OffsetDelete(47): 0 [usable: 0]"
    assert api_text(0, (13, 14), (3, 12)) == "Produce(0): 13 to 14 [unusable: node too new]"
    assert api_text(1, (0, 3), (4, 12)) == "Fetch(1): 0 to 3 [unusable: node too old]"
    assert api_text(4, (0, 7), (0, 7)) == "LeaderAndIsr(4): 0 to 7 [usable: 7]"
    assert api_text(999, (0, 2), None) == "UNKNOWN(999): 0 to 2"


def test_node_text_is_kafkas_node() -> None:
    assert node_text(1, "127.0.0.1", 9093, None) == "127.0.0.1:9093 (id: 1 rack: null)"
    assert node_text(2, "b2", 9094, "r1") == "b2:9094 (id: 2 rack: r1)"


def test_whole_answer_sorted_with_unsupported_and_unknown_keys() -> None:
    text = node_api_versions_text({18: (0, 4), 0: (3, 11), 999: (0, 1)}, expected=(0, 3, 18))
    produce_max = min(11, client_range(0)[1])  # type: ignore[index]
    assert text.split("\n") == [
        "(",
        f"\tProduce(0): 3 to 11 [usable: {produce_max}],",
        "\tMetadata(3): UNSUPPORTED,",
        "\tApiVersions(18): 0 to 4 [usable: 3],",
        "\tUNKNOWN(999): 0 to 1",
        ")",
    ]


def test_help_is_kafkas() -> None:
    text = CliRunner().invoke(broker_api_versions, ["--help"]).output
    assert "This tool helps to retrieve broker version information" in text
    assert "--command-config" in text and "--bootstrap-server" in text


# -- against brokers ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def misadvertised(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker whose advertised.listeners names a port nobody listens on: the bootstrap
    connection works, the connection to the broker the metadata names does not."""
    data = tmp_path_factory.mktemp("misadvertised") / "data"
    broker = BrokerProcess(
        data, overrides={"advertised.listeners": f"PLAINTEXT://127.0.0.1:{free_port()}"}
    )
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.mark.timeout(120)
def test_single_broker_block_matches_its_api_versions(shared_broker: BrokerProcess) -> None:
    result = odradek("broker-api-versions", "--bootstrap-server", shared_broker.bootstrap)
    lines = result.check().lines
    assert lines[0] == f"{shared_broker.bootstrap} (id: 0 rack: null) -> ("
    assert lines[-1] == ")"
    body = [line.removeprefix("\t").rstrip(",") for line in lines[1:-1]]
    assert all(line.startswith("\t") for line in lines[1:-1])
    assert all(line.endswith(",") for line in lines[1:-2]) and not lines[-2].endswith(",")
    ranges = advertised_versions(shared_broker.port)
    keys = [int(line.split("(", 1)[1].split(")", 1)[0]) for line in body]
    assert keys == sorted(keys) and set(ranges) <= set(keys)
    by_key = dict(zip(keys, body, strict=True))
    low, high = ranges[0]
    ours = client_range(0)
    assert ours is not None
    assert by_key[0] == f"Produce(0): {low} to {high} [usable: {min(high, ours[1])}]"
    low, high = ranges[API_VERSIONS]
    assert by_key[API_VERSIONS] == f"ApiVersions(18): {low} to {high} [usable: 3]"
    # Every advertised API shows its range; the ones odradek speaks but this broker does
    # not serve (the single broker elects no leaders) are UNSUPPORTED.
    for key, line in by_key.items():
        if key in ranges:
            low, high = ranges[key]
            assert f"({key}): {low if low == high else f'{low} to {high}'}" in line, line
        else:
            assert line.endswith(f"({key}): UNSUPPORTED"), line
    assert by_key[43] == "ElectLeaders(43): UNSUPPORTED"


@pytest.mark.timeout(120)
def test_unreachable_brokers(misadvertised: BrokerProcess, tmp_path: Path) -> None:
    # The advertised address does not answer: Kafka's ERROR line, then one error line.
    result = odradek("broker-api-versions", "-b", misadvertised.bootstrap)
    result.check_error("1 broker(s) did not answer")
    (line,) = result.lines
    assert line.startswith("127.0.0.1:") and " (id: 0 rack: null) -> ERROR: " in line
    assert misadvertised.bootstrap not in line  # the advertised port, not the bootstrap one
    down = odradek("broker-api-versions", "-b", f"127.0.0.1:{free_port()}")
    assert down.check_error("no broker reachable").out == ""
