"""Sans-I/O request/response codec on top of kio.

A request frame (after the int32 size prefix, see ``framing``) is a request header (v1 or
v2, see ``headers``) followed by the request body of that API version; a response frame
is a response header (v0 or v1) followed by the response body. Bodies are kio entities:
``kio.schema.<api>.v<N>.request.<Name>Request`` and ``...response.<Name>Response``.

Decoding policy, following Kafka's broker:

* API key not in the version table, or version outside its range:
  ``DecodeError(UNSUPPORTED_VERSION)``. For ApiVersions the caller answers with
  ``api_versions_unsupported_response`` (a v0 body listing our ranges, so every client can
  fall back); for any other API Kafka closes the connection, and so does odradek.
* Header or body that does not parse: ``DecodeError(INVALID_REQUEST)``; the connection is
  closed (Kafka raises InvalidRequestException there).
* Bytes after a complete body are ignored, as Kafka does; so are tagged fields kio does not
  know (KIP-482; see ``lenient``).
"""

from __future__ import annotations

import io
import struct
from collections.abc import Mapping
from functools import cache
from typing import Any

from kio.serial import entity_writer

from odradek.protocol import lenient
from odradek.protocol.errors import DecodeError, ErrorCode
from odradek.protocol.headers import (
    RequestHeader,
    encode_request_header,
    encode_response_header,
    parse_request_header,
    parse_response_header,
)
from odradek.protocol.lenient import read_entity
from odradek.protocol.produce_request import read_produce_request
from odradek.protocol.schemas import request_type, response_type
from odradek.protocol.versions import (
    API_VERSIONS,
    PRODUCE,
    SUPPORTED,
    api_name,
    build_api_versions_response,
    is_supported,
)

__all__ = [
    "DecodeError",
    "RequestHeader",
    "api_versions_unsupported_response",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "encode_response_body",
]

_SIZE = struct.Struct(">i")
_INT16 = struct.Struct(">h")


# Cached lookups (kio resolves schema classes by dotted name on every call).
_request_type = request_type
_response_type = response_type


def _read_body(entity_type: type, payload: bytes | bytearray | memoryview, offset: int) -> Any:
    # Always the schema-walking reader, never kio's native one: the native reader
    # reserves memory for an array from its untrusted length field, so a 30-byte request
    # claiming billions of elements aborts the whole process (out of memory in Rust,
    # which Python cannot catch). The walking reader allocates only what the bytes hold,
    # also skips unknown tagged fields (KIP-482), and costs 4-25 us more per request.
    entity, _end = read_entity(entity_type, payload, offset)
    return entity


@cache
def _writer(entity_type: type) -> Any:
    return entity_writer(entity_type)


def _readonly(payload: bytes | bytearray | memoryview) -> bytes | memoryview:
    """kio's leaf readers accept only read-only buffers; frames arrive as bytearrays."""
    if isinstance(payload, bytearray) or (isinstance(payload, memoryview) and not payload.readonly):
        return memoryview(payload).toreadonly()
    return payload


def decode_request(
    payload: bytes | bytearray | memoryview,
    versions: Mapping[int, tuple[int, int]] = SUPPORTED,
) -> tuple[RequestHeader, object]:
    """Decode one request frame (without size prefix) into its header and kio entity.

    ``versions`` is the table to accept (the broker passes what it advertises).
    Raises ``DecodeError`` as described in the module docstring.
    """
    writable = None
    if isinstance(payload, bytearray) or (isinstance(payload, memoryview) and not payload.readonly):
        writable = memoryview(payload)
    payload = _readonly(payload)
    token = lenient.writable_source.set(writable)
    try:
        return _decode_request(payload, versions)
    finally:
        lenient.writable_source.reset(token)


def _decode_request(
    payload: bytes | memoryview, versions: Mapping[int, tuple[int, int]]
) -> tuple[RequestHeader, object]:
    if len(payload) >= 4:
        (api_key,) = _INT16.unpack_from(payload, 0)
        known = api_key in versions
    else:
        known = False
    header, offset = parse_request_header(payload, known_api=known)
    api_key = header.api_key
    api_version = header.api_version
    if not is_supported(api_key, api_version, versions):
        bounds = versions.get(api_key)
        if bounds is None:
            message = f"unknown API key {api_key}"
        else:
            message = (
                f"{api_name(api_key)} v{api_version} is not supported "
                f"(supported: v{bounds[0]}..v{bounds[1]})"
            )
        raise DecodeError(
            message,
            error_code=ErrorCode.unsupported_version,
            correlation_id=header.correlation_id,
            api_key=api_key,
            api_version=api_version,
            header=header,
        )
    try:
        entity_type = _request_type(api_key, api_version)
        request = None
        if api_key == PRODUCE:  # one topic, one partition: read without the walker
            request = read_produce_request(entity_type, payload, offset)
        if request is None:
            request = _read_body(entity_type, payload, offset)
    except Exception as exc:
        raise DecodeError(
            f"cannot decode {api_name(api_key)} v{api_version} request body: "
            f"{type(exc).__name__}: {exc}",
            error_code=ErrorCode.invalid_request,
            correlation_id=header.correlation_id,
            api_key=api_key,
            api_version=api_version,
            header=header,
        ) from None
    return header, request


