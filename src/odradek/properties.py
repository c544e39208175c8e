"""Java ``.properties`` files, read by the rules of ``java.util.Properties.load``.

Kafka reads every configuration file this way (``server.properties``,
``--command-config``, ``--producer.config``/``--consumer.config``, ``--formatter-config``),
so odradek's broker and CLI read them all through this module. The parsing itself is
jwodder's ``javaproperties`` library; in short, its rules (Java's):

- lines end at ``\\n``, ``\\r`` or ``\\r\\n`` (not at ``\\f``, ``\\v`` or U+2028); whitespace
  (space, tab, form feed) before a line's first character is skipped; blank lines and lines
  whose first character is ``#`` or ``!`` are comments;
- a line ending in an odd number of backslashes continues on the next line, whose
  leading whitespace is skipped (a comment line never continues; a continued line that
  starts with ``#`` is not a comment);
- the key runs to the first unescaped ``=``, ``:`` or whitespace; whitespace, then one
  ``=`` or ``:``, then whitespace again separate it from the value (``key=value``,
  ``key: value``, ``key value``; a key alone has the value ``""``); a later key wins;
- in keys and values ``\\t``, ``\\n``, ``\\r``, ``\\f`` and ``\\uXXXX`` (exactly four hex
  digits) are escapes, and a backslash before any other character stands for that
  character (``\\=``, ``\\:``, ``\\ ``, ``\\\\``; ``C:\\\\certs`` is ``C:\\certs``).

What this module adds: the file is read as UTF-8 (Java's ``load(InputStream)`` reads
ISO-8859-1 and leaves the rest to ``\\uXXXX``; odradek refuses bytes that are not UTF-8
with one line rather than reading them as Latin-1), a value loses its trailing whitespace
(Kafka's ``ConfigDef`` trims every value it parses), and errors name the file and line.

Libraries compared with Java 17's ``Properties.load`` (November 2026: tests/test_properties.py,
edge cases, 12,000 random inputs):

- ``javaproperties`` 0.8.2 (Dec 2024, MIT, no dependencies): agrees with Java everywhere
  except on a line that holds nothing but a backslash, where Java's ``LineReader`` has
  quirks: such a line as the file's last (``"\\\\"``) makes Java add the entry ``"" = ""``,
  and the line after one starts afresh for Java (``"\\\\\\n#x=y"`` is a comment to Java, the
  key ``#x`` here). The hand-written parser this replaced also differed from Java on such
  lines (in other ways), and split ``\\uD83D\\uDE00`` into two lone surrogates, not one
  character.
- ``jproperties`` 2.1.2 (Jul 2024): not usable. ``\\u`` takes any four characters that
  Python's ``int(.., 16)`` accepts, so Java's errors ``\\u 12 ``, ``\\u+123``, ``\\u1_23``,
  ``\\u0x12`` become characters and ``\\u`` reads across line ends (``"\\\\u\\naba"``);
  ``\\u-123`` raises ``struct.error``; a lone surrogate escape (``\\uD800``) is refused; a
  comment ``#:`` or ``#:=x`` is parsed as its "metadata" and refused for its empty key.
"""

from __future__ import annotations

import re
from pathlib import Path

import javaproperties

_LINE_END = re.compile(r"\r\n|\r|\n")


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
    line = 1  # where the element being parsed starts, for the error message
    try:
        # parse() yields comments and blank lines too, each with its source text, so the
        # lines are counted; a str is split only at \n, \r and \r\n, as Java does.
        for element in javaproperties.parse(text):
            if isinstance(element, javaproperties.KeyValue):
                props[element.key] = element.value.rstrip()
            line += len(_LINE_END.findall(element.source))
    except javaproperties.InvalidUEscapeError:
        raise PropertiesError(f"{source}:{line}: malformed \\uxxxx encoding") from None
    return props
