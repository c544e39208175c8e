"""Fixtures shared by the whole suite."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.broker import BrokerProcess

_ROOT = Path(__file__).resolve().parent.parent
# Files whose brokers listen on Kafka's default port 9092, as a user's would: one worker.
_DEFAULT_PORT_FILES = {"tests/docs/test_docs_examples.py", "tests/cli/test_readme_using_it.py"}
# Files whose brokers run under the fault harness's group ids (tests/helpers/faults.py) and
# are cut by nftables rules matching them: one worker, so one file's cuts never hit the
# other's brokers (a shared ZooKeeper port would match both).
_FAULT_FILES = {
    "tests/integration/cluster/test_jepsen.py",
    "tests/integration/cluster/test_jepsen_transactions.py",
    "tests/integration/cluster/test_jepsen_consume_transform.py",
    "tests/integration/cluster/test_jepsen_disk_full.py",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Groups for pytest-xdist's ``--dist loadgroup`` (scripts/test.sh runs two workers).

    Each test file stays on one worker, so its module-scoped fixtures (a shared broker)
    start once; every Spark test shares one worker, so the session's one SparkSession
    (6-40 s to start, about 1 GB) starts once; the files that use port 9092 share one.
    Without xdist the marks are inert.
    """
    for item in items:
        path = Path(str(item.path)).resolve().relative_to(_ROOT)
        group = path.as_posix()
        if path.parts[:2] == ("tests", "spark"):
            group = "spark"
        elif group in _DEFAULT_PORT_FILES:
            group = "port-9092"
        elif group in _FAULT_FILES:
            group = "faults"
        item.add_marker(pytest.mark.xdist_group(group))


def pytest_configure(config: pytest.Config) -> None:
    """Tests send SIGINT (Ctrl-C) to the programs they start. A suite started in the
    background by a shell without job control (``nohup sh -c '...' &``) inherits SIGINT
    ignored, and an ignored signal stays ignored in every child across exec: those programs
    would rightly not stop. Handled here, the children start with the default again."""
    del config
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A fresh odradek broker subprocess on a free port, stopped after the test."""
    proc = BrokerProcess(tmp_path / "data").start()
    try:
        yield proc
    finally:
        proc.kill() if not proc.is_running() else proc.stop()


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for a whole test module (tests must use their own topic names)."""
    proc = BrokerProcess(tmp_path_factory.mktemp("shared") / "data").start()
    try:
        yield proc
    finally:
        proc.stop()
