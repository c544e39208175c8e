"""The exit watchdog: a process whose teardown is held by a stray thread still leaves,
with that thread's stack in its stderr and the exit code it was armed with."""

from __future__ import annotations

import subprocess
import sys
import textwrap

HELD = textwrap.dedent(
    """
    import threading
    from odradek.broker import exit_watchdog

    def stuck_in_a_library_call():
        threading.Event().wait()  # never set: a request with no timeout

    threading.Thread(target=stuck_in_a_library_call, name="stray").start()  # not a daemon
    exit_watchdog.arm({code}, grace_s=0.5)
    """
)


def _run(code: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", HELD.format(code=code)],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def test_a_held_process_exits_with_the_armed_code_and_the_stray_stack() -> None:
    result = _run(0)
    assert result.returncode == 0
    assert "did not exit 0.5 s after the broker stopped" in result.stderr
    assert "stuck_in_a_library_call" in result.stderr  # the stray thread's frame
    failed = _run(3)
    assert failed.returncode == 3


def test_a_process_that_exits_by_itself_is_not_held_or_reported() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "from odradek.broker import exit_watchdog; exit_watchdog.arm(5, grace_s=30)",
        ],
        capture_output=True,
        text=True,
        timeout=20,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0  # the daemon countdown did not keep it alive
    assert "did not exit" not in result.stderr
