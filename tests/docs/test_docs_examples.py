"""Every example in README.md and docs/*.md runs as written, or says why it cannot.

The test extracts each fenced block tagged ``sh``, ``bash``, ``console`` or ``python`` and runs
it in a fresh temporary directory, against a real broker subprocess on the address the docs use
(127.0.0.1:9092). Untagged blocks and ``text`` blocks are layouts or sample output: not run.

Conventions for authors (HTML comments, invisible when rendered, on the lines right above the
opening fence, no blank line between):

``<!-- docs-test: skip (reason) -->``
    Do not run the block; the reason is required and says why (it installs, it needs several
    machines, a file only the reader has, another test runs it...). A skip without a reason
    fails the test.
``<!-- docs-test: setup (shell command) -->``
    Run the command first, in the block's directory with its broker (create a topic, write an
    input file). May be repeated; each one must succeed.
``<!-- docs-test: no-broker -->``
    Start no broker for the block (it needs none, or it starts its own).

How blocks run:

* ``sh`` / ``bash``: as one bash script with ``set -e -o pipefail``, so any failing line fails
  the block. A line that starts ``odradek server`` is a long-running server: it runs in the
  background (with no broker of the test's own for that block), the next line runs once the
  server listens, and the server is stopped when the block ends.
* ``console``: lines starting with ``$ `` are commands (run in order in one shell); the lines
  after a command are its expected output, where ``...`` stands for any text on a line and a
  line of just ``...`` for any number of lines.
* ``python``: as a script; top-level ``await`` / ``async with`` are allowed (run with asyncio).
* The directory has ``.venv`` linked to the running interpreter's environment, whose ``bin`` is
  first on PATH (so ``odradek``, ``python`` and ``.venv/bin/...`` are the ones under test),
  and ``bench``, ``config``, ``scripts`` and ``tests`` linked to the repository's, so commands
  written for a clone's top directory run as written.
  Blocks that import pyspark are marked ``spark`` (they need Java).
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.helpers.broker import BrokerProcess, wait_for_port

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUN_TAGS = {"sh", "bash", "console", "python"}
DOCS_PORT = 9092  # the address every example uses, as a user's broker would have it
BLOCK_TIMEOUT_S = 90.0
SPARK_BLOCK_TIMEOUT_S = 240.0  # a Spark session takes 10-20 s to start, far more on a busy machine
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>```+|~~~+)\s*(?P<tag>[\w+-]*)\s*$")
MARKER = re.compile(r"^\s*<!--\s*docs-test:\s*(?P<kind>[\w-]+)\s*(?P<rest>.*?)\s*-->\s*$")
SERVER_LINE = re.compile(r"^\s*odradek\s+server\b")


class MarkerError(ValueError):
    """A docs-test marker that does not follow the conventions."""


@dataclass
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    tag: str
    code: str
    skip: str | None = None
    setup: list[str] = field(default_factory=list)
    broker: bool = True

    @property
    def id(self) -> str:
        name = self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path.name
        return f"{name}:{self.line}"

    @property
    def needs_spark(self) -> bool:
        return self.tag == "python" and "pyspark" in self.code


def _parenthesized(kind: str, rest: str, where: str) -> str:
    if not (rest.startswith("(") and rest.endswith(")")) or not rest[1:-1].strip():
        raise MarkerError(f"{where}: 'docs-test: {kind}' needs a (non-empty) text in parentheses")
    return rest[1:-1].strip()


def extract(path: Path, text: str | None = None) -> list[Block]:
    """The runnable blocks of one Markdown file, with the markers right above each."""
    lines = (path.read_text() if text is None else text).splitlines()
    blocks: list[Block] = []
    used: set[int] = set()  # the lines of markers that belong to a block
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        start, fence, indent = i, opening["fence"], opening["indent"]
        i += 1
        body = []
        while i < len(lines) and lines[i].strip() != fence:
            body.append(lines[i])
            i += 1
        i += 1  # the closing fence
        tag = opening["tag"].lower()
        if tag not in RUN_TAGS:
            continue
        code = "\n".join(x[len(indent) :] if x.startswith(indent) else x for x in body)
        block = Block(path, start + 1, tag, textwrap.dedent(code) + "\n")
        j = start - 1
        while j >= 0 and (marker := MARKER.match(lines[j])):
            used.add(j)
            where = f"{path.name}:{j + 1}"
            kind, rest = marker["kind"], marker["rest"]
            if kind == "skip":
                block.skip = _parenthesized(kind, rest, where)
            elif kind == "setup":
                block.setup.insert(0, _parenthesized(kind, rest, where))
            elif kind == "no-broker":
                block.broker = False
            else:
                raise MarkerError(f"{where}: unknown marker 'docs-test: {kind}'")
            j -= 1
        if any(SERVER_LINE.match(x) for x in block.code.splitlines()):
            block.broker = False
        blocks.append(block)
    for n, line in enumerate(lines):
        if line.lstrip().startswith("<!--") and "docs-test" in line and n not in used:
            raise MarkerError(f"{path.name}:{n + 1}: a marker must be right above a run block")
    return blocks


def shell_script(code: str) -> str:
    """A bash script for an sh block: strict, with ``odradek server`` lines in the background."""
    out = [
        "set -e -o pipefail",
        "trap 'code=$?; kill $(jobs -p) 2>/dev/null || true; wait; exit $code' EXIT",
        "wait_for_port() { for _ in $(seq 300); do"
        ' (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done;'
        ' echo "nothing listens on port $1" >&2; return 1; }',
    ]
    for line in code.splitlines():
        if SERVER_LINE.match(line):
            command = line.split("#", 1)[0].rstrip()
            out.append(f"{command} & wait_for_port {DOCS_PORT}")
        else:
            out.append(line)
    return "\n".join(out) + "\n"


def console_script(code: str) -> tuple[str, list[list[str]]]:
    """The commands of a console block as one script (each output framed by a separator line)
    and the expected output of each command."""
    commands: list[str] = []
    expected: list[list[str]] = []
    for line in code.splitlines():
        if line.startswith("$ "):
            commands.append(line[2:])
            expected.append([])
        elif expected:
            expected[-1].append(line.rstrip())
    script = ["set -o pipefail"]
    for command in commands:
        script += [f"{command} 2>&1 || exit $?", "echo @@docs-test-end@@"]
    return "\n".join(script) + "\n", expected


def output_matches(expected: list[str], got: list[str]) -> bool:
    if not expected:
        return True
    pattern = "".join(
        r"(?:.*\n)*?" if line.strip() == "..." else re.escape(line).replace(r"\.\.\.", ".*") + r"\n"
        for line in expected
    )
    return re.fullmatch(pattern, "".join(x.rstrip() + "\n" for x in got)) is not None


PYTHON_RUNNER = """
import ast, asyncio, sys, types
source = open(sys.argv[1]).read()
code = compile(source, sys.argv[1], "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
namespace = {"__name__": "__main__"}
result = eval(code, namespace)
if isinstance(result, types.CoroutineType):
    asyncio.run(result)
"""


def environment(workdir: Path) -> dict[str, str]:
    bin_dir = Path(sys.executable).parent
    (workdir / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    # Commands are written to run from a clone's top directory (python bench/..., config/...).
    for name in ("bench", "config", "scripts", "tests"):
        (workdir / name).symlink_to(ROOT / name, target_is_directory=True)
    return {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYSPARK_PYTHON": sys.executable,
        "PYTHONUNBUFFERED": "1",
    }


def run_block(block: Block, workdir: Path) -> subprocess.CompletedProcess[str]:
    """Run one block (setup first); the result of the last step run."""
    env = environment(workdir)
    timeout = SPARK_BLOCK_TIMEOUT_S if block.needs_spark else BLOCK_TIMEOUT_S

    def run(args: list[str], what: str) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(
                args, cwd=workdir, env=env, capture_output=True, text=True,
                timeout=timeout, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(f"{block.id}: {what} ran over {timeout:.0f}s") from exc

    for command in block.setup:
        done = run(["bash", "-c", f"set -e -o pipefail\n{command}"], f"setup {command!r}")
        assert done.returncode == 0, f"{block.id}: setup {command!r} failed:\n{done.stderr}"
    if block.tag in ("sh", "bash"):
        (workdir / "block.sh").write_text(shell_script(block.code))
        return run(["bash", "block.sh"], "the block")
    if block.tag == "python":
        (workdir / "block.py").write_text(block.code)
        return run([sys.executable, "-c", PYTHON_RUNNER, "block.py"], "the block")
    script, expected = console_script(block.code)
    (workdir / "block.sh").write_text(script)
    done = run(["bash", "block.sh"], "the block")
    outputs = done.stdout.split("@@docs-test-end@@\n")
    for i, want in enumerate(expected):
        got = outputs[i].splitlines() if i < len(outputs) else []
        assert output_matches(want, got), (
            f"{block.id}: output of command {i + 1} differs:\nexpected:\n"
            + "\n".join(want) + "\ngot:\n" + "\n".join(got)
        )  # fmt: skip
    return done


def all_blocks() -> list[Block]:
    return [block for path in DOCS for block in extract(path)]


def _params() -> list[object]:
    params = []
    for block in all_blocks():
        marks = [pytest.mark.spark] if block.needs_spark else []
        params.append(pytest.param(block, id=block.id, marks=marks))
    return params


def _port_free(port: int) -> bool:
    """Whether nothing listens there (connections of an earlier block's broker lingering in
    TIME_WAIT do not count: the broker binds with SO_REUSEADDR too)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.mark.integration
@pytest.mark.parametrize("block", _params())
def test_docs_example_runs(block: Block, tmp_path: Path) -> None:
    if block.skip is not None:
        pytest.skip(f"docs-test: skip ({block.skip})")
    deadline = time.monotonic() + 60
    while not _port_free(DOCS_PORT):  # another test's broker going away, or a user's
        assert time.monotonic() < deadline, f"port {DOCS_PORT} stays busy; the examples need it"
        time.sleep(0.5)
    broker = None
    if block.broker:
        broker = BrokerProcess(tmp_path / "broker-data", port=DOCS_PORT).start()
        wait_for_port(DOCS_PORT, 30)
    workdir = tmp_path / "work"
    workdir.mkdir()
    try:
        done = run_block(block, workdir)
    finally:
        if broker is not None:
            broker.stop()
    assert done.returncode == 0, (
        f"{block.id} failed (exit {done.returncode}); add a docs-test marker if it cannot run "
        f"here.\n--- block ---\n{block.code}--- stdout ---\n{done.stdout[-3000:]}"
        f"\n--- stderr ---\n{done.stderr[-3000:]}"
    )


# The harness itself: markers are parsed as documented and a broken example does fail.


def test_markers_and_blocks_are_parsed(tmp_path: Path) -> None:
    text = textwrap.dedent(
        """\
        Intro.
        <!-- docs-test: skip (needs three machines) -->
        ```sh
        ssh other-host true
        ```

        <!-- docs-test: setup (printf 'a\\n' > in.txt) -->
        <!-- docs-test: setup (true) -->
        ```bash
        odradek server --log-level INFO   # comment
        wc -l in.txt
        ```

        ```text
        not run
        ```

        - item:
          ```python
          print("indented")
          ```
        """
    )
    skipped, served, indented = extract(tmp_path / "x.md", text)
    assert skipped.skip == "needs three machines" and skipped.line == 3
    assert served.setup == ["printf 'a\\n' > in.txt", "true"] and not served.broker
    assert "odradek server --log-level INFO & wait_for_port 9092" in shell_script(served.code)
    assert indented.code == 'print("indented")\n' and indented.broker


def test_a_marker_away_from_its_block_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(MarkerError, match="right above"):
        extract(tmp_path / "x.md", "<!-- docs-test: skip (why) -->\n\n```sh\ntrue\n```\n")
    with pytest.raises(MarkerError, match="right above"):
        extract(tmp_path / "x.md", "<!-- docs-test: skip (why) -->\n```text\nx\n```\n")


@pytest.mark.parametrize(
    "marker",
    ["<!-- docs-test: skip -->", "<!-- docs-test: skip () -->", "<!-- docs-test: sikp (x) -->"],
)
def test_a_marker_without_reason_or_unknown_is_an_error(tmp_path: Path, marker: str) -> None:
    with pytest.raises(MarkerError):
        extract(tmp_path / "x.md", f"{marker}\n```sh\ntrue\n```\n")


def test_a_failing_example_fails(tmp_path: Path) -> None:
    (block,) = extract(tmp_path / "x.md", "```sh\ntrue\nfalse\necho never\n```\n")
    done = run_block(block, tmp_path)
    assert done.returncode != 0 and "never" not in done.stdout
    (block,) = extract(tmp_path / "y.md", "```python\nimport asyncio\nawait asyncio.sleep(0)\n"
                                          "raise SystemExit(3)\n```\n")  # fmt: skip
    (tmp_path / "py").mkdir()
    assert run_block(block, tmp_path / "py").returncode == 3


def test_console_output_is_compared(tmp_path: Path) -> None:
    good = "```console\n$ printf 'a\\nb\\nc\\n'\na\n...\n$ echo 'x 42 y'\nx ... y\n```\n"
    (block,) = extract(tmp_path / "x.md", good)
    assert run_block(block, tmp_path).returncode == 0
    (block,) = extract(tmp_path / "y.md", "```console\n$ echo one\ntwo\n```\n")
    (tmp_path / "bad").mkdir()
    with pytest.raises(AssertionError, match="differs"):
        run_block(block, tmp_path / "bad")
