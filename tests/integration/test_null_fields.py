"""A null (length -1) in a field the schema does not allow to be null, against a live broker.

Kafka's parser throws on it and the broker closes the connection. odradek used to decode
a null array as ``None`` and hand it to the handler, which logged a traceback (Produce,
ListOffsets, DescribeGroups, CreateTopics, DeleteRecords, DescribeConfigs, AlterConfigs,
CreatePartitions, DeleteGroups, IncrementalAlterConfigs). Every API and version the broker
advertises is tried, with null in each non-nullable array and string field in turn.
"""

from __future__ import annotations

import socket
import struct

import pytest

from odradek.protocol.versions import API_VERSIONS
from tests.helpers.broker import BrokerProcess
from tests.helpers.raw import RawClient
from tests.helpers.specimens import (
    encode,
    null_encoding,
    request_frame,
    request_specimen,
    sites,
)

pytestmark = pytest.mark.integration


def _advertised(port: int) -> list[tuple[int, int]]:
    client = RawClient(port)
    try:
        response = client.call(API_VERSIONS, 3, {})
    finally:
        client.sock.close()
    return [
        (int(key.api_key), version)
        for key in response.api_keys
        for version in range(key.min_version, key.max_version + 1)
    ]


def _closed_without_answer(port: int, frame: bytes) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        received = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return received == b""
            received += chunk


def test_null_in_non_nullable_fields_closes_the_connection(broker: BrokerProcess) -> None:
    pairs = _advertised(broker.port)
    assert len(pairs) > 100
    tried = 0
    for api_key, version in pairs:
        entity = request_specimen(api_key, version)
        for site in sites(entity):
            if site.nullable or site.tagged:
                continue
            if site.shape != "array" and site.kafka_type not in ("string", "bytes", "records"):
                continue
            body = encode(entity, {site.path: null_encoding(site)})
            frame = request_frame(api_key, version, body, correlation_id=tried)
            assert _closed_without_answer(broker.port, frame), (api_key, version, site.path)
            tried += 1
    assert tried > 300
    assert broker.is_running()
    log = broker.log_text()
    assert "Traceback" not in log
    assert log.count("was serialized as null") >= tried
    # Still serving: a fresh connection gets answers.
    assert len(_advertised(broker.port)) == len(pairs)
