"""The ``odradek`` command: one group, one module per verb family.

Every failure a user can cause (bad arguments, unreachable broker, unknown topic, bad
config) ends as one line on stderr and a non-zero exit code, never a traceback:
:func:`main` turns the project's expected exceptions into ``click`` errors.
"""

from __future__ import annotations

import sys

import click

from odradek import __version__
from odradek.cli.errors import run_cli


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="odradek")
def cli() -> None:
    """odradek: a distributed commit log that speaks the Kafka protocol."""


def _register() -> None:
    # Imported here so `odradek --help` stays fast and each verb family is its own module.
    from odradek.cli import server

    cli.add_command(server.server)
    for module_name in (
        "topics",
        "produce",
        "consume",
        "groups",
        "log_dirs",
        "demo",
        "perf",
        "get_offsets",
        "dump_log",
        "cluster",
        "console",
        "transactions",
        "users",
        "elect_leaders",
        "reassign_partitions",
        "configs",
        "acls",
        "delete_records",
        "broker_api_versions",
    ):
        try:
            module = __import__(f"odradek.cli.{module_name}", fromlist=["register"])
        except ModuleNotFoundError as exc:
            if exc.name != f"odradek.cli.{module_name}":
                raise
            continue
        module.register(cli)


def main(argv: list[str] | None = None) -> None:
    _register()
    sys.exit(run_cli(cli, argv))


if __name__ == "__main__":
    main()
