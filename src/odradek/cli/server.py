"""``odradek server``: run one broker (embedded default, or a cluster member)."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import click

from odradek import logformat
from odradek.broker.config import BrokerConfig
from odradek.cli.errors import CliError


@click.command()
@click.argument("config_file", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--override",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Set a broker config (Kafka's key names), after the config file. Repeatable.",
)
@click.option(
    "--log-level",
    default="INFO",
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
    show_default=True,
)
def server(config_file: Path | None, overrides: tuple[str, ...], log_level: str) -> None:
    """Run a broker. With no arguments: 127.0.0.1:9092, data in ./odradek-data.

    CONFIG_FILE is a server.properties file with Kafka's key names.
    """
    config = BrokerConfig.load(config_file, list(overrides))
    _check_data_dir(config.data_dir)
    # log.format: text lines, or one JSON object per line (odradek.logformat).
    logformat.configure(getattr(logging, log_level.upper()), config.get("log.format"))
    _warn_unused(config)
    from odradek.broker.server import run_server

    try:
        import uvloop

        runner = uvloop.run
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        runner = asyncio.run
    from odradek.broker.cluster_mode import ClusterModeError
    from odradek.storage.dir_lock import LogDirInUseError
    from odradek.storage.meta_properties import MetaPropertiesError

    try:
        runner(run_server(config))
    except (LogDirInUseError, MetaPropertiesError, ClusterModeError) as exc:
        # The directory belongs to another broker: refuse in one line, as for bad config.
        raise CliError(str(exc)) from None


def _warn_unused(config: BrokerConfig) -> None:
    """One WARN line naming the Kafka keys that were given but have no effect here, as
    Kafka logs the configs it was supplied but did not use."""
    log = logging.getLogger("odradek.broker.config")
    if config.unused:
        log.warning(
            "These configurations '%s' were supplied but are not used by odradek.",
            ", ".join(sorted(config.unused)),
        )


def _check_data_dir(path: Path) -> None:
    """A data directory that cannot be used is a one-line error before anything starts."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise CliError(f"log.dirs: {path} exists and is not a directory") from None
    except OSError as exc:
        raise CliError(f"log.dirs: cannot create {path}: {exc.strerror}") from None
    if not os.access(path, os.R_OK | os.W_OK | os.X_OK):
        raise CliError(f"log.dirs: {path} is not writable by this user")
