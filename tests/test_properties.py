"""odradek.properties: Java's ``Properties.load`` rules, for every config file odradek reads.

The cases marked "(was ...)" are where an earlier parser read a file differently from Java:
the broker's and the perf tools', which this module replaced, or this module's own
hand-written one, which the javaproperties library replaced. Every expected result here is
what Java 17's ``Properties.load`` returns (values trimmed as Kafka's ``ConfigDef`` does)."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.properties import PropertiesError, parse_properties, read_properties


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # The forms Kafka's sample files use.
        ("# c\n! c\n\n  acks=all\nlinger.ms : 5\nclient.id perf\n",
         {"acks": "all", "linger.ms": "5", "client.id": "perf"}),
        ("a = b = c\n", {"a": "b = c"}),
        ("a==b\na:=b\n", {"a": "=b"}),
        ("a\t \f=\t b\n", {"a": "b"}),  # (was: two keys / refused)
        ("long.value = a\\\n    b\\\n\tc\n", {"long.value": "abc"}),
        ("a=1\r\nb=2\rc=3\n", {"a": "1", "b": "2", "c": "3"}),
        ("a=1\na=2\n", {"a": "2"}),
        ("a=trailing  \n", {"a": "trailing"}),  # Kafka's ConfigDef trims values
        # Escapes (was: kept as written, backslashes and all).
        ("ssl.truststore.location=C:\\\\certs\\\\ca.pem\n",
         {"ssl.truststore.location": "C:\\certs\\ca.pem"}),
        ("a=tab\\there\\nnew\\u00e9\\q\n", {"a": "tab\there\nnew\u00e9q"}),
        ("key\\=with\\:seps\\ and\\ spaces=v\n", {"key=with:seps and spaces": "v"}),
        ("a=\\ \\ lead\n", {"a": "  lead"}),
        # An odd count of trailing backslashes continues, an even one does not (was: three
        # did not).
        ("a=x\\\\\\\n y\n", {"a": "x\\y"}),
        ("a=x\\\\\nb=y\n", {"a": "x\\", "b": "y"}),
        # A backslash followed by whitespace escapes it: no continuation (was: joined).
        ("a=x\\ \nb=y\n", {"a": "x", "b": "y"}),
        # A comment never continues; a continued line starting with # is no comment.
        ("# note \\\nb=y\n", {"b": "y"}),
        ("a=1\\\n# more\n", {"a": "1# more"}),
        # The file's last line ending in a backslash: the backslash is dropped (was: the
        # entry was lost).
        ("a=x\\", {"a": "x"}),
        # A continuation into a blank line ends the entry there.
        ("a=x\\\n\nb=y\n", {"a": "x", "b": "y"}),
        # A key alone, an empty key (was: refused by the broker's parser).
        ("flag\nempty=\n=value\n", {"flag": "", "empty": "", "": "value"}),
        # Only \n, \r and \r\n end a line (was: also \f, \v, \x85, \u2028 ...).
        ("a=1\x0b2\u20283\n", {"a": "1\x0b2\u20283"}),
        ("a\fb\n", {"a": "b"}),
        # Lines are joined before escapes are read; a surrogate pair is one character (was:
        # two lone surrogates).
        ("a=\\u00\\\n  41\n", {"a": "A"}),
        ("a=\\uD83D\\uDE00\n", {"a": "\U0001F600"}),
        # A line of only a backslash, continued into a blank line, is no entry (was: "").
        ("  \\\n\nb=y\n", {"b": "y"}),
        # "#:" is a comment like any other.
        ("#:\n#:=x\n#: a=b\n", {}),
    ],
)
def test_java_properties_rules(text: str, expected: dict[str, str]) -> None:
    assert parse_properties(text) == expected


def test_a_malformed_unicode_escape_names_the_line() -> None:
    with pytest.raises(PropertiesError, match=r"f\.properties:3: malformed \\uxxxx"):
        parse_properties("a=1\n\nb=\\u12g4\n", "f.properties")
    with pytest.raises(PropertiesError, match=r"x:1: malformed"):
        parse_properties("b=\\u12", "x")
    # Exactly four hex digits, on the same line: Java refuses all of these.
    for escape in ("\\u 12 ", "\\u+123", "\\u-123", "\\u1_23", "\\u0x12", "\\u\naba"):
        with pytest.raises(PropertiesError, match=r"x:1: malformed"):
            parse_properties(f"a={escape}", "x")


def test_read_properties_errors_are_one_line(tmp_path: Path) -> None:
    path = tmp_path / "c.properties"
    with pytest.raises(PropertiesError, match=r"cannot read config file .*c\.properties"):
        read_properties(path)
    path.write_bytes(b"a=\xe9\n")  # Latin-1, not UTF-8
    with pytest.raises(PropertiesError, match="not a text properties file"):
        read_properties(path)
    path.write_text("a=\u00e9\n", encoding="utf-8")
    assert read_properties(path) == {"a": "\u00e9"}
