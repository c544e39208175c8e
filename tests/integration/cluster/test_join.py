"""Brokers joining a ZooKeeper cluster: real ZooKeeper, real broker subprocesses."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.cluster.zk.client import ZkClient
from odradek.storage import meta_properties
from tests.helpers.broker import BrokerProcess, free_port
from tests.helpers.tcp_proxy import TcpProxy
from tests.helpers.zookeeper import ZooKeeperServer

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.timeout(120)]


@pytest.fixture
def zk(zk_connect: str) -> Iterator[ZkClient]:
    client = ZkClient.connect(zk_connect, session_timeout_ms=6000)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def brokers() -> Iterator[list[BrokerProcess]]:
    started: list[BrokerProcess] = []
    yield started
    for broker in started:
        broker.stop()


def _broker(tmp_path: Path, name: str, zk_connect: str, **overrides: str) -> BrokerProcess:
    settings = {"zookeeper.connect": zk_connect, "zookeeper.session.timeout.ms": "6000"}
    settings.update(overrides)
    return BrokerProcess(tmp_path / name, overrides=settings, log_path=tmp_path / f"{name}.log")


def _refused(tmp_path: Path, name: str, zk_connect: str, **overrides: str) -> tuple[int, str]:
    """Run a broker expected to refuse to start; its exit code and stderr."""
    broker = _broker(tmp_path, name, zk_connect, **overrides)
    broker.data_dir.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        broker.command(), capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )
    return done.returncode, done.stderr


def _error_lines(stderr: str) -> list[str]:
    """The CLI's error lines (the broker's own log also goes to stderr): exactly one,
    and no traceback."""
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, stderr
    return lines


def _wait_registered(zk: ZkClient, ids: list[int], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while zk.get_broker_ids() != ids and time.monotonic() < deadline:
        time.sleep(0.05)
    assert zk.get_broker_ids() == ids


def _wait_logged(broker: BrokerProcess, line: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while line not in broker.log_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert line in broker.log_text()


def test_broker_joins_and_registers_its_endpoint(
    tmp_path: Path, zk_connect: str, zk: ZkClient, brokers: list[BrokerProcess]
) -> None:
    broker = _broker(tmp_path, "b2", zk_connect, **{"broker.id": "2", "broker.rack": "r1"})
    brokers.append(broker.start())
    _wait_registered(zk, [2])
    registration = zk.get_broker(2)
    assert registration is not None
    assert [e.connection_string for e in registration.endpoints] == [
        f"PLAINTEXT://127.0.0.1:{broker.port}"
    ]
    assert registration.rack == "r1"
    cluster_id = zk.get_cluster_id()
    stored = meta_properties.read(broker.data_dir)
    assert stored is not None and stored.cluster_id == cluster_id and stored.broker_id == 2
    # A graceful stop ends the session: the registration disappears with it.
    assert broker.stop() == 0
    _wait_registered(zk, [])


def test_wrong_cluster_id_is_refused(tmp_path: Path, zk_connect: str, zk: ZkClient) -> None:
    zk.get_or_create_cluster_id()
    data_dir = tmp_path / "b1"
    data_dir.mkdir()
    meta_properties.write(data_dir, meta_properties.MetaProperties(1, "AAAAAAAAAAAAAAAAAAAAAA"))
    code, stderr = _refused(tmp_path, "b1", zk_connect, **{"broker.id": "1"})
    assert code != 0
    lines = _error_lines(stderr)
    assert "doesn't match stored clusterId AAAAAAAAAAAAAAAAAAAAAA" in lines[0]
    assert zk.get_broker_ids() == []


def test_duplicate_broker_id_is_refused_in_one_line(
    tmp_path: Path, zk_connect: str, zk: ZkClient, brokers: list[BrokerProcess]
) -> None:
    brokers.append(_broker(tmp_path, "first", zk_connect, **{"broker.id": "7"}).start())
    _wait_registered(zk, [7])
    code, stderr = _refused(tmp_path, "second", zk_connect, **{"broker.id": "7"})
    assert code != 0
    lines = _error_lines(stderr)
    assert "broker.id 7 already registered" in lines[0]
    assert brokers[0].is_running()
    assert zk.get_broker_ids() == [7]


def test_unreachable_zookeeper_is_refused_within_the_timeout(tmp_path: Path) -> None:
    dead = f"127.0.0.1:{free_port()}"  # nothing listens there
    started = time.monotonic()
    code, stderr = _refused(
        tmp_path, "b", dead, **{"zookeeper.connection.timeout.ms": "1500", "broker.id": "1"}
    )
    elapsed = time.monotonic() - started
    assert code != 0
    lines = _error_lines(stderr)
    assert f"cannot reach ZooKeeper at {dead}" in lines[0]
    assert elapsed < 30  # 1.5 s plus interpreter start-up, with room for a loaded machine


def test_generated_broker_id_is_kept_in_meta_properties(
    tmp_path: Path, zk_connect: str, zk: ZkClient, brokers: list[BrokerProcess]
) -> None:
    broker = _broker(tmp_path, "gen", zk_connect, **{"broker.id": "-1"})
    brokers.append(broker.start())
    _wait_registered(zk, [1001])  # /brokers/seqid version 1 + reserved.broker.max.id
    stored = meta_properties.read(broker.data_dir)
    assert stored is not None and stored.broker_id == 1001
    # Restarted, it reads its id back instead of generating a new one.
    broker.stop()
    broker.start()
    _wait_registered(zk, [1001])
    # A second fresh broker gets the next id.
    other = _broker(tmp_path, "gen2", zk_connect, **{"broker.id": "-1"})
    brokers.append(other.start())
    _wait_registered(zk, [1001, 1002])


def test_embedded_default_does_not_touch_zookeeper(tmp_path: Path) -> None:
    code = subprocess.run(
        [sys.executable, "-m", "odradek", "server", "--override", "broker.id=-1"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert code.returncode != 0
    assert "broker.id: must be at least 0 without zookeeper.connect" in code.stderr


def test_broker_registers_again_after_its_session_expired(
    tmp_path: Path,
    zk_connect: str,
    zk: ZkClient,
    zookeeper_server: ZooKeeperServer,
    brokers: list[BrokerProcess],
) -> None:
    """The broker process lives on while ZooKeeper expires its session (cut behind a
    proxy): once it reaches ZooKeeper again it registers under a new session."""
    proxy = TcpProxy(zookeeper_server.port).start()
    try:
        chroot = zk_connect[zk_connect.index("/") :]
        broker = _broker(
            tmp_path,
            "b4",
            proxy.address + chroot,
            **{"broker.id": "4", "zookeeper.session.timeout.ms": "4000"},
        )
        brokers.append(broker.start())
        _wait_registered(zk, [4])
        first = zk._get("/brokers/ids/4")
        assert first is not None
        # Cut only once the broker has its answer: a registration cut off before it
        # knows it succeeded fails after zookeeper.connection.timeout.ms and the broker
        # exits (as Kafka's does at start-up), which is not what this test is about.
        _wait_logged(broker, "registered broker 4 at")
        proxy.cut()
        _wait_registered(zk, [], timeout=30)  # the server expired the session
        proxy.restore()
        _wait_registered(zk, [4], timeout=30)
        again = zk._get("/brokers/ids/4")
        assert again is not None
        assert again[1].czxid > first[1].czxid  # a new registration: a new broker epoch
        assert again[1].ephemeralOwner != first[1].ephemeralOwner
        assert broker.is_running()
        # The log line follows the znode's creation: give it a moment on a loaded machine.
        deadline = time.monotonic() + 10
        while "re-registered broker 4" not in broker.log_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "re-registered broker 4" in broker.log_text()
    finally:
        proxy.close()


def test_a_controller_cut_off_from_zookeeper_stops_promptly_on_sigterm(
    tmp_path: Path, zk_connect: str, zk: ZkClient, zookeeper_server: ZooKeeperServer
) -> None:
    """The controller loses ZooKeeper (kazoo keeps reconnecting) and gets SIGTERM. Its
    resignation used to delete /controller through a call kazoo queued until it
    reconnected, with no timeout: the shutdown hung until the leave-the-cluster bound
    (intermittently past the test harness's 30 s, in the teardown of the test above).
    Now no call outlives zookeeper.connection.timeout.ms and a disconnected controller
    leaves /controller to its session, as Kafka's does."""
    proxy = TcpProxy(zookeeper_server.port).start()
    try:
        chroot = zk_connect[zk_connect.index("/") :]
        broker = _broker(
            tmp_path,
            "b7",
            proxy.address + chroot,
            **{"broker.id": "7", "zookeeper.session.timeout.ms": "6000"},
        )
        broker.start()
        try:
            _wait_registered(zk, [7])
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                controller = zk.get_controller()
                if controller is not None and controller.broker_id == 7:
                    break
                time.sleep(0.05)
            assert controller is not None and controller.broker_id == 7
            _wait_logged(broker, "broker 7 elected controller")
            proxy.cut()  # closes its connection and refuses new ones: it keeps retrying
            time.sleep(0.5)
            started = time.monotonic()
            assert broker.stop(timeout=60) == 0
            took = time.monotonic() - started
        finally:
            broker.kill()
        log_text = broker.log_text()
        assert "shut down cleanly" in log_text
        assert "leaving the cluster took over" not in log_text
        assert took < 30, f"SIGTERM took {took:.1f} s"  # 60 s and more before the fix
    finally:
        proxy.close()


def test_sigterm_right_after_the_listener_opens_stops_gracefully(
    tmp_path: Path, zk_connect: str, zk: ZkClient
) -> None:
    """The listener opens before cluster start-up ends (registration, the controller):
    a SIGTERM then must still mean a graceful stop, not death by the default action."""
    broker = _broker(tmp_path, "early", zk_connect, **{"broker.id": "5"})
    broker.start()  # returns as soon as the port accepts connections
    assert broker.stop() == 0
    assert "shut down cleanly" in broker.log_text()
    _wait_registered(zk, [])
