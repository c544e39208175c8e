"""``odradek console`` failures that happen before any page: one error line, exit code 1."""

from __future__ import annotations

import socket
from pathlib import Path

from tests.cli.helpers import odradek


def test_a_taken_port_is_one_error_line() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        result = odradek("console", "--bootstrap-server", "127.0.0.1:9", "--port", str(port))
    result.check_error(f"cannot listen on 127.0.0.1:{port}", "Address already in use")


def test_bad_options() -> None:
    odradek("console", "--host", "no-such-host.invalid").check_error("cannot listen on")
    result = odradek("console", "--sample-interval", "0")
    assert result.code == 2 and "--sample-interval" in result.stderr


def test_bad_command_config_is_one_error_line(tmp_path: Path) -> None:
    missing = tmp_path / "missing.properties"
    odradek("console", "--command-config", str(missing)).check_error(
        f"--command-config {missing}", "cannot read config file"
    )
    bad = tmp_path / "bad.properties"
    bad.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=GSSAPI\n")
    odradek("console", "--command-config", str(bad)).check_error("sasl.mechanism must be one of")
