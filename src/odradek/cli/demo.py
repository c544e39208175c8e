"""``odradek demo``: the broker on its embedded default plus the demo pipeline.

Starts ``odradek server`` (unless a broker already answers at the bootstrap address),
then runs the demo pipeline — an activity-event generator feeding a Spark Structured
Streaming job (see :mod:`odradek.demo`) — which prints its per-page, per-minute counts.
Afterwards the broker keeps running until Ctrl-C, unless ``--exit`` is given.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time

import click

from odradek.cli.errors import CliError


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _split(bootstrap: str) -> tuple[str, int]:
    host, _, port = bootstrap.rpartition(":")
    if not host or not port.isdigit():
        raise CliError(f"--bootstrap-server expects host:port, got {bootstrap!r}")
    return host, int(port)


def _start_broker(host: str, port: int, data_dir: str) -> subprocess.Popen[bytes]:
    command = [
        sys.executable, "-m", "odradek", "server",
        "--override", f"listeners=PLAINTEXT://{host}:{port}",
        "--override", f"log.dir={data_dir}",
    ]  # fmt: skip
    broker = subprocess.Popen(command, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not _reachable(host, port):
        if broker.poll() is not None:
            raise CliError(f"the broker exited with code {broker.returncode} while starting")
        if time.monotonic() > deadline:
            broker.terminate()
            raise CliError(f"the broker did not start listening on {host}:{port} within 60 s")
        time.sleep(0.1)
    return broker


def _stop(broker: subprocess.Popen[bytes]) -> None:
    if broker.poll() is None:
        broker.send_signal(signal.SIGTERM)
        try:
            broker.wait(30)
        except subprocess.TimeoutExpired:
            broker.kill()


@click.command()
@click.option("--bootstrap-server", default="127.0.0.1:9092", show_default=True)
@click.option(
    "--data-dir",
    default="odradek-data",
    show_default=True,
    help="Data directory of the broker the demo starts.",
)
@click.option(
    "--duration",
    default=75,
    show_default=True,
    type=click.IntRange(10, 3600),
    help="Seconds of generated traffic.",
)
@click.option("--events-per-second", default=200, show_default=True, type=click.IntRange(1))
@click.option("--master", default="local[*]", show_default=True, help="Spark master URL.")
@click.option(
    "--warehouse",
    default="warehouse",
    show_default=True,
    help="Where the pipeline writes its Parquet results.",
)
@click.option(
    "--exit",
    "exit_after",
    is_flag=True,
    help="Stop the broker after the demo instead of leaving it running.",
)
def demo(
    bootstrap_server: str,
    data_dir: str,
    duration: int,
    events_per_second: int,
    master: str,
    warehouse: str,
    exit_after: bool,
) -> None:
    """Run the broker and the demo pipeline (events -> Spark -> Parquet and a topic)."""
    host, port = _split(bootstrap_server)
    broker = None
    if _reachable(host, port):
        click.echo(f"using the broker already at {host}:{port}")
    else:
        click.echo(f"starting odradek on {host}:{port} (data in {data_dir})")
        broker = _start_broker(host, port, data_dir)
    env = {**os.environ, "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable)}
    command = [
        sys.executable, "-m", "odradek.demo",
        "--bootstrap-server", bootstrap_server,
        "--master", master,
        "--duration", str(duration),
        "--events-per-second", str(events_per_second),
        "--warehouse", warehouse,
    ]  # fmt: skip
    try:
        code = subprocess.call(command, env=env, stdin=subprocess.DEVNULL)
        if code != 0:
            raise CliError(f"the demo pipeline failed (exit code {code})")
        if broker is not None and not exit_after:
            click.echo(f"\nthe broker keeps running on {host}:{port}; Ctrl-C stops it")
            with contextlib.suppress(KeyboardInterrupt):
                broker.wait()
    finally:
        if broker is not None:
            _stop(broker)


def register(cli: click.Group) -> None:
    cli.add_command(demo)
