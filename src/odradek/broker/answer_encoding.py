"""From a handler's result to the bytes a connection sends, and the answers to failures.

A handler returns a kio response entity, a :class:`~odradek.broker.requests.ResponseValues`
(built here), a :class:`~odradek.broker.requests.ChunkedResponse` (already encoded, maybe
with file regions) or None (no answer, as for Produce with ``acks=0``);
:func:`encode_answer` turns any of them into what the connection's writer takes. When a
handler fails or its answer cannot be encoded, the request gets Kafka's answer to a
broker bug (UNKNOWN_SERVER_ERROR, or a closed connection where the client expects no
answer) and one log line with the traceback. Apart from the connection because it is
per-request answer policy, not connection state: it runs on executor threads too.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from odradek.broker.requests import ChunkedResponse, RequestContext, ResponseValues
from odradek.broker.response_writer import Close, Outgoing
from odradek.protocol.build import build_response
from odradek.protocol.codec import encode_response
from odradek.protocol.error_responses import error_response
from odradek.protocol.errors import DecodeError, ErrorCode
from odradek.protocol.headers import RequestHeader
from odradek.protocol.versions import PRODUCE, api_name

if TYPE_CHECKING:
    from odradek.broker.network import NetworkServer

__all__ = ["describe_undecodable", "encode_answer", "handler_failed"]


def encode_answer(
    header: RequestHeader, request: object, result: object, server: NetworkServer
) -> Outgoing | None:
    """``result`` as the writer takes it (None: nothing to send); an answer that cannot be
    encoded is logged on ``server``'s logger and answered with UNKNOWN_SERVER_ERROR."""
    if result is None:
        return None
    if isinstance(result, ChunkedResponse):
        chunks = result.chunks
        if len(chunks) == 1 and isinstance(chunks[0], bytes):
            return chunks[0]  # one encoded answer: may be written at once
        return list(chunks)
    try:
        if isinstance(result, ResponseValues):
            values, result.values = result.values, {}  # freed once built, not after
            result = build_response(header.api_key, header.api_version, values)
            del values
        return encode_response(header, result)
    except Exception:
        server.logger.exception(
            "cannot encode the response to %s v%d (correlation id %d) for client %s on "
            "listener %s",
            api_name(header.api_key),
            header.api_version,
            header.correlation_id,
            header.client_id,
            server.listener_name,
        )
        return _error_answer(header, request, ErrorCode.unknown_server_error)


def handler_failed(ctx: RequestContext, request: object, log: logging.Logger) -> Outgoing:
    """The answer to a request whose handler raised (called from its ``except``: the
    traceback is logged)."""
    header = ctx.header
    log.exception(
        "handler failed for %s v%d (correlation id %d) from client %s on listener %s, "
        "connection %s",
        api_name(header.api_key),
        header.api_version,
        header.correlation_id,
        header.client_id,
        ctx.listener_name,
        ctx.connection_id,
    )
    if header.api_key == PRODUCE and getattr(request, "acks", None) == 0:
        # The client expects no response; closing is the only way to tell it.
        return Close("handler failed for a Produce request with acks=0")
    return _error_answer(header, request, ErrorCode.unknown_server_error)


def describe_undecodable(exc: DecodeError, listener_name: str) -> str:
    """What is known of a request that did not decode, for its log line."""
    parts = []
    if exc.api_key is not None:
        version = "?" if exc.api_version is None else exc.api_version
        parts.append(f"api {api_name(exc.api_key)} v{version}")
    parts.append(f"correlation id {exc.correlation_id}")
    client_id = getattr(exc.header, "client_id", None)
    if client_id is not None:
        parts.append(f"client id {client_id}")
    parts.append(f"listener {listener_name}")
    return ", ".join(parts)


def _error_answer(header: RequestHeader, request: object, code: ErrorCode) -> bytes:
    response = error_response(header.api_key, header.api_version, request, code)
    return encode_response(header, response)
