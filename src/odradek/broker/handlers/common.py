"""Small helpers shared by the handlers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from odradek.protocol.build import build_response

if TYPE_CHECKING:
    from odradek.broker.network import RequestContext


def respond(ctx: RequestContext, values: dict[str, Any]) -> Any:
    """The response entity for the API and version this request used."""
    return build_response(ctx.header.api_key, ctx.header.api_version, values)


def error_code(name: str) -> ErrorCode:
    """ErrorCode from a Kafka error name such as ``TOPIC_ALREADY_EXISTS``."""
    return ErrorCode[name.lower()]
