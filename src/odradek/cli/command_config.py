"""``--command-config FILE``: the client properties of every command that talks to a broker.

Kafka's tools (kafka-topics.sh, kafka-consumer-groups.sh, kafka-configs.sh, ...) read a Java
client properties file given with ``--command-config``; its ``security.protocol``,
``sasl.mechanism``, ``sasl.jaas.config`` and ``ssl.*`` keys say how to reach a secured
listener. :func:`odradek.cli.output.bootstrap_option` adds the option next to
``--bootstrap-server``, so a command that can reach a broker can also reach a secured one
and no command declares it on its own.

The option does not change the command's parameters: its value is kept on the click
context, and the code that builds a client asks :func:`client_security` for the settings
(read once, then cached). A file that cannot be read or used is one error line naming the
option and the file; the settings themselves are checked by
:meth:`~odradek.client.security.ClientSecurity.from_properties`. :func:`command_config_alias`
gives the option an older name a tool still takes (the console producer's
``--producer.config``); naming two different files is an error.

A key the command does not use is not an error: like Kafka's clients (AbstractConfig's
logUnused) the command warns on stderr, one ``WARN`` line per key, and runs on.
:func:`unused_warning` words it: a name that is none of Kafka's client settings
(odradek.client.config_names) is probably a typo ("was supplied but isn't a known config",
Kafka's words); a real Kafka setting odradek does not use is said to have no effect.

A broker that hangs up while a connection is set up is most often a listener whose security
protocol is not the client's: :func:`connection_hint` is what the error line then adds.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any, TypeVar

import click

from odradek.cli.errors import CliError
from odradek.client.config_names import KAFKA_CLIENT_SETTINGS
from odradek.client.security import SECURITY_KEYS, ClientSecurity, SecurityConfigError

F = TypeVar("F", bound=Callable[..., Any])

OPTION = "--command-config"
_PATH_KEY = "odradek.command_config"
_OPTION_KEY = "odradek.command_config_option"
_SECURITY_KEY = "odradek.client_security"
_PROPERTIES_KEY = "odradek.command_config_properties"


def _remember(ctx: click.Context, param: click.Parameter, value: Path | None) -> None:
    if value is None:
        return
    given = param.opts[0]
    if ctx.meta.get(_PATH_KEY, value) != value:
        raise CliError(f"{given} and {ctx.meta[_OPTION_KEY]} name different files")
    ctx.meta[_PATH_KEY] = value
    ctx.meta[_OPTION_KEY] = given


def _file_option(name: str, help_text: str) -> Callable[[F], F]:
    """An option naming the client properties file, remembered by :func:`_remember`."""
    return click.option(
        name,
        type=click.Path(path_type=Path, dir_okay=False),
        expose_value=False,
        callback=_remember,
        metavar="FILE",
        help=help_text,
    )


def command_config_option(command: F) -> F:
    """Add ``--command-config FILE``; read it with :func:`client_security`."""
    return _file_option(
        OPTION, "Client properties file (security.protocol, sasl.*, ssl.*) for secured listeners."
    )(command)


def command_config_alias(name: str, tool: str) -> Callable[[F], F]:
    """The same option under an older name Kafka's ``tool`` still takes (e.g. the console
    producer's ``--producer.config``, deprecated for ``--command-config`` by KIP-1147)."""
    return _file_option(name, f"Same as --command-config ({tool}'s older name).")


def note_config_file(path: str | Path | None, option: str) -> None:
    """Record a tool's own client properties file (perf's ``--producer.config``), read by
    the tool itself, so that :func:`connection_hint` names it."""
    ctx = click.get_current_context(silent=True)
    if ctx is not None and path is not None and _PATH_KEY not in ctx.meta:
        ctx.meta[_PATH_KEY] = Path(path)
        ctx.meta[_OPTION_KEY] = option


def command_config_path() -> Path | None:
    """The ``--command-config`` file given to the running command, if any."""
    ctx = click.get_current_context(silent=True)
    return None if ctx is None else ctx.meta.get(_PATH_KEY)


def read_client_properties(path: Path, option: str = OPTION) -> dict[str, str]:
    """A client properties file as a dict; unreadable is a one-line :class:`CliError`."""
    from odradek.broker.config import ConfigError, read_properties

    try:
        return read_properties(path)
    except ConfigError as exc:
        raise CliError(f"{option} {path}: {exc}") from None


def unused_warning(key: str) -> str:
    """The warning for a key of a client properties file that the command does not use."""
    if key in KAFKA_CLIENT_SETTINGS:
        return (
            f"The configuration '{key}' is a Kafka client setting that odradek's CLI does not"
            " use: it has no effect."
        )
    return f"The configuration '{key}' was supplied but isn't a known config."


def warn_unused(props: Mapping[str, str], used: Collection[str]) -> None:
    """One ``WARN`` line on stderr for each key of ``props`` not in ``used``."""
    for key in props:
        if key not in used:
            click.echo(f"WARN {unused_warning(key)}", err=True)


def command_properties(used: Collection[str] = SECURITY_KEYS) -> dict[str, str] | None:
    """The running command's ``--command-config`` file as a dict (None: none given), read
    once; the keys not in ``used`` are warned about then."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return None
    if _PROPERTIES_KEY not in ctx.meta:
        path = ctx.meta.get(_PATH_KEY)
        props = None
        if path is not None:
            props = read_client_properties(path, ctx.meta.get(_OPTION_KEY, OPTION))
            warn_unused(props, used)
        ctx.meta[_PROPERTIES_KEY] = props
    properties: dict[str, str] | None = ctx.meta[_PROPERTIES_KEY]
    return properties


def _security(props: Mapping[str, str], path: Path, option: str) -> ClientSecurity:
    """The TLS / SASL settings of a client properties file (one error line if unusable)."""
    try:
        return ClientSecurity.from_properties(props)
    except SecurityConfigError as exc:
        raise CliError(f"{option} {path}: {exc}") from None


def client_security() -> ClientSecurity | None:
    """The running command's ``--command-config`` settings (None: plain connections)."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return None
    if _SECURITY_KEY not in ctx.meta:
        props = command_properties()
        ctx.meta[_SECURITY_KEY] = None
        if props is not None:
            path, option = ctx.meta[_PATH_KEY], ctx.meta.get(_OPTION_KEY, OPTION)
            ctx.meta[_SECURITY_KEY] = _security(props, path, option)
    security: ClientSecurity | None = ctx.meta[_SECURITY_KEY]
    return security


def connection_hint() -> str:
    """What to check when a broker hung up while a connection was set up (the client's
    ConnectionSetupError): the security settings, given or not."""
    ctx = click.get_current_context(silent=True)
    path = None if ctx is None else ctx.meta.get(_PATH_KEY)
    if path is None:
        return (
            "if this listener uses SSL or SASL, pass its client settings with "
            f"{OPTION} FILE (security.protocol, sasl.mechanism, sasl.jaas.config, "
            "ssl.truststore.location)"
        )
    option = ctx.meta.get(_OPTION_KEY, OPTION) if ctx is not None else OPTION
    return (
        f"check that security.protocol in {option} {path} is the listener's "
        "(PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL)"
    )
