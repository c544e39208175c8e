"""Java ``.properties`` files, read by the rules of ``java.util.Properties.load``.

Kafka reads every configuration file this way (``server.properties``,
``--command-config``, ``--producer.config``/``--consumer.config``, ``--formatter-config``),
so odradek's broker and CLI read them with this one parser:

- lines end at ``\\n``, ``\\r`` or ``\\r\\n``; whitespace (space, tab, form feed) before a
  line's first character is skipped; blank lines and lines whose first character is
  ``#`` or ``!`` are comments;
- a line ending in an odd number of backslashes continues on the next line, whose
  leading whitespace is skipped (a comment line never continues; a continued line that
  starts with ``#`` is not a comment);
- the key runs to the first unescaped ``=``, ``:`` or whitespace; whitespace, then one
  ``=`` or ``:``, then whitespace again separate it from the value (``key=value``,
  ``key: value``, ``key value``; a key alone has the value ``""``);
- in keys and values ``\\t``, ``\\n``, ``\\r``, ``\\f`` and ``\\uXXXX`` are escapes, and a
  backslash before any other character stands for that character (``\\=``, ``\\:``,
  ``\\ ``, ``\\\\``; ``C:\\\\certs`` is ``C:\\certs``).

Two deliberate differences: the file is read as UTF-8 (Java's ``load(InputStream)`` reads
ISO-8859-1 and leaves the rest to ``\\uXXXX``; odradek refuses bytes that are not UTF-8
with one line rather than reading them as Latin-1), and a value loses its trailing
whitespace, as Kafka's ``ConfigDef`` trims every value it parses.
"""

from __future__ import annotations

import re
from pathlib import Path

_LINE_END = re.compile(r"\r\n|\r|\n")
_WHITESPACE = " \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


class PropertiesError(ValueError):
    """A properties file that cannot be read: missing, not UTF-8, a bad ``\\u`` escape."""


def read_properties(path: Path) -> dict[str, str]:
    """The file's properties, later keys winning; :class:`PropertiesError` if unreadable."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise PropertiesError(f"cannot read config file {path}: {exc.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PropertiesError(
            f"{path}: not a text properties file (byte {exc.start} is not UTF-8)"
        ) from None
    return parse_properties(text, str(path))


def parse_properties(text: str, source: str = "<properties>") -> dict[str, str]:
    """``text`` read as ``Properties.load`` reads it; ``source`` names it in errors."""
    props: dict[str, str] = {}
    lines = _LINE_END.split(text)
    number = 0
    while number < len(lines):
        line = lines[number].lstrip(_WHITESPACE)
        number += 1
        first = number
        if not line or line[0] in "#!":
            continue
        pieces = []
        while _continues(line) and number < len(lines):
            pieces.append(line[:-1])
            line = lines[number].lstrip(_WHITESPACE)
            number += 1
        if _continues(line):  # the file's last line: Java drops the lone backslash
            line = line[:-1]
        pieces.append(line)
        key, value = _split(_escaped_chars("".join(pieces), source, first))
        props[key] = value.rstrip()
    return props


def _continues(line: str) -> bool:
    """An odd number of trailing backslashes: the last one joins the next line."""
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _escaped_chars(entry: str, source: str, number: int) -> list[tuple[str, bool]]:
    """The entry's characters, each with whether a backslash escaped it."""
    chars: list[tuple[str, bool]] = []
    i = 0
    while i < len(entry):
        char = entry[i]
        i += 1
        if char != "\\":
            chars.append((char, False))
            continue
        if i == len(entry):
            break  # a lone trailing backslash stands for nothing
        char = entry[i]
        i += 1
        if char == "u":
            digits = entry[i : i + 4]
            if len(digits) != 4 or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise PropertiesError(f"{source}:{number}: malformed \\uxxxx encoding")
            chars.append((chr(int(digits, 16)), True))
            i += 4
        else:
            chars.append((_ESCAPES.get(char, char), True))
    return chars


def _split(chars: list[tuple[str, bool]]) -> tuple[str, str]:
    """Key and value: the key ends at the first unescaped ``=``, ``:`` or whitespace."""
    cut = next(
        (i for i, (c, escaped) in enumerate(chars) if not escaped and c in "=:" + _WHITESPACE),
        len(chars),
    )
    rest = cut
    while rest < len(chars) and not chars[rest][1] and chars[rest][0] in _WHITESPACE:
        rest += 1
    if rest < len(chars) and not chars[rest][1] and chars[rest][0] in "=:":
        rest += 1
        while rest < len(chars) and not chars[rest][1] and chars[rest][0] in _WHITESPACE:
            rest += 1
    key = "".join(c for c, _ in chars[:cut])
    return key, "".join(c for c, _ in chars[rest:])
