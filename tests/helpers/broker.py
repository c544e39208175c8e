"""Start real odradek brokers as subprocesses for integration tests.

Each broker binds 127.0.0.1 on a free port with its own data directory. ``stop()`` sends
SIGTERM (graceful shutdown), ``kill()`` sends SIGKILL (a crash), and ``start()`` again
reuses the same port and data directory, so tests can restart a broker in place.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

STARTUP_TIMEOUT_S = 30.0


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_for_port(
    port: int,
    timeout: float,
    proc: subprocess.Popen | None = None,
    host: str = "127.0.0.1",
    *,
    owned: bool = False,
) -> None:
    """Wait until ``host:port`` accepts connections. With ``owned``, only ``proc``'s own
    listener counts: a port chosen by free_port may be taken meanwhile by another test's
    server (another pytest worker's), which must not pass for the broker."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"broker exited early with code {proc.returncode}")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                pass
        except OSError:
            time.sleep(0.05)
            continue
        if not owned or proc is None or _listens(proc.pid, port):
            return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listening on {host}:{port} after {timeout}s")


def _listens(pid: int, port: int) -> bool:
    """Whether process ``pid`` holds a TCP socket listening on ``port`` (Linux /proc)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            # local address "ADDR:PORT" (hex), state 0A = LISTEN, inode
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{fields[9]}]")
    if not inodes:
        return False
    try:
        descriptors = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in descriptors:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                return True
        except OSError:
            continue
    return False


class BrokerProcess:
    def __init__(
        self,
        data_dir: Path,
        *,
        port: int | None = None,
        overrides: dict[str, str] | None = None,
        log_path: Path | None = None,
        host: str = "127.0.0.1",
        wrapper: list[str] | None = None,
    ) -> None:
        self.data_dir = data_dir
        # Another loopback alias (127.0.0.2...) lets fault tests cut traffic per broker;
        # ``wrapper`` prefixes the command (e.g. setpriv to run under a group id of its own).
        self.host = host
        self.wrapper = list(wrapper or [])
        self.port = port or free_port(host)
        # A port free_port chose may be taken before the broker binds it (by another
        # pytest worker's server): the first start then moves to another one.
        self._port_chosen = port is None
        self.overrides = dict(overrides or {})
        self.log_path = log_path or data_dir.parent / f"broker-{self.port}.log"
        self.proc: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def command(self) -> list[str]:
        cmd = [*self.wrapper, sys.executable, "-m", "odradek", "server", "--log-level", "INFO"]
        settings = {
            "listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "log.dir": str(self.data_dir),
            # Tests want new groups to rebalance at once and idle fetches to return fast.
            "group.initial.rebalance.delay.ms": "0",
            **self.overrides,
        }
        for key, value in settings.items():
            cmd += ["--override", f"{key}={value}"]
        return cmd

    def start(self, timeout: float = STARTUP_TIMEOUT_S) -> BrokerProcess:
        first_start = self.proc is None
        for attempt in range(3):
            try:
                return self._start(timeout)
            except RuntimeError:
                moved = (
                    first_start
                    and self._port_chosen
                    and "listeners" not in self.overrides
                    and attempt < 2
                    and f"address ('{self.host}', {self.port}): address already in use"
                    in self.log_text()
                )
                if not moved:
                    raise
                self.port = free_port(self.host)
        raise AssertionError("unreachable")

    def _start(self, timeout: float) -> BrokerProcess:
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log_file = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child
        self.proc = subprocess.Popen(
            self.command(),
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        log_file.close()
        try:
            wait_for_port(self.port, timeout, self.proc, self.host, owned=True)
            # The broker opens its listeners one after the other: a test may use any.
            for host, port in self.other_listeners():
                wait_for_port(port, timeout, self.proc, host, owned=True)
        except Exception:
            self.kill()
            raise RuntimeError(f"broker failed to start; log:\n{self.log_text()[-4000:]}") from None
        return self

    def other_listeners(self) -> list[tuple[str, int]]:
        """(host, port) of every listener in the ``listeners`` override but ``self.port``."""
        found = []
        for entry in self.overrides.get("listeners", "").split(","):
            _name, _, address = entry.strip().partition("://")
            host, _, port = address.rpartition(":")
            if port.isdigit() and int(port) not in (0, self.port):
                found.append((host if host not in ("", "0.0.0.0") else "127.0.0.1", int(port)))
        return found

    def stop(self, timeout: float = 30.0) -> int:
        """Graceful shutdown (SIGTERM); returns the exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            # Leave the evidence before killing it: every thread's and task's stack.
            self.proc.send_signal(signal.SIGUSR1)
            self.proc.send_signal(signal.SIGUSR2)
            time.sleep(1.0)
            self.proc.kill()
            self.proc.wait(10)
            raise RuntimeError(
                "broker did not stop within the timeout after SIGTERM; log:\n"
                + self.log_text()[-20000:]
            ) from None

    def kill(self) -> None:
        """Crash it (SIGKILL)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""
