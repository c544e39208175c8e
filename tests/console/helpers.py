"""Run ``odradek console`` as a subprocess and drive it with headless Chromium (Selenium)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.helpers.broker import free_port, wait_for_port

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,1000",
)


class ConsoleProcess:
    """``odradek console`` on a free 127.0.0.1 port; its output goes to ``log_path``."""

    def __init__(self, bootstrap: str, log_path: Path, *extra: str) -> None:
        self.port = free_port()
        self.log_path = log_path
        log_file = open(log_path, "ab")  # noqa: SIM115 - owned by the child
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "odradek",
                "console",
                "--bootstrap-server",
                bootstrap,
                "--port",
                str(self.port),
                "--sample-interval",
                "0.5",
                *extra,
            ],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        log_file.close()
        try:
            wait_for_port(self.port, 30, self.proc)
        except Exception:
            self.stop()
            raise RuntimeError(f"console failed to start:\n{self.log_text()}") from None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def http(
    url: str, *, data: dict[str, str] | None = None, headers: dict[str, str] | None = None
) -> tuple[int, str]:
    """(status, body) of a GET, or of a form POST when ``data`` is given; no redirects."""

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            return None

    body = urllib.parse.urlencode(data).encode() if data is not None else None
    request = urllib.request.Request(url, data=body, headers=headers or {})
    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@contextmanager
def chromium() -> Iterator[object]:
    """A headless Chromium driven by Selenium, with its own throwaway profile."""
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.skip("Chromium not installed (apt-get install chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="odradek-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
