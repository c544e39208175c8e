"""Null (negative length) in every field of every request odradek accepts, at every version.

Kafka's generated readers throw on a negative length in a field the schema does not mark
nullable for that version ("non-nullable field X was serialized as null"), and the broker
closes the connection. odradek's reader must refuse such a frame while parsing (a
DecodeError, which the network layer turns into a closed connection) rather than hand a
``None`` to a handler that iterates over it; and it must still accept null where the
schema allows it. Specimens (tests/helpers/specimens.py) put every field on the wire.
"""

from __future__ import annotations

import pytest

from odradek.protocol.codec import decode_request, encode_request
from odradek.protocol.errors import DecodeError, ErrorCode
from odradek.protocol.interbroker import CONTROLLED_SHUTDOWN
from odradek.protocol.versions import (
    ALTER_CONFIGS,
    CREATE_PARTITIONS,
    CREATE_TOPICS,
    DELETE_GROUPS,
    DELETE_RECORDS,
    DESCRIBE_ACLS,
    DESCRIBE_CLUSTER,
    DESCRIBE_CONFIGS,
    DESCRIBE_GROUPS,
    INCREMENTAL_ALTER_CONFIGS,
    INIT_PRODUCER_ID,
    LIST_OFFSETS,
    PRODUCE,
    SUPPORTED,
)
from tests.helpers.specimens import (
    Site,
    encode,
    null_encoding,
    request_frame,
    request_specimen,
    sites,
    value_at,
)

PAIRS = [(key, v) for key, (low, high) in sorted(SUPPORTED.items()) for v in range(low, high + 1)]
LENGTH_TYPES = ("string", "bytes", "records")


def _nullable_sites(entity: object) -> list[tuple[tuple, Site]]:
    """(path to overwrite, site) for every field that has a null encoding on the wire."""
    result = []
    for site in sites(entity):
        if site.shape == "array":
            result.append((site.path, site))
            if site.kafka_type in LENGTH_TYPES:  # elements of string arrays: never null
                element = Site(
                    (*site.path, 0), site.kafka_type, "leaf", False, site.flexible, False
                )
                result.append((element.path, element))
        elif (site.shape == "leaf" and site.kafka_type in LENGTH_TYPES) or (
            site.shape == "entity" and site.nullable and not site.tagged
        ):
            result.append((site.path, site))
    return result


def _negative(site: Site) -> list[bytes]:
    """Every way to write a negative length for this field: -1, and -2 where it is signed."""
    encodings = [null_encoding(site)]
    if not site.flexible and site.shape != "entity":
        width = 2 if site.shape == "leaf" and site.kafka_type == "string" else 4
        encodings.append((-2).to_bytes(width, "big", signed=True))
    return encodings


@pytest.mark.parametrize(("api_key", "version"), PAIRS)
def test_specimen_is_encoded_as_kio_encodes_it(api_key: int, version: int) -> None:
    entity = request_specimen(api_key, version)
    frame = request_frame(api_key, version, encode(entity))
    assert frame == encode_request(version, 1, "specimen", entity)[4:]
    assert decode_request(frame)[1] == entity


@pytest.mark.parametrize(("api_key", "version"), PAIRS)
def test_null_is_refused_where_the_schema_forbids_it(api_key: int, version: int) -> None:
    entity = request_specimen(api_key, version)
    for path, site in _nullable_sites(entity):
        for raw in _negative(site):
            frame = request_frame(api_key, version, encode(entity, {path: raw}))
            if site.nullable:
                _header, decoded = decode_request(frame)
                assert value_at(decoded, path) is None, (api_key, version, path)
            else:
                with pytest.raises(DecodeError) as caught:
                    decode_request(frame)
                assert caught.value.error_code == ErrorCode.invalid_request
                assert "null" in str(caught.value), str(caught.value)


def test_every_api_has_fields_to_check() -> None:
    """The walk above is not vacuous: each API has, in some version, fields that must not
    be null (some versions have empty bodies: ApiVersions v0-2, ListGroups v0-3). Only
    InitProducerId (a nullable transactional id and integers), DescribeCluster (a
    boolean), ControlledShutdown (integers) and DescribeAcls (nullable filters and int8s)
    have none."""
    checked = {
        api_key
        for api_key, version in PAIRS
        if any(not s.nullable for _p, s in _nullable_sites(request_specimen(api_key, version)))
    }
    assert set(SUPPORTED) - checked == {
        INIT_PRODUCER_ID,
        DESCRIBE_CLUSTER,
        CONTROLLED_SHUTDOWN,
        DESCRIBE_ACLS,
    }


@pytest.mark.parametrize(
    ("api_key", "path"),
    [
        (PRODUCE, ("topic_data",)),
        (LIST_OFFSETS, ("topics",)),
        (DESCRIBE_GROUPS, ("groups",)),
        (CREATE_TOPICS, ("topics",)),
        (DELETE_RECORDS, ("topics",)),
        (DESCRIBE_CONFIGS, ("resources",)),
        (ALTER_CONFIGS, ("resources",)),
        (CREATE_PARTITIONS, ("topics",)),
        (DELETE_GROUPS, ("groups_names",)),
        (INCREMENTAL_ALTER_CONFIGS, ("resources",)),
    ],
)
def test_top_level_arrays_that_reached_handlers_as_none(api_key: int, path: tuple) -> None:
    low, high = SUPPORTED[api_key]
    for version in (low, high):
        entity = request_specimen(api_key, version)
        site = next(s for s in sites(entity) if s.path == path)
        assert not site.nullable
        frame = request_frame(api_key, version, encode(entity, {path: null_encoding(site)}))
        with pytest.raises(DecodeError, match=f"non-nullable field {path[0]}"):
            decode_request(frame)


def test_null_is_still_accepted_where_the_schema_allows_it() -> None:
    # Metadata v1+: topics null means "all topics"; Produce transactional_id is nullable.
    for api_key, path in ((3, ("topics",)), (PRODUCE, ("transactional_id",))):
        low, high = SUPPORTED[api_key]
        for version in range(max(low, 1), high + 1):
            entity = request_specimen(api_key, version)
            site = next(s for s in sites(entity) if s.path == path)
            frame = request_frame(api_key, version, encode(entity, {path: null_encoding(site)}))
            assert value_at(decode_request(frame)[1], path) is None
