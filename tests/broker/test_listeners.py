"""Parsing listeners the way Kafka does (names, protocol map, ports, advertised)."""

from __future__ import annotations

import pytest

from odradek.broker.config import BrokerConfig, ConfigError
from odradek.broker.listeners import Endpoint

MAP = "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT,SSL:SSL"


def config(listeners: str, advertised: str = "", mapping: str = MAP) -> BrokerConfig:
    return BrokerConfig(
        {
            "listeners": listeners,
            "advertised.listeners": advertised,
            "listener.security.protocol.map": mapping,
        }
    )


def test_every_listener_is_parsed_with_its_protocol() -> None:
    raw = "PLAINTEXT://127.0.0.1:9092, internal://[::1]:9093,PLAINTEXT2://:0"
    parsed = config(raw, mapping=MAP + ",PLAINTEXT2:PLAINTEXT").listeners
    assert parsed == [
        Endpoint("PLAINTEXT", "127.0.0.1", 9092, "PLAINTEXT"),
        Endpoint("INTERNAL", "::1", 9093, "PLAINTEXT"),  # names are case-insensitive
        Endpoint("PLAINTEXT2", "", 0, "PLAINTEXT"),
    ]


def test_the_default_map_knows_the_protocol_names() -> None:
    assert BrokerConfig({"listeners": "PLAINTEXT://h:1"}).listeners[0].protocol == "PLAINTEXT"


@pytest.mark.parametrize(
    ("listeners", "fragment"),
    [
        ("PLAINTEXT://h:1,PLAINTEXT://h:2", "each listener must have a different name"),
        ("PLAINTEXT://h:1,INTERNAL://g:1", "each listener must have a different port"),
        ("OTHER://h:1", "no security protocol defined for listener OTHER"),
        ("PLAINTEXT://h:70000", "port 70000 out of range"),
        ("h:1", "expected PLAINTEXT://host:port"),
    ],
)
def test_bad_listeners_are_refused(listeners: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match="listeners") as info:
        config(listeners)
    assert fragment in str(info.value)


def test_port_zero_and_an_ipv4_ipv6_pair_may_share_a_port() -> None:
    assert len(config("PLAINTEXT://h:0,INTERNAL://g:0").listeners) == 2
    assert len(config("PLAINTEXT://127.0.0.1:9,INTERNAL://[::1]:9").listeners) == 2


def test_advertised_listeners_replace_their_listener_and_may_share_ports() -> None:
    parsed = config(
        "PLAINTEXT://0.0.0.0:1,INTERNAL://0.0.0.0:2", "INTERNAL://lb:9,PLAINTEXT://lb:9"
    )
    assert [(e.name, e.host, e.port) for e in parsed.advertised_listeners] == [
        ("PLAINTEXT", "lb", 9),
        ("INTERNAL", "lb", 9),
    ]
    assert parsed.advertised_listener == ("lb", 9)


@pytest.mark.parametrize(
    ("advertised", "fragment"),
    [
        ("SSL://h:3", "listener SSL is not in listeners"),
        ("PLAINTEXT://0.0.0.0:1", "cannot advertise the non-routable address 0.0.0.0"),
        ("PLAINTEXT://h:1,PLAINTEXT://g:2", "each listener must have a different name"),
    ],
)
def test_bad_advertised_listeners_are_refused(advertised: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match=r"advertised\.listeners") as info:
        config("PLAINTEXT://h:1,INTERNAL://h:2", advertised)
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    ("mapping", "fragment"),
    [
        ("PLAINTEXT:TLS", "expected NAME:PROTOCOL pairs"),
        ("PLAINTEXT:PLAINTEXT,PLAINTEXT:SSL", "mapped twice"),
    ],
)
def test_bad_protocol_maps_are_refused(mapping: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match=r"listener\.security\.protocol\.map") as info:
        config("PLAINTEXT://h:1", mapping=mapping)
    assert fragment in str(info.value)


def test_network_limits_have_kafkas_defaults() -> None:
    defaults = BrokerConfig()
    assert defaults.get("queued.max.request.bytes") == -1
    assert defaults.get("max.connections") == 2**31 - 1
    assert defaults.get("max.connections.per.ip") == 2**31 - 1
    assert defaults.get("max.connections.per.ip.overrides") == ""
    assert defaults.get("connections.max.idle.ms") == 600000
    zero = BrokerConfig(
        {"max.connections.per.ip": "0", "max.connections.per.ip.overrides": "127.0.0.1:5"}
    )
    assert zero.get("max.connections.per.ip") == 0
