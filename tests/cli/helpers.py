"""Run the ``odradek`` command as a user would: a subprocess with arguments and stdin."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

CLI_TIMEOUT_S = 60.0


@dataclass
class Result:
    code: int
    stdout: bytes
    stderr: str

    @property
    def out(self) -> str:
        return self.stdout.decode(errors="replace")

    @property
    def lines(self) -> list[str]:
        return self.out.splitlines()

    def check(self) -> Result:
        assert self.code == 0, f"exit {self.code}; stderr: {self.stderr}"
        return self

    def check_error(self, *fragments: str) -> Result:
        """Failed the way the CLI promises: exit 1 and one 'error: ...' line, no traceback."""
        assert self.code == 1, f"exit {self.code}; stdout {self.out!r}; stderr {self.stderr!r}"
        assert "Traceback" not in self.stderr, self.stderr
        lines = [line for line in self.stderr.splitlines() if line.strip()]
        error_lines = [line for line in lines if line.startswith("error: ")]
        assert len(error_lines) == 1, self.stderr
        for fragment in fragments:
            assert fragment in error_lines[0], f"{fragment!r} not in {error_lines[0]!r}"
        return self


def odradek(*args: str, stdin: bytes | None = None, timeout: float = CLI_TIMEOUT_S) -> Result:
    env = {k: v for k, v in os.environ.items() if k != "ODRADEK_BOOTSTRAP_SERVER"}
    completed = subprocess.run(
        [sys.executable, "-m", "odradek", *args],
        input=stdin if stdin is not None else b"",
        capture_output=True,
        timeout=timeout,
        env=env,
        check=False,
    )
    return Result(completed.returncode, completed.stdout, completed.stderr.decode(errors="replace"))
