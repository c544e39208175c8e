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
    "decode_client_id",
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


# (api key, version) -> request header version, for API keys odradek knows; filled as
# versions are seen (a few dozen entries). Looked up on every request.
_HEADER_VERSIONS: dict[tuple[int, int], int] = {}
# Client ids as sent -> decoded: a connection sends the same one on every request.
_CLIENT_IDS: dict[bytes, str] = {}
_CLIENT_IDS_MAX = 4096


def _header_version(api_key: int, api_version: int) -> int:
    key = (api_key, api_version)
    version = _HEADER_VERSIONS.get(key)
    if version is None:
        version = request_header_version(api_key, api_version)
        if len(_HEADER_VERSIONS) < 4096:  # clients may send any version number
            _HEADER_VERSIONS[key] = version
    return version


def decode_client_id(raw: bytes) -> str:
    """A client id as sent, decoded (UnicodeDecodeError if it is not UTF-8), through a
    bounded cache: a connection sends the same one on every request."""
    client_id = _CLIENT_IDS.get(raw)
    if client_id is None:
        client_id = raw.decode("utf-8")
        if len(_CLIENT_IDS) >= _CLIENT_IDS_MAX:
            _CLIENT_IDS.clear()  # bounded: hostile clients may send many
        _CLIENT_IDS[raw] = client_id
    return client_id


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
    offset = REQUEST_HEADER_FIXED_SIZE
    header_version = _header_version(api_key, api_version) if known_api else 1
    if header_version == 0:
        return RequestHeader(api_key, api_version, correlation_id, None), offset
    if size < offset + 2:
        raise _header_error("request header truncated before client_id", payload)
    (length,) = _INT16.unpack_from(payload, offset)
    offset += 2
    client_id: str | None
    if length < 0:
        if length != -1:
            raise _header_error(f"invalid client_id length {length}", payload)
        client_id = None
    else:
        end = offset + length
        if end > size:
            raise _header_error("client_id runs past the end of the frame", payload)
        raw = bytes(payload[offset:end])
        client_id = _CLIENT_IDS.get(raw)
        if client_id is None:
            try:
                client_id = decode_client_id(raw)
            except UnicodeDecodeError as exc:
                raise _header_error(f"client_id is not UTF-8: {exc}", payload) from None
        offset = end
    header = RequestHeader(api_key, api_version, correlation_id, client_id)
    if header_version == 2:
        if offset < size and payload[offset] == 0:
            offset += 1  # no tagged fields: what every client sends
        else:
            try:
                offset = skip_tagged_fields(payload, offset)
            except ValueError as exc:
                raise _header_error(f"request header tagged fields: {exc}", payload) from None
    return header, offset


def _header_error(message: str, payload: bytes | bytearray | memoryview) -> DecodeError:
    """A DecodeError carrying the fixed fields (the caller checked they are present)."""
    api_key, api_version, correlation_id = _FIXED.unpack_from(payload, 0)
    return DecodeError(
        message, correlation_id=correlation_id, api_key=api_key, api_version=api_version
    )


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
