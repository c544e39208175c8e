"""A real standalone ZooKeeper (the Debian ``zookeeper`` package) for tests.

``ZooKeeperServer`` runs ``ZooKeeperServerMain`` on 127.0.0.1 with its own data directory
and a free port. ``stop()`` sends SIGTERM, ``kill()`` sends SIGKILL (a crash), and
``start()`` again reuses the same port and data directory, so clients reconnect to the
same address and find the same data.

Fixtures (import them into a conftest): ``zookeeper_server`` is one server per test
module; ``zk_connect`` gives each test a ``zookeeper.connect`` string with a chroot of its
own (``127.0.0.1:PORT/t/<test>-<n>``), so tests sharing the server never see each
other's znodes. Tests that use them carry the ``zookeeper`` marker.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator

import pytest

from odradek.cluster.zookeeper_server import (
    ZooKeeperServer,
    four_letter_word,
    zookeeper_available,
)

__all__ = [
    "ZooKeeperServer",
    "four_letter_word",
    "zk_connect",
    "zookeeper_available",
    "zookeeper_server",
]

_chroot_counter = itertools.count()


@pytest.fixture(scope="module")
def zookeeper_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """One real ZooKeeper for a whole test module (tests use their own chroot)."""
    if not zookeeper_available():
        pytest.skip("ZooKeeper not installed (apt-get install zookeeper)")
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper")).start()
    try:
        yield server
    finally:
        server.kill() if not server.is_running() else server.stop()


@pytest.fixture
def zk_connect(zookeeper_server: ZooKeeperServer, request: pytest.FixtureRequest) -> str:
    """``zookeeper.connect`` with a chroot unique to this test."""
    if not zookeeper_server.is_running():
        zookeeper_server.start()  # an earlier test of the module killed it
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", request.node.name)[:60]
    return f"{zookeeper_server.connect}/t/{name}-{next(_chroot_counter)}"
