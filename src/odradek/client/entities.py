"""Small helpers around kio entities for the client.

Requests are built with the project's one builder, :mod:`odradek.protocol.build`: the client
describes a request once as keyword arguments (the union of the fields it knows across
versions) and the builder fits it to the version negotiated with the broker, dropping fields
that version lacks and converting integer milliseconds to kio's timedelta/datetime leaves.
Reading responses is plain ``getattr(entity, name, default)``; :func:`ms` and :func:`epoch_ms`
turn kio's timedelta/datetime values back into integer milliseconds.
"""

from __future__ import annotations

import datetime
import functools
from typing import Any

from kio.schema.index import api_key_map, schema_name_map

from odradek.protocol import build as _build
from odradek.protocol.versions import api_name

__all__ = ["api_name", "build_request", "epoch_ms", "kio_range", "ms"]

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def build_request(api_key: int, version: int, /, **values: Any) -> Any:
    """The kio request entity of ``version`` filled from ``values`` (see module docstring)."""
    return _build.build_request(api_key, version, values)


@functools.cache
def kio_range(api_key: int) -> tuple[int, int] | None:
    """The (min, max) versions kio has classes for, or None for an API kio does not know."""
    name = api_key_map.get(api_key)
    if name is None:
        return None
    versions = schema_name_map[name].keys()
    return min(versions), max(versions)


def ms(value: datetime.timedelta | int | None) -> int:
    """A kio timedelta (or a plain int) as integer milliseconds; None -> 0."""
    if value is None:
        return 0
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    return int(value)


def epoch_ms(value: datetime.datetime | int | None) -> int:
    """A kio timestamp (or a plain int) as epoch milliseconds; None -> -1 (Kafka's 'no time')."""
    if value is None:
        return -1
    if isinstance(value, datetime.datetime):
        return (value - _EPOCH) // datetime.timedelta(milliseconds=1)
    return int(value)
