"""Log output: Kafka-like text lines or one JSON object per line (``log.format``).

The network layer puts the request being handled in :data:`current_request` (a context
variable, so it follows the request into the tasks it starts and never leaks into another
connection's). :class:`RequestContextFilter` copies it onto every log record emitted while
that request runs, so a line logged anywhere below a handler names the client id, the
listener and the API (name and version) without each call site passing them:

* ``log.format=json``: the fields ``client_id``, ``client_address``, ``listener``, ``api``,
  ``api_version``, ``correlation_id``, ``connection_id`` appear in the object;
* ``log.format=text``: a WARNING or ERROR line gets them as a ``[client_id=... ...]``
  suffix (INFO and DEBUG lines stay as they were).

Anything passed with ``extra=`` shows up in the JSON object too.
"""

from __future__ import annotations

import json
import logging
import sys
import traceback
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

from odradek.protocol.versions import api_name

__all__ = [
    "REQUEST_FIELDS",
    "JsonFormatter",
    "RequestContextFilter",
    "TextFormatter",
    "configure",
    "current_request",
]

# The RequestContext (odradek.broker.requests) of the request being handled, or None.
current_request: ContextVar[Any] = ContextVar("current_request", default=None)

REQUEST_FIELDS = (
    "client_id",
    "client_address",
    "listener",
    "api",
    "api_version",
    "correlation_id",
    "connection_id",
)

# Attributes every LogRecord has: not "context fields" of a JSON line.
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
    "taskName",
}

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def request_fields(ctx: Any) -> dict[str, Any]:
    """The log fields of a RequestContext."""
    header = ctx.header
    return {
        "client_id": header.client_id,
        "client_address": f"{ctx.client_host}:{ctx.client_port}",
        "listener": ctx.listener_name,
        "api": api_name(header.api_key),
        "api_version": header.api_version,
        "correlation_id": header.correlation_id,
        "connection_id": ctx.connection_id,
    }


class RequestContextFilter(logging.Filter):
    """Adds the current request's fields to a record (fields already set are kept)."""

    def filter(self, record: logging.LogRecord) -> bool:
        ctx = current_request.get()
        if ctx is not None and not hasattr(record, "api"):
            for key, value in request_fields(ctx).items():
                setattr(record, key, value)
        return True


class TextFormatter(logging.Formatter):
    """The usual text line; a WARNING or worse inside a request names the request."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        if record.levelno >= logging.WARNING and hasattr(record, "api"):
            suffix = (
                f" [client_id={record.client_id} listener={record.listener} "
                f"api={record.api} v{record.api_version}]"
            )
            first, newline, rest = text.partition("\n")  # before any traceback
            text = first + suffix + newline + rest
        return text


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, then context fields."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = datetime.fromtimestamp(record.created, UTC)
        entry: dict[str, Any] = {
            "time": stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value if isinstance(value, str | int | float | bool) else str(value)
        if record.exc_info:
            entry["exception"] = "".join(traceback.format_exception(*record.exc_info)).rstrip()
        elif record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = record.stack_info
        return json.dumps(entry, ensure_ascii=False)


def configure(level: int, log_format: str = "text") -> None:
    """Set up the root logger for the broker process (``odradek server``)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    handler.addFilter(RequestContextFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
