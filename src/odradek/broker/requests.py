"""What a request handler gets from the network layer and may give back.

The contract between the network layer (:mod:`odradek.broker.connection`, which reads
frames and writes answers) and every handler: the :class:`RequestContext` handed in with
each decoded request, the answer types a handler may return besides a kio response
entity (:class:`ChunkedResponse`, :class:`DeferredResponse`, :class:`ResponseValues`),
the :class:`RequestHandler` protocol, and the ``current_listener`` context variable. Kept
apart from the connection and the listener so that handlers depend on these few types
only, never on the server that calls them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol

from odradek.protocol.headers import RequestHeader

__all__ = [
    "current_listener",
    "ChunkedResponse",
    "DeferredResponse",
    "RequestContext",
    "RequestHandler",
    "ResponseValues",
]


# The listener of the request being handled, for code that gets no RequestContext (the
# group coordinator asks for its own endpoint, which depends on the listener). Each
# connection's processor task sets it once; tasks copy the context they start in.
current_listener: ContextVar[str] = ContextVar("current_listener", default="PLAINTEXT")


@dataclass(slots=True)
class RequestContext:
    """Who sent a request and its header; handed to the handler with the request."""

    header: RequestHeader
    client_host: str
    client_port: int
    connection_id: str
    received_at: float = 0.0  # the server clock when the frame was complete
    listener_name: str = "PLAINTEXT"  # the listener the request came in on
    principal: str = "User:ANONYMOUS"  # who authenticated (TLS certificate or SASL)
    # With an authorizer: the request's access check (security.enforcement.Check), for
    # handlers that authorise inside (Fetch); None when every request is allowed.
    authz: Any = None
    # KIP-219: a throttled handler calls this with the throttle time (ms); the connection
    # reads nothing more until it is over. None outside a connection (tests).
    mute: Callable[[int], None] | None = None


@dataclass(slots=True)
class ChunkedResponse:
    """A pre-encoded, framed response (size prefix included) as bytes and file regions.

    Regions need ``fd``, ``position`` and ``length``; ``encode_fetch_response`` builds these.
    """

    chunks: list[bytes | Any]


@dataclass(slots=True)
class DeferredResponse:
    """The handler's ordering-sensitive work is done; the response comes later.

    ``result`` resolves to what ``handle`` could have returned (entity, ChunkedResponse,
    None). Later requests of the connection are handled meanwhile; responses still go
    out in request order.
    """

    result: Awaitable[object | None]


@dataclass(slots=True)
class ResponseValues:
    """A response given as ``build_response`` values, built and encoded by the network
    layer: on an executor thread when ``items`` (a handler's count of array elements)
    is large, so a response listing a million partitions does not block the loop."""

    values: dict[str, Any]
    items: int = 0


class RequestHandler(Protocol):
    async def handle(self, ctx: RequestContext, request: object) -> object | None:
        """Return a kio response entity, a ChunkedResponse, a DeferredResponse or None."""
        ...

