"""``odradek cluster up``: a ZooKeeper and N brokers on loopback, for trying a cluster.

Starts a standalone ZooKeeper (the Debian ``zookeeper`` package) and N ``odradek
server`` processes joined to it through ``zookeeper.connect`` (chroot ``/odradek``),
broker ids 1..N, each with its own data directory under ``--data-dir`` and its log in
``--data-dir/broker-<id>.log``. Prints the ZooKeeper address and a ``bootstrap.servers``
line, then runs until Ctrl-C or SIGTERM, which stops the brokers (gracefully) and then
ZooKeeper, in one line.
"""

from __future__ import annotations

import logging
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import click

from odradek.cli.errors import CliError

STARTUP_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
CHROOT = "/odradek"


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


class _Broker:
    def __init__(self, broker_id: int, port: int, data_dir: Path, zk_connect: str,
                 overrides: tuple[str, ...]) -> None:  # fmt: skip
        self.broker_id = broker_id
        self.port = port
        self.log_path = data_dir / f"broker-{broker_id}.log"
        self.command = [
            sys.executable, "-m", "odradek", "server",
            "--override", f"broker.id={broker_id}",
            "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
            "--override", f"log.dir={data_dir / f'broker-{broker_id}'}",
            "--override", f"zookeeper.connect={zk_connect}",
        ]  # fmt: skip
        for override in overrides:
            self.command += ["--override", override]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log_path, "ab") as log_file:
            # Its own session: Ctrl-C reaches this command only, which stops the
            # brokers in order (a broker must not outlive the ZooKeeper it needs).
            self.proc = subprocess.Popen(
                self.command,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def wait_listening(self, deadline: float, stop: _StopFlag) -> None:
        assert self.proc is not None
        while not _listening(self.port) and not stop.is_set:
            if self.proc.poll() is not None:
                raise CliError(
                    f"broker {self.broker_id} exited with code {self.proc.returncode} while "
                    f"starting; see {self.log_path}"
                )
            if time.monotonic() > deadline:
                raise CliError(
                    f"broker {self.broker_id} did not listen on 127.0.0.1:{self.port} within "
                    f"{STARTUP_TIMEOUT_S:.0f} s; see {self.log_path}"
                )
            time.sleep(0.1)

    def terminate(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def wait(self) -> None:
        if self.proc is None:
            return
        try:
            self.proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


class _StopFlag:
    """Set by the SIGINT/SIGTERM handler. A plain attribute, not a threading.Event: the
    handler runs in the main thread, and Event.set() there can deadlock on the lock an
    interrupted Event.wait() in the same thread holds."""

    def __init__(self) -> None:
        self.is_set = False

    def set(self, *_signal: object) -> None:
        self.is_set = True


@click.group()
def cluster() -> None:
    """Run a local ZooKeeper-coordinated cluster."""


@cluster.command()
@click.option("--brokers", "count", default=3, show_default=True, type=click.IntRange(1, 32))
@click.option(
    "--data-dir",
    default="odradek-cluster",
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="ZooKeeper's and every broker's data and logs go here.",
)
@click.option(
    "--base-port",
    default=0,
    show_default=True,
    type=click.IntRange(0, 65535 - 33),
    help="Broker i listens on base-port + i, ZooKeeper on base-port; 0 = free ports.",
)
@click.option(
    "--override",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="A broker config for every broker (Kafka's key names). Repeatable.",
)
def up(count: int, data_dir: Path, base_port: int, overrides: tuple[str, ...]) -> None:
    """Start ZooKeeper and N brokers on 127.0.0.1; Ctrl-C stops them all."""
    from odradek.cluster.zookeeper_server import ZooKeeperServer, free_port, zookeeper_available

    if not zookeeper_available():
        raise CliError("ZooKeeper is not installed (Debian: apt-get install zookeeper)")
    # The readiness probe's reconnects while ZooKeeper boots are expected, not news.
    logging.getLogger("kazoo").setLevel(logging.ERROR)
    data_dir.mkdir(parents=True, exist_ok=True)
    stop = _StopFlag()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, stop.set)
    zookeeper = ZooKeeperServer(data_dir / "zookeeper", port=base_port or None)
    brokers: list[_Broker] = []
    try:
        try:
            zookeeper.start()
        except (RuntimeError, TimeoutError) as exc:
            raise CliError(f"ZooKeeper did not start: {str(exc).splitlines()[0]}") from None
        zk_connect = f"{zookeeper.connect}{CHROOT}"
        for broker_id in range(1, count + 1):
            port = base_port + broker_id if base_port else free_port()
            broker = _Broker(broker_id, port, data_dir, zk_connect, overrides)
            brokers.append(broker)
            broker.start()
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        for broker in brokers:
            broker.wait_listening(deadline, stop)
        click.echo(f"zookeeper.connect={zk_connect}")
        click.echo("bootstrap.servers=" + ",".join(f"127.0.0.1:{b.port}" for b in brokers))
        click.echo(f"{count} brokers up (data and logs in {data_dir}); Ctrl-C stops them")
        sys.stdout.flush()
        reported: set[int] = set()
        while not stop.is_set:
            time.sleep(0.5)
            for broker in brokers:
                code = broker.proc.poll() if broker.proc is not None else None
                if code is not None and broker.broker_id not in reported:
                    reported.add(broker.broker_id)
                    click.echo(
                        f"broker {broker.broker_id} exited with code {code}; see {broker.log_path}",
                        err=True,
                    )
    finally:
        for broker in brokers:
            broker.terminate()
        for broker in brokers:
            broker.wait()
        zookeeper.stop()
    click.echo(f"stopped {count} brokers and ZooKeeper")


def register(cli: click.Group) -> None:
    from odradek.cli.cluster_describe import describe

    cluster.add_command(describe)
    cli.add_command(cluster)
