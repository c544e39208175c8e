"""A standalone ZooKeeper server (the Debian ``zookeeper`` package) on loopback.

``ZooKeeperServer(base_dir).start()`` writes a ``zoo.cfg`` and runs
``java -cp /etc/zookeeper/conf:/usr/share/java/zookeeper.jar
org.apache.zookeeper.server.ZooKeeperServerMain zoo.cfg`` on 127.0.0.1 with its own data
directory and a free port (or the one given), and waits until it answers ``ruok`` and
serves a session. ``stop()`` sends SIGTERM, ``kill()`` SIGKILL, and ``start()`` again
reuses the port and data, so clients reconnect to the same address and find the same
data. ``odradek cluster up`` and the tests both run ZooKeeper through it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
ZOOKEEPER_CONF_DIR = Path("/etc/zookeeper/conf")  # holds log4j.properties
STARTUP_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0


def four_letter_word(port: int, word: str, timeout: float = 1.0) -> str:
    """Send a ZooKeeper four-letter command (``ruok``, ``srvr``...) and return the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(word.encode("ascii"))
        chunks = []
        while chunk := sock.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


def zookeeper_available() -> bool:
    return ZOOKEEPER_JAR.exists() and shutil.which("java") is not None


class ZooKeeperServer:
    def __init__(self, base_dir: Path, *, port: int | None = None, tick_time_ms: int = 2000):
        self.base_dir = base_dir
        self.data_dir = base_dir / "data"
        self.config_path = base_dir / "zoo.cfg"
        self.log_path = base_dir / "zookeeper.log"
        self.port = port or free_port()
        self.tick_time_ms = tick_time_ms
        self.proc: subprocess.Popen | None = None

    @property
    def connect(self) -> str:
        """The ``zookeeper.connect`` of this server, without chroot."""
        return f"127.0.0.1:{self.port}"

    def _write_config(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # Session timeouts are bounded by the server to [2, 20] ticks; 2000 ms ticks allow
        # the 6..40 s range Kafka's 18 s default needs, tests ask for shorter ones.
        self.config_path.write_text(
            f"tickTime={self.tick_time_ms}\n"
            f"dataDir={self.data_dir}\n"
            f"clientPort={self.port}\n"
            "clientPortAddress=127.0.0.1\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=ruok,srvr,stat,mntr,envi\n"
            f"minSessionTimeout={self.tick_time_ms // 2}\n"
        )

    def command(self) -> list[str]:
        classpath = f"{ZOOKEEPER_CONF_DIR}:{ZOOKEEPER_JAR}"
        return [
            "java",
            "-Xmx256m",
            "-cp",
            classpath,
            "org.apache.zookeeper.server.ZooKeeperServerMain",
            str(self.config_path),
        ]

    def start(self) -> ZooKeeperServer:
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self._write_config()
        log_file = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child
        self.proc = subprocess.Popen(
            self.command(),
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=self.base_dir,
            start_new_session=True,
        )
        log_file.close()
        try:
            self.wait_ready(STARTUP_TIMEOUT_S)
        except BaseException:
            self.kill()  # never leave a half-started server behind
            raise
        return self

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(
                    f"ZooKeeper exited early with code {self.proc.returncode}; "
                    f"log tail:\n{self.log_tail()}"
                )
            try:
                if four_letter_word(self.port, "ruok") == "imok" and self._session_works():
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"ZooKeeper on port {self.port} not ready after {timeout}s")

    def _session_works(self) -> bool:
        # "imok" only says the process listens; a session proves it serves clients, so a
        # test's first connect does not land on a server still loading its data.
        client = KazooClient(hosts=self.connect, timeout=10.0)
        try:
            client.start(timeout=5)
            return True
        except KazooTimeoutError:
            return False
        finally:
            client.stop()
            client.close()

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _signal(self, sig: int, timeout: float) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        return self.proc.returncode

    def stop(self) -> int | None:
        """SIGTERM and wait (ZooKeeper takes about 2 s)."""
        return self._signal(signal.SIGTERM, STOP_TIMEOUT_S)

    def kill(self) -> int | None:
        """SIGKILL: a crash, no shutdown work."""
        return self._signal(signal.SIGKILL, STOP_TIMEOUT_S)

    def restart(self) -> ZooKeeperServer:
        """Stop if running, then start again on the same port and data."""
        self.stop()
        return self.start()

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"