def _check_entity(entity: object, api_key: int, api_version: int, kind: str) -> None:
    entity_key = getattr(entity, "__api_key__", None)
    entity_version = getattr(entity, "__version__", None)
    if entity_key != api_key or entity_version != api_version:
        raise ValueError(
            f"{kind} {type(entity).__qualname__} (api key {entity_key}, v{entity_version}) "
            f"does not match {api_name(api_key)} v{api_version}"
        )


def _write_framed(head: bytes, entity: object) -> bytes:
    buffer = io.BytesIO()
    buffer.write(b"\x00\x00\x00\x00")
    buffer.write(head)
    _writer(type(entity))(buffer, entity)
    view = buffer.getbuffer()
    _SIZE.pack_into(view, 0, len(view) - 4)
    del view
    return buffer.getvalue()


def encode_response_body(response: object) -> bytes:
    """Only the body of a response entity (no header, no size prefix)."""
    buffer = io.BytesIO()
    _writer(type(response))(buffer, response)
    return buffer.getvalue()


def encode_response(header: RequestHeader, response: object) -> bytes:
    """Frame a response (size prefix, response header v0/v1, body) for ``header``.

    ``response`` must be the kio response entity of the request's API and version;
    anything else raises ``ValueError`` rather than sending a reply the client would
    misparse.
    """
    _check_entity(response, header.api_key, header.api_version, "response")
    head = encode_response_header(header.api_key, header.api_version, header.correlation_id)
    return _write_framed(head, response)


def encode_request(
    api_version: int, correlation_id: int, client_id: str | None, request: object
) -> bytes:
    """Frame a request entity (size prefix, header v1/v2, body); for odradek's client."""
    api_key = getattr(request, "__api_key__", None)
    if api_key is None:
        raise ValueError(f"{type(request).__qualname__} is not a kio request entity")
    _check_entity(request, api_key, api_version, "request")
    head = encode_request_header(api_key, api_version, correlation_id, client_id)
    return _write_framed(head, request)


def decode_response(
    api_key: int, api_version: int, payload: bytes | bytearray | memoryview
) -> tuple[int, object]:
    """Decode a response frame (without size prefix); return ``(correlation_id, entity)``.

    An ApiVersions response with UNSUPPORTED_VERSION is decoded as v0 whatever version
    was sent: that is how a broker answers a version it does not know.
    """
    payload = _readonly(payload)
    correlation_id, offset = parse_response_header(api_key, api_version, payload)
    versions_to_try = [api_version]
    if api_key == API_VERSIONS and api_version != 0 and len(payload) >= offset + 2:
        (error_code,) = _INT16.unpack_from(payload, offset)
        if error_code == ErrorCode.unsupported_version:
            versions_to_try = [0]
        elif error_code != ErrorCode.none:
            # Other errors come in the requested version from Kafka, in v0 from some
            # brokers; try both, as Kafka's Java client does.
            versions_to_try.append(0)
    failure: Exception | None = None
    for version in versions_to_try:
        try:
            response = _read_body(_response_type(api_key, version), payload, offset)
            return correlation_id, response
        except Exception as exc:
            failure = exc
    raise DecodeError(
        f"cannot decode {api_name(api_key)} v{api_version} response body: "
        f"{type(failure).__name__}: {failure}",
        error_code=ErrorCode.corrupt_message,
        correlation_id=correlation_id,
        api_key=api_key,
        api_version=api_version,
    )


def api_versions_unsupported_response(
    header: RequestHeader, versions: Mapping[int, tuple[int, int]] = SUPPORTED
) -> bytes:
    """Framed UNSUPPORTED_VERSION answer to an ApiVersions request of an unknown version.

    Kafka encodes it with response header v0 and the v0 body (error_code, api_keys) so a
    client of any version can read it; the key list tells it which ApiVersions version to
    retry with (librdkafka and kafka-python retry with our maximum, aiokafka only sends v0).
    """
    body = build_api_versions_response(0, versions, error_code=ErrorCode.unsupported_version)
    head = _SIZE.pack(header.correlation_id)
    return _write_framed(head, body)
