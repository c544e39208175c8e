"""ApiVersions answers through a running broker, whose handler encodes each version's body
once and frames it per request: every version, asked twice on one connection and once on
another, gets its own correlation id back and the same table, in its own version's
format (v3 is flexible, v0-v2 are not: one cached body served for another version would
not decode)."""

from __future__ import annotations

import pytest

from tests.helpers.broker import BrokerProcess
from tests.helpers.raw import RawClient

pytestmark = pytest.mark.integration

API_VERSIONS = 18
REQUEST = {0: {}, 1: {}, 2: {}, 3: {"client_software_name": "t", "client_software_version": "1"}}


def _table(response: object) -> list[tuple[int, int, int]]:
    keys = response.api_keys  # type: ignore[attr-defined]
    return [(int(k.api_key), int(k.min_version), int(k.max_version)) for k in keys]


def test_every_version_is_answered_with_its_own_correlation_id(
    shared_broker: BrokerProcess,
) -> None:
    first, second = RawClient(shared_broker.port), RawClient(shared_broker.port)
    try:
        tables = []
        for version in (3, 0, 2, 1, 3, 0):
            for client in (first, first, second):
                # RawClient.call checks the correlation id of the answer it decodes.
                response = client.call(API_VERSIONS, version, REQUEST[version])
                assert int(response.error_code) == 0
                tables.append(_table(response))
        assert all(table == tables[0] for table in tables)
        assert len(tables[0]) > 40 and any(key == API_VERSIONS for key, _, _ in tables[0])
    finally:
        first.sock.close()
        second.sock.close()
