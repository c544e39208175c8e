"""scripts/install.sh installs a JRE only when no Java 17+ is on PATH.

The script's functions are sourced in bash with a fake ``java`` first on PATH that
prints a given ``java -version`` banner (on stderr, as java does).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "install.sh"
BASH = shutil.which("bash") or "/bin/bash"


def _run(snippet: str, path: str) -> str:
    result = subprocess.run(
        [BASH, "-c", f'. "{SCRIPT}"; {snippet}'],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": path},
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def _fake_java(tmp_path: Path, banner: str | None) -> str:
    """A PATH holding grep and, unless ``banner`` is None, a java printing ``banner``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    grep = shutil.which("grep")
    assert grep is not None
    (bin_dir / "grep").symlink_to(grep)
    if banner is not None:
        java = bin_dir / "java"
        lines = "".join(f"printf '%s\\n' '{line}' >&2\n" for line in banner.splitlines())
        java.write_text(f"#!/bin/sh\n{lines}")
        java.chmod(0o755)
    return str(bin_dir)


@pytest.mark.parametrize(
    ("banner", "major", "needs_jre"),
    [
        ('openjdk version "17.0.15" 2025-04-15\nOpenJDK Runtime Environment', "17", False),
        ('openjdk version "21" 2023-09-19', "21", False),
        ('java version "22.0.1" 2024-04-16\nJava(TM) SE Runtime Environment', "22", False),
        ('Picked up JAVA_TOOL_OPTIONS: -Xmx1g\nopenjdk version "17-ea" 2021-03-16', "17", False),
        ('openjdk version "11.0.2" 2019-01-15', "11", True),
        ('java version "1.8.0_292"\nJava(TM) SE Runtime Environment', "8", True),
        ("Error: could not open `/usr/lib/jvm/jvm.cfg'", "", True),
        (None, "", True),
    ],
)
def test_jre_only_when_no_java_17(
    tmp_path: Path, banner: str | None, major: str, needs_jre: bool
) -> None:
    path = _fake_java(tmp_path, banner)
    assert _run("java_major_version", path) == major
    assert _run("have_java && echo yes || echo no", path) == ("no" if needs_jre else "yes")
    packages = _run("wanted_packages 0", path).split()
    assert ("default-jre-headless" in packages) == needs_jre
    assert "python3-venv" in packages
    assert {"kcat", "redis-server"} <= set(_run("wanted_packages 1", path).split())


def test_sourcing_runs_nothing(tmp_path: Path) -> None:
    # Sourced, the script only defines functions: no apt, pip or venv, no output.
    path = _fake_java(tmp_path, None)
    assert _run("true", path) == ""
    assert _run("type -t main", path) == "function"


def _stub(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text(f"#!{BASH}\n{body}\n")
    path.chmod(0o755)


@pytest.mark.parametrize(
    ("java", "installs_jre", "code"), [("17.0.2", False, 0), ("11.0.2", True, 1)]
)
def test_main_installs_what_is_missing(
    tmp_path: Path, java: str, installs_jre: bool, code: int
) -> None:
    """The whole script, in a copy of the repository layout, with apt, dpkg and python
    replaced by stubs that log their arguments."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(SCRIPT, repo / "scripts" / "install.sh")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    for tool in ("grep", "dirname", "id", "mkdir", "cat"):
        found = shutil.which(tool)
        assert found is not None
        (bin_dir / tool).symlink_to(found)
    _stub(bin_dir, "java", f"echo 'openjdk version \"{java}\" 2024-01-16' >&2")
    _stub(bin_dir, "dpkg-query", "exit 1")  # nothing installed
    _stub(bin_dir, "sudo", '"$@"')  # when the tests do not run as root
    _stub(bin_dir, "apt-get", f'echo "apt-get $*" >> "{log}"')
    venv_python = f'#!{BASH}\\necho "venv-python $*" >> "{log}"'
    _stub(bin_dir, "fake-python", f'echo "python $*" >> "{log}"\n'
          f'mkdir -p .venv/bin && printf \'{venv_python}\\n\' > .venv/bin/python '
          "&& chmod +x .venv/bin/python")  # fmt: skip
    (bin_dir / "chmod").symlink_to(shutil.which("chmod") or "/bin/chmod")
    result = subprocess.run(
        [BASH, str(repo / "scripts" / "install.sh")],
        capture_output=True, text=True, timeout=60,
        env={"PATH": str(bin_dir), "PYTHON": "fake-python"},
    )  # fmt: skip
    assert result.returncode == code, result.stderr
    calls = log.read_text().splitlines()
    installs = [c for c in calls if c.startswith("apt-get") and " install " in c]
    assert len(installs) == 1 and "python3-venv" in installs[0]
    assert ("default-jre-headless" in installs[0]) == installs_jre
    if code == 0:
        assert f"Java {java.split('.')[0]}" in result.stdout
        assert any(c.startswith("venv-python -m pip install") for c in calls)
    else:
        assert "Spark needs Java 17 or later on PATH; found Java 11" in result.stderr
        assert not any(c.startswith("venv-python") for c in calls)
