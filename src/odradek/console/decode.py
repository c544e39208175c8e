"""How the message browser shows a key, a value or a header value: text, JSON or hex."""

from __future__ import annotations

import json
from dataclasses import dataclass

FORMATS = ("text", "json", "hex")


@dataclass(frozen=True, slots=True)
class Formats:
    """How to show each part of a record; each one of :data:`FORMATS`."""

    key: str = "text"
    value: str = "text"
    headers: str = "text"

    def __post_init__(self) -> None:
        for part in ("key", "value", "headers"):
            if getattr(self, part) not in FORMATS:
                raise ValueError(
                    f"{part} format must be one of {', '.join(FORMATS)}, "
                    f"not {getattr(self, part)!r}"
                )


@dataclass(frozen=True, slots=True)
class Shown:
    """One decoded byte string; ``note`` says when the chosen format did not fit."""

    text: str | None  # None: the field is null
    note: str = ""


def show(data: bytes | None, fmt: str) -> Shown:
    """``data`` in format ``fmt``. Text replaces invalid UTF-8 (and says so); JSON that does
    not parse falls back to text with a note, so one odd record does not hide the rest."""
    if data is None:
        return Shown(None)
    if fmt == "hex":
        return Shown(data.hex(" ", 1) if data else "")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return Shown(data.decode("utf-8", errors="replace"), "not valid UTF-8")
    if fmt == "json":
        try:
            return Shown(json.dumps(json.loads(text), indent=2, ensure_ascii=False))
        except ValueError:
            return Shown(text, "not JSON")
    return Shown(text)
