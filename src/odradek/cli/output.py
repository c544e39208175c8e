"""What the client verbs (topics, produce, consume, groups) share.

* :func:`bootstrap_option` — ``--bootstrap-server`` on every verb, default 127.0.0.1:9092
  (also read from ``ODRADEK_BOOTSTRAP_SERVER``), as Kafka's tools spell it, and with it
  ``--command-config`` (client properties for secured listeners, see command_config.py).
* :func:`run` — run one coroutine on a fresh event loop (uvloop when installed).
* Parsers for ``key=value`` arguments (``--config``, ``--add-config``, ``--header``,
  ``--property``) and for separators written with backslash escapes (``'\\t'``).
* :class:`RecordFormatter` — one consumed record as one line of bytes, the way
  kafka-console-consumer's ``DefaultMessageFormatter`` prints it. With every field on::

      CreateTime:1700000000000<sep>Partition:0<sep>Offset:42<sep>h1:v1,h2:v2<sep>key<sep>value

  where ``<sep>`` is ``key.separator`` (a tab by default). A missing timestamp prints
  ``NO_TIMESTAMP``, a record without headers ``NO_HEADERS``, a null key, value or header
  value prints ``null.literal`` (``null``). Keys and values are written as raw bytes.
* ``--formatter`` / ``--formatter-config`` of kafka-console-consumer: :func:`formatter_class`
  (Default or NoOp formatter, by short or Kafka class name), :class:`NoOpFormatter`,
  :func:`read_formatter_config`.
* :func:`table` — left-aligned columns for listings.

Every user mistake found here raises :class:`~odradek.cli.errors.CliError` (one line on
stderr, exit code 1).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click

from odradek.cli.command_config import command_config_option, connection_hint
from odradek.cli.errors import CliError

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
BOOTSTRAP_ENV = "ODRADEK_BOOTSTRAP_SERVER"


def bootstrap_option(command: F) -> F:
    """Add ``--bootstrap-server HOST:PORT[,HOST:PORT...]`` (parameter ``bootstrap_server``)
    and ``--command-config FILE`` (no parameter: see :func:`client_security`)."""
    command = command_config_option(command)
    return click.option(
        "--bootstrap-server",
        "-b",
        "bootstrap_server",
        default=DEFAULT_BOOTSTRAP,
        envvar=BOOTSTRAP_ENV,
        show_default=True,
        metavar="HOST:PORT[,...]",
        help=f"Broker(s) to connect to (also ${BOOTSTRAP_ENV}).",
    )(command)


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` to completion on a new event loop and return its result.

    A broker that hung up while the connection was being set up (the client's
    ConnectionSetupError) is one error line that also says what is likely wrong: the
    listener's security protocol is not the client's (see :func:`connection_hint`)."""
    from odradek.client.errors import ClientError, ConnectionSetupError

    try:
        try:
            import uvloop
        except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
            return asyncio.run(coroutine)
        return uvloop.run(coroutine)
    except ClientError as exc:
        causes = (exc, *getattr(exc, "causes", ()))
        if any(isinstance(cause, ConnectionSetupError) for cause in causes):
            raise CliError(f"{exc}: {connection_hint()}") from None
        raise


def check_bootstrap(value: str) -> str:
    """Validate ``--bootstrap-server`` early so a typo is a usage error, not a hang."""
    from odradek.client.core import parse_bootstrap_servers

    try:
        parse_bootstrap_servers(value)
    except ValueError as exc:
        raise CliError(f"--bootstrap-server: {exc}") from None
    return value


# -- argument parsing --------------------------------------------------------------------


def parse_key_value(text: str, option: str) -> tuple[str, str]:
    """``'k=v'`` -> ``('k', 'v')``; the value may itself contain ``=`` and ``,``."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise CliError(f"{option} expects KEY=VALUE, got {text!r}")
    return key, value


def parse_key_values(pairs: Iterable[str], option: str) -> dict[str, str]:
    """Several ``k=v`` arguments as a dict; naming a key twice is a mistake, not an override."""
    result: dict[str, str] = {}
    for pair in pairs:
        key, value = parse_key_value(pair, option)
        if key in result:
            raise CliError(f"{option}: {key!r} given more than once")
        result[key] = value
    return result


def parse_headers(pairs: Iterable[str]) -> list[tuple[str, bytes | None]]:
    """``--header k=v`` arguments as record headers; ``k`` alone is a header with a null value.

    Header keys may repeat (Kafka headers are a list, not a map), so order is kept.
    """
    headers: list[tuple[str, bytes | None]] = []
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not key:
            raise CliError(f"--header expects KEY=VALUE or KEY, got {pair!r}")
        headers.append((key, value.encode() if sep else None))
    return headers


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "0": "\0", "\\": "\\"}


def unescape(text: str, option: str) -> str:
    """Interpret ``\\t``, ``\\n``, ``\\r``, ``\\0`` and ``\\\\`` so separators can be typed."""
    out: list[str] = []
    chars = iter(text)
    for char in chars:
        if char != "\\":
            out.append(char)
            continue
        nxt = next(chars, None)
        if nxt is None or nxt not in _ESCAPES:
            raise CliError(
                f"{option}: unknown escape '\\{nxt or ''}' in {text!r} (use \\t \\n \\r \\0 \\\\)"
            )
        out.append(_ESCAPES[nxt])
    return "".join(out)


def parse_bool(text: str, option: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "yes", "1"):
        return True
    if lowered in ("false", "no", "0"):
        return False
    raise CliError(f"{option}: expected true or false, got {text!r}")


# -- record output -------------------------------------------------------------------------

_TIMESTAMP_TYPES = {0: "CreateTime", 1: "LogAppendTime"}


def timestamp_type_name(timestamp_type: object) -> str | None:
    """Kafka's name of a timestamp type (int attribute bit or a name); None = no timestamp."""
    if isinstance(timestamp_type, str):
        return timestamp_type or None
    if isinstance(timestamp_type, int):
        return _TIMESTAMP_TYPES.get(timestamp_type)
    name = getattr(timestamp_type, "name", None)
    if isinstance(name, str):
        return {"CREATE_TIME": "CreateTime", "LOG_APPEND_TIME": "LogAppendTime"}.get(name, name)
    return None


