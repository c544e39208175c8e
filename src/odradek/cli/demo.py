"""``odradek demo``: the broker on its embedded default plus the demo pipeline.

Starts ``odradek server`` (unless a broker already answers at the bootstrap address),
then runs the demo pipeline — an activity-event generator feeding a Spark Structured
Streaming job (see :mod:`odradek.demo`) — which shows its progress while it runs and prints
its per-page, per-minute counts. Afterwards the broker keeps running until Ctrl-C, unless
``--exit`` is given. The broker's and Spark's logs go to ``--log-file``, not to the terminal.

Both children run in process groups of their own, so Ctrl-C reaches only this command, which
stops them in order (the pipeline, then the broker it talks to), each within a bounded time,
and says so in one line.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

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


class Interrupted(click.ClickException):
    """Ctrl-C: one line on stderr, exit code 130 (128 + SIGINT), as shells report it."""

    exit_code = 130

    def show(self, file=None) -> None:  # type: ignore[no-untyped-def]
        click.echo(f"interrupted: {self.format_message()}", err=True)


def _start_broker(host: str, port: int, data_dir: str, log: IO[bytes]) -> subprocess.Popen[bytes]:
    command = [
        sys.executable, "-m", "odradek", "server",
        "--override", f"listeners=PLAINTEXT://{host}:{port}",
        "--override", f"log.dir={data_dir}",
    ]  # fmt: skip
    # Its own process group: Ctrl-C reaches only this command, which stops the children in
    # order (the pipeline first, then the broker it talks to).
    return subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, process_group=0
    )


def _wait_listening(broker: subprocess.Popen[bytes], host: str, port: int, log: str) -> None:
    deadline = time.monotonic() + 60
    while not _reachable(host, port):
        if broker.poll() is not None:
            raise CliError(
                f"the broker exited with code {broker.returncode} while starting (see {log})"
            )
        if time.monotonic() > deadline:
            broker.terminate()
            raise CliError(f"the broker did not start listening on {host}:{port} within 60 s")
        time.sleep(0.1)


def _stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, grace: float = 10.0) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


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
    "--log-file",
    default="odradek-demo.log",
    show_default=True,
    help="Where the broker and Spark write their logs.",
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
    log_file: str,
    exit_after: bool,
) -> None:
    """Run the broker and the demo pipeline (events -> Spark -> Parquet and a topic).

    Ctrl-C stops whatever is running (the pipeline, then the broker) within seconds.
    """
    host, port = _split(bootstrap_server)
    log_path = Path(log_file).resolve()
    broker: subprocess.Popen[bytes] | None = None
    pipeline: subprocess.Popen[bytes] | None = None
    try:
        with open(log_path, "ab") as log:
            if _reachable(host, port):
                click.echo(f"using the broker already at {host}:{port}")
            else:
                click.echo(f"starting odradek on {host}:{port} (data in {data_dir})")
                broker = _start_broker(host, port, data_dir, log)
        click.echo(f"logs of the broker and Spark: {log_path}")
        if broker is not None:
            _wait_listening(broker, host, port, str(log_path))
        env = {**os.environ, "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable)}
        command = [
            sys.executable, "-m", "odradek.demo",
            "--bootstrap-server", bootstrap_server,
            "--master", master,
            "--duration", str(duration),
            "--events-per-second", str(events_per_second),
            "--warehouse", warehouse,
            "--log-file", str(log_path),
            "--quiet-interrupt",
        ]  # fmt: skip
        pipeline = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, process_group=0)
        code = pipeline.wait()
        if code != 0:
            raise CliError(f"the demo pipeline failed (exit code {code}; logs in {log_path})")
        if broker is not None and not exit_after:
            click.echo(f"\nthe broker keeps running on {host}:{port}; Ctrl-C stops it")
            code = broker.wait()
            raise CliError(f"the broker exited with code {code} (see {log_path})")
    except KeyboardInterrupt:
        # Further Ctrl-Cs must not interrupt the stopping, which is bounded anyway.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        running = {"the demo pipeline": pipeline, "the broker": broker}
        stopped = [name for name, proc in running.items() if proc and proc.poll() is None]
        if pipeline is not None:
            _stop(pipeline, signal.SIGINT, grace=10.0)
            # Anything the pipeline left in its process group (Spark's JVM and its Python
            # workers, should the pipeline have been killed) goes too.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pipeline.pid, signal.SIGTERM)
        if broker is not None:
            _stop(broker, signal.SIGTERM, grace=10.0)
        raise Interrupted("stopped " + (" and ".join(stopped) or "before anything ran")) from None
    finally:
        if pipeline is not None:
            _stop(pipeline, signal.SIGINT, grace=10.0)
        if broker is not None:
            _stop(broker)


def register(cli: click.Group) -> None:
    cli.add_command(demo)
