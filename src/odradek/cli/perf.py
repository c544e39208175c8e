"""``odradek perf produce|consume``: Kafka's producer and consumer performance tools.

The options and the output lines are those of ``kafka-producer-perf-test.sh``
(:mod:`odradek.cli.perf_produce`) and ``kafka-consumer-perf-test.sh``
(:mod:`odradek.cli.perf_consume`), so scripts that parse Kafka's lines parse these too. Both
run on odradek's own client and work against any Kafka-compatible broker.

When standard output is a terminal a live ``rich`` progress bar sits below the output lines;
piped or redirected, the output is exactly Kafka's plain lines.

This module holds what both share: the ``perf`` group, the security keys of the
``--producer.config`` / ``--consumer.config`` files (read as every properties file is,
:func:`odradek.cli.command_config.read_client_properties`), whose ``security.*``, ``sasl.*``
and ``ssl.*`` keys reach secured listeners, and the live display.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from odradek.cli.errors import CliError
from odradek.client.security import SECURITY_KEYS, ClientSecurity, SecurityConfigError


@click.group("perf", context_settings={"help_option_names": ["-h", "--help"]})
def perf() -> None:
    """Producer and consumer throughput/latency tests (Kafka's perf-test tools)."""


def take_security(props: dict[str, str], option: str) -> ClientSecurity | None:
    """Remove the TLS / SASL keys odradek's client reads (SECURITY_KEYS) from ``props`` and
    return them as settings (None when the file names none); any other ``sasl.*`` or
    ``ssl.*`` key stays, for the caller to warn about as unused."""
    keys = [key for key in props if key in SECURITY_KEYS]
    if not keys:
        return None
    try:
        return ClientSecurity.from_properties({key: props.pop(key) for key in keys})
    except SecurityConfigError as exc:
        raise CliError(f"{option}: {exc}") from None


def java_fixed(value: float, digits: int) -> str:
    """Java's ``%.Nf``: like Python's, but infinities and NaN spelled Java's way."""
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    return f"{value:.{digits}f}"


def java_div(a: float, b: float) -> float:
    """Java's double division: zero divisors give infinity or NaN, not an exception."""
    if b:
        return a / b
    return float("nan") if a == 0 else float("inf")


class LiveDisplay:
    """A rich progress bar on a terminal; does nothing when stdout is piped."""

    def __init__(self, description: str, total: int | None) -> None:
        self.enabled = sys.stdout.isatty()
        self._progress: Any = None
        self._task: Any = None
        if not self.enabled:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self._progress = Progress(
            TextColumn(f"[bold]{description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[detail]}"),
            transient=True,
        )
        self._task = self._progress.add_task(description, total=total, detail="")

    def __enter__(self) -> LiveDisplay:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()

    def print(self, line: str) -> None:
        """One output line: above the live bar on a terminal, plain otherwise."""
        if self._progress is not None:
            self._progress.console.print(line, markup=False, highlight=False, soft_wrap=True)
        else:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    def update(self, completed: int, detail: str) -> None:
        if self._progress is not None:
            self._progress.update(self._task, completed=completed, detail=detail)


def register(cli: click.Group) -> None:
    from odradek.cli import perf_consume, perf_produce

    perf.add_command(perf_produce.produce)
    perf.add_command(perf_consume.consume)
    cli.add_command(perf)
