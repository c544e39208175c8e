"""``odradek console``: serve the web console (see docs/console.md and odradek.console)."""

from __future__ import annotations

import socket

import click

from odradek.cli.command_config import client_security
from odradek.cli.errors import CliError
from odradek.cli.output import bootstrap_option, check_bootstrap


@click.command("console")
@bootstrap_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--allow-writes",
    is_flag=True,
    help="Offer actions that change the cluster (create/delete topics, reset offsets).",
)
@click.option(
    "--sample-interval",
    default=5.0,
    show_default=True,
    type=click.FloatRange(min=0.1),
    help="Seconds between samples of end offsets and group lag for the charts.",
)
def console(
    bootstrap_server: str,
    host: str,
    port: int,
    allow_writes: bool,
    sample_interval: float,
) -> None:
    """Serve a web console for operators: brokers, topics, messages, groups, lag, throughput."""
    check_bootstrap(bootstrap_server)
    security = client_security()  # --command-config: the console's credentials
    try:
        import uvicorn

        from odradek.console.app import create_app
    except ModuleNotFoundError as exc:
        raise CliError(
            f"the console needs the 'console' extra ({exc.name} is missing): "
            "pip install 'odradek[console]'"
        ) from None
    sock = _listen(host, port)
    app = create_app(
        bootstrap_server,
        allow_writes=allow_writes,
        sample_interval_s=sample_interval,
        security=security,
    )
    mode = "writes enabled" if allow_writes else "read-only"
    where = f"[{host}]" if ":" in host else host
    click.echo(
        f"odradek console on http://{where}:{sock.getsockname()[1]}/ ({mode}), "
        f"cluster {bootstrap_server}"
    )
    config = uvicorn.Config(app, log_level="warning", access_log=False)
    uvicorn.Server(config).run(sockets=[sock])


def _listen(host: str, port: int) -> socket.socket:
    """Bind the console's socket here, so a taken port or a bad host is one error line (and
    --port 0 can print the port it got)."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        return socket.create_server((host, port), family=family)
    except OSError as exc:
        raise CliError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def register(cli: click.Group) -> None:
    cli.add_command(console)
