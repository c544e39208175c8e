"""Kafka's inline JAAS syntax (``sasl.jaas.config``): ``LoginModule flag key="value" ...;``.

Only what a broker reads from it is parsed: the login module class and its options.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["JaasConfig", "JaasError", "parse_jaas"]

_TOKEN = re.compile(r'\s*([A-Za-z0-9_.$-]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^\s;"]+)\s*')
_HEAD = re.compile(r"\s*([A-Za-z0-9_.$]+)\s+(required|requisite|sufficient|optional)\s*")


class JaasError(ValueError):
    """The value is not one ``LoginModule flag options;`` entry."""


@dataclass(frozen=True, slots=True)
class JaasConfig:
    login_module: str
    options: dict[str, str]


def parse_jaas(text: str) -> JaasConfig:
    head = _HEAD.match(text)
    if head is None:
        raise JaasError("expected 'LoginModuleClass required key=\"value\" ...;'")
    options: dict[str, str] = {}
    position = head.end()
    while True:
        match = _TOKEN.match(text, position)
        if match is None:
            break
        value = match.group(2)
        if value.startswith('"'):
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        options[match.group(1)] = value
        position = match.end()
    rest = text[position:].strip()
    if rest != ";":
        raise JaasError("a JAAS entry must end with ';' after its options")
    return JaasConfig(head.group(1), options)