@dataclass(frozen=True, slots=True)
class RecordFormatter:
    """Kafka's DefaultMessageFormatter: which fields to print and how to separate them."""

    print_timestamp: bool = False
    print_partition: bool = False
    print_offset: bool = False
    print_headers: bool = False
    print_key: bool = False
    print_value: bool = True
    key_separator: str = "\t"
    line_separator: str = "\n"
    headers_separator: str = ","
    null_literal: str = "null"

    # The kafka-console-consumer --property names this formatter understands.
    PROPERTIES = (
        "print.timestamp",
        "print.partition",
        "print.offset",
        "print.headers",
        "print.key",
        "print.value",
        "key.separator",
        "line.separator",
        "headers.separator",
        "null.literal",
    )

    def with_properties(self, properties: dict[str, str]) -> RecordFormatter:
        """A copy with kafka-console-consumer ``--property`` settings applied."""
        changes: dict[str, Any] = {}
        for name, raw in properties.items():
            if name not in self.PROPERTIES:
                raise CliError(
                    f"--property: unknown formatter property {name!r} "
                    f"(known: {', '.join(self.PROPERTIES)})"
                )
            field = name.replace(".", "_")
            if name.startswith("print."):
                changes[field] = parse_bool(raw, f"--property {name}")
            else:
                changes[field] = unescape(raw, f"--property {name}")
        return dataclasses.replace(self, **changes)

    def format(
        self,
        *,
        partition: int,
        offset: int,
        timestamp_ms: int,
        timestamp_type: object,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]],
    ) -> bytes:
        """One record as bytes, line separator included."""
        null = self.null_literal.encode()
        fields: list[bytes] = []
        if self.print_timestamp:
            type_name = timestamp_type_name(timestamp_type)
            if type_name is None or timestamp_ms < 0:
                fields.append(b"NO_TIMESTAMP")
            else:
                fields.append(f"{type_name}:{timestamp_ms}".encode())
        if self.print_partition:
            fields.append(f"Partition:{partition}".encode())
        if self.print_offset:
            fields.append(f"Offset:{offset}".encode())
        if self.print_headers:
            if headers:
                fields.append(
                    self.headers_separator.encode().join(
                        name.encode() + b":" + (null if hvalue is None else bytes(hvalue))
                        for name, hvalue in headers
                    )
                )
            else:
                fields.append(b"NO_HEADERS")
        if self.print_key:
            fields.append(null if key is None else bytes(key))
        if self.print_value:
            fields.append(null if value is None else bytes(value))
        return self.key_separator.encode().join(fields) + self.line_separator.encode()


FORMATTERS = ("DefaultMessageFormatter", "NoOpMessageFormatter")
# Where Kafka's formatters live: kafka.tools before 3.7, org.apache.kafka.tools.consumer since.
_FORMATTER_PACKAGES = ("", "kafka.tools.", "org.apache.kafka.tools.consumer.")


class NoOpFormatter:
    """Kafka's NoOpMessageFormatter: records are read and counted, nothing is printed."""

    def format(self, **_: object) -> bytes:
        return b""


def formatter_class(name: str | None) -> str:
    """``--formatter``: the short name of a supported Kafka formatter class."""
    if name is None:
        return FORMATTERS[0]
    for short in FORMATTERS:
        if name.strip() in (package + short for package in _FORMATTER_PACKAGES):
            return short
    raise CliError(
        f"--formatter: unsupported formatter {name!r} (supported: {', '.join(FORMATTERS)})"
    )


def read_formatter_config(path: Path | None) -> dict[str, str]:
    """``--formatter-config``: formatter properties from a Java-style properties file."""
    if path is None:
        return {}
    from odradek.broker.config import ConfigError, read_properties

    try:
        return read_properties(path)
    except ConfigError as exc:
        raise CliError(f"--formatter-config: {exc}") from None


# -- tables ----------------------------------------------------------------------------------


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """Rows under headers in left-aligned columns two spaces apart (no trailing spaces)."""
    text_rows = [[str(cell) for cell in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in text_rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    lines = []
    for row in [list(headers), *text_rows]:
        lines.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
    return "\n".join(lines)
