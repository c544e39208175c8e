"""Small helpers shared by the handlers."""

from __future__ import annotations

import asyncio
import types
import typing
from collections.abc import Callable
from datetime import timedelta
from functools import cache, partial
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from odradek.broker.requests import ResponseValues
from odradek.protocol.build import build, build_response, response_class

if TYPE_CHECKING:
    from odradek.broker.requests import RequestContext


def respond(ctx: RequestContext, values: dict[str, Any]) -> Any:
    """The response entity for the API and version this request used."""
    return build_response(ctx.header.api_key, ctx.header.api_version, values)


def error_code(name: str) -> ErrorCode:
    """ErrorCode from a Kafka error name such as ``TOPIC_ALREADY_EXISTS``."""
    return ErrorCode[name.lower()]


# Items a handler processes between two yields to the event loop: ~1-3 ms of work.
YIELD_EVERY = 200
# Responses with more array elements than this are encoded off the event loop.
LARGE_RESPONSE_ITEMS = 2000


class Ticker:
    """Counts the items a handler works through, to yield to the event loop now and then.

    A request may list a million partitions; a handler that loops over them without an
    ``await`` holds the event loop, and every other connection, for seconds. Call
    ``await ticker.tick()`` once per item: every ``YIELD_EVERY`` items it lets the loop
    serve other connections. ``count`` is the total, for ``respond_many``.
    """

    __slots__ = ("_due", "count")

    def __init__(self) -> None:
        self.count = 0
        self._due = YIELD_EVERY

    async def tick(self) -> None:
        self.count += 1
        if self.count >= self._due:
            self._due += YIELD_EVERY
            await asyncio.sleep(0)


def respond_many(ctx: RequestContext, values: dict[str, Any], items: int) -> Any:
    """Like ``respond``, for responses with ``items`` array elements: large ones are built
    and encoded by the network layer on its threads rather than on the event loop."""
    del ctx  # the network layer builds it for the request's API and version
    return ResponseValues(values, items)


@cache
def _element_class(api_key: int, api_version: int, path: tuple[str, ...]) -> type:
    cls: Any = response_class(api_key, api_version)
    for name in path:
        hint = typing.get_type_hints(cls)[name]
        if typing.get_origin(hint) in (typing.Union, types.UnionType):
            hint = next(a for a in typing.get_args(hint) if a is not type(None))
        cls = typing.get_args(hint)[0]  # tuple[Element, ...]
    return cls


def element_builder(ctx: RequestContext, *path: str) -> Callable[[dict[str, Any]], Any]:
    """Builds one element of the response array at ``path`` (field names from the top)
    for this request's API and version. A handler answering a million partitions builds
    each as it goes instead of holding a million dicts until the end (~190 bytes each)."""
    header = ctx.header
    return partial(build, _element_class(header.api_key, header.api_version, path))


_ONE_MS = timedelta(milliseconds=1)


def millis(value: Any) -> int:
    """A request's timeout in whole milliseconds: kio decodes timeouts as timedelta
    (floor division, since total_seconds() * 1000 gives 1000.999... for 1001); a plain
    number is milliseconds already."""
    if isinstance(value, timedelta):
        return value // _ONE_MS
    return int(value or 0)
