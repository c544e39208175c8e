"""Request and response headers, encoded by hand (they are on every request).

Request header v1 (non-flexible API versions)::

    request_api_key     int16
    request_api_version int16
    correlation_id      int32
    client_id           nullable string (int16 length, -1 = null)

Request header v2 (flexible API versions) is v1 followed by a tagged-field section.
``client_id`` keeps the int16 length even in v2: Kafka special-cases it so that a broker
can always read the header of an ApiVersions request of any version.

Request header v0 (api key, version, correlation id; no client id) is used by one API
version alone: ControlledShutdown v0, as Kafka's schema says.

Response header v0 is ``correlation_id int32``; v1 (flexible versions) adds a tagged-field
section. ApiVersions responses always use v0, so that a client that sent a version the
broker does not know can still read the reply.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from odradek.protocol.errors import DecodeError, ErrorCode
from odradek.protocol.primitives import skip_tagged_fields
from odradek.protocol.versions import API_VERSIONS, CONTROLLED_SHUTDOWN, is_flexible

__all__ = [
    "REQUEST_HEADER_FIXED_SIZE",
    "RequestHeader",
    "encode_request_header",
    "encode_response_header",
    "parse_request_header",
    "parse_response_header",
    "request_header_version",
    "response_header_version",
]

_FIXED = struct.Struct(">hhi")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
REQUEST_HEADER_FIXED_SIZE = _FIXED.size  # api key, version, correlation id
_EMPTY_TAGGED_FIELDS = b"\x00"


@dataclass(frozen=True, slots=True)
class RequestHeader:
    """The parsed request header; ``client_id`` is ``None`` when the client sent null."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None

    @property
    def flexible(self) -> bool:
        """Whether this API version uses the flexible encoding."""
        return is_flexible(self.api_key, self.api_version)


def request_header_version(api_key: int, api_version: int) -> int:
    """1 for non-flexible API versions, 2 for flexible ones, 0 for ControlledShutdown v0."""
    if api_key == CONTROLLED_SHUTDOWN and api_version == 0:
        return 0
    return 2 if is_flexible(api_key, api_version) else 1


def response_header_version(api_key: int, api_version: int) -> int:
    """0 for non-flexible API versions and for every ApiVersions version, else 1."""
    if api_key == API_VERSIONS:
        return 0
    return 1 if is_flexible(api_key, api_version) else 0


def parse_request_header(
    payload: bytes | bytearray | memoryview, *, known_api: bool = True
) -> tuple[RequestHeader, int]:
    """Parse the header at the start of a frame; return it and the body's offset.

    With ``known_api=False`` (an API key odradek does not know) the header version
    cannot be known, so no tagged fields are skipped and the returned offset is only
    meaningful for v1. Raises ``DecodeError(INVALID_REQUEST)`` with whatever fields were
    readable when the header is truncated or its client id is not UTF-8.
    """
    size = len(payload)
    if size < REQUEST_HEADER_FIXED_SIZE:
        correlation_id = None
        api_key = _INT16.unpack_from(payload, 0)[0] if size >= 2 else None
        raise DecodeError(
            f"request header truncated: {size} bytes",
            correlation_id=correlation_id,
            api_key=api_key,
        )
    api_key, api_version, correlation_id = _FIXED.unpack_from(payload, 0)
    context = {
        "correlation_id": correlation_id,
        "api_key": api_key,
        "api_version": api_version,
    }
    offset = REQUEST_HEADER_FIXED_SIZE
    if known_api and request_header_version(api_key, api_version) == 0:
        return RequestHeader(api_key, api_version, correlation_id, None), offset
    if size < offset + 2:
        raise DecodeError("request header truncated before client_id", **context)
    (length,) = _INT16.unpack_from(payload, offset)
    offset += 2
    client_id: str | None
    if length < 0:
        if length != -1:
            raise DecodeError(f"invalid client_id length {length}", **context)
        client_id = None
    else:
        end = offset + length
        if end > size:
            raise DecodeError("client_id runs past the end of the frame", **context)
        try:
            client_id = bytes(payload[offset:end]).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DecodeError(f"client_id is not UTF-8: {exc}", **context) from None
        offset = end
    header = RequestHeader(api_key, api_version, correlation_id, client_id)
    if known_api and is_flexible(api_key, api_version):
        try:
            offset = skip_tagged_fields(payload, offset)
        except ValueError as exc:
            raise DecodeError(f"request header tagged fields: {exc}", **context) from None
    return header, offset


def encode_request_header(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None
) -> bytes:
    """Request header v1 or v2, whichever the API version calls for."""
    parts = [_FIXED.pack(api_key, api_version, correlation_id)]
    if request_header_version(api_key, api_version) == 0:
        return parts[0]
    if client_id is None:
        parts.append(_INT16.pack(-1))
    else:
        encoded = client_id.encode("utf-8")
        if len(encoded) > 0x7FFF:
            raise ValueError("client_id longer than 32767 bytes")
        parts.append(_INT16.pack(len(encoded)))
        parts.append(encoded)
    if is_flexible(api_key, api_version):
        parts.append(_EMPTY_TAGGED_FIELDS)
    return b"".join(parts)


def encode_response_header(api_key: int, api_version: int, correlation_id: int) -> bytes:
    """Response header v0 or v1 for the given request's API version."""
    if response_header_version(api_key, api_version) == 1:
        return _INT32.pack(correlation_id) + _EMPTY_TAGGED_FIELDS
    return _INT32.pack(correlation_id)


def parse_response_header(
    api_key: int, api_version: int, payload: bytes | bytearray | memoryview
) -> tuple[int, int]:
    """Parse a response header; return ``(correlation_id, body_offset)``."""
    if len(payload) < 4:
        raise DecodeError(
            "response header truncated",
            api_key=api_key,
            api_version=api_version,
            error_code=ErrorCode.corrupt_message,
        )
    (correlation_id,) = _INT32.unpack_from(payload, 0)
    offset = 4
    if response_header_version(api_key, api_version) == 1:
        try:
            offset = skip_tagged_fields(payload, offset)
        except ValueError as exc:
            raise DecodeError(
                f"response header tagged fields: {exc}",
                correlation_id=correlation_id,
                api_key=api_key,
                api_version=api_version,
                error_code=ErrorCode.corrupt_message,
            ) from None
    return correlation_id, offset
