"""Turning expected failures into one-line CLI errors."""

from __future__ import annotations

import sys

import click


class CliError(click.ClickException):
    """A user-facing failure: printed as ``error: <message>``, exit code 1."""

    def show(self, file=None) -> None:  # type: ignore[no-untyped-def]
        click.echo(f"error: {self.format_message()}", err=True)


def _expected_errors() -> tuple[type[BaseException], ...]:
    from odradek.broker.config import ConfigError
    from odradek.cluster.metadata import MetadataError

    types: list[type[BaseException]] = [ConfigError, MetadataError, OSError]
    try:
        from odradek.client.errors import ClientError, KafkaError

        types += [ClientError, KafkaError]
    except ImportError:  # the client package is optional for `odradek server`
        pass
    return tuple(types)


def run_cli(group: click.Group, argv: list[str] | None) -> int:
    try:
        group.main(args=argv, prog_name="odradek", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 130
    except click.UsageError as exc:
        if isinstance(exc, getattr(click.exceptions, "NoArgsIsHelpError", ())):
            exc.show()  # `odradek topics` alone: the help is the answer
            return exc.exit_code
        # One line, like every other failure, instead of click's usage block.
        command = exc.ctx.command_path if exc.ctx is not None else "odradek"
        click.echo(f"error: {exc.format_message()} (see '{command} --help')", err=True)
        return exc.exit_code
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `odradek consume ... | head`: the reader went away; that is not an error.
        sys.stderr.close()
        return 0
    except _expected_errors() as exc:
        message = str(exc) or type(exc).__name__
        click.echo(f"error: {message}", err=True)
        return 1
    return 0
