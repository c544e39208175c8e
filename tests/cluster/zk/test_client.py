"""ZkClient and ControllerElector against a real ZooKeeper server."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from odradek.cluster.zk import paths
from odradek.cluster.zk.client import ControllerEpoch, ZkClient
from odradek.cluster.zk.codecs import (
    BrokerEndpoint,
    BrokerRegistration,
    PartitionState,
    TopicAssignment,
    random_kafka_uuid,
)
from odradek.cluster.zk.election import ControllerElector
from odradek.cluster.zk.errors import (
    BrokerIdAlreadyRegistered,
    ControllerMoved,
    NodeExists,
    StaleVersion,
    ZooKeeperClientTimeout,
)
from tests.helpers.broker import free_port
from tests.helpers.tcp_proxy import TcpProxy
from tests.helpers.zookeeper import ZooKeeperServer, zookeeper_available

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.timeout(120)]

SESSION_MS = 4000


@pytest.fixture
def connect_client(zk_connect: str) -> Iterator[Callable[..., ZkClient]]:
    clients: list[ZkClient] = []

    def make(**kwargs: int) -> ZkClient:
        kwargs.setdefault("session_timeout_ms", SESSION_MS)
        client = ZkClient.connect(zk_connect, **kwargs)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


def registration(broker_id: int, port: int = 9092) -> BrokerRegistration:
    endpoint = BrokerEndpoint("PLAINTEXT", "127.0.0.1", port, "PLAINTEXT")
    return BrokerRegistration(broker_id, (endpoint,), timestamp_ms=int(time.time() * 1000))


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def test_chroot_is_created_and_isolates(connect_client, zookeeper_server: ZooKeeperServer) -> None:
    client = connect_client()
    client.create_top_level_paths()
    root = KazooClient(hosts=zookeeper_server.connect)
    root.start(10)
    try:
        chroots = root.get_children("/t")
        assert any(name.startswith("test_chroot_is_created") for name in chroots)
        assert not root.exists("/brokers/ids")  # everything went under the chroot
    finally:
        root.stop()
        root.close()


def test_broker_registration_is_ephemeral(connect_client) -> None:
    broker, observer = connect_client(), connect_client()
    epoch = broker.register_broker(registration(1))
    assert epoch > 0  # the znode's czxid
    assert observer.get_broker_ids() == [1]
    assert observer.get_broker(1) == registration(1).__class__.decode(
        1, broker._zk.get(paths.broker_id(1))[0]
    )
    assert observer.get_broker(1).endpoints[0].port == 9092
    broker.close()
    wait_until(lambda: observer.get_broker_ids() == [], 5, "the ephemeral node to vanish")
    assert observer.get_broker(1) is None


def test_duplicate_broker_id_is_refused(connect_client) -> None:
    first, second = connect_client(), connect_client()
    first.register_broker(registration(5))
    with pytest.raises(BrokerIdAlreadyRegistered, match=r"broker\.id 5 already registered"):
        second.register_broker(registration(5, port=9093))
    assert first.get_broker(5).endpoints[0].port == 9092  # untouched
    # The same session registering again is not a duplicate (a retried create).
    assert first.register_broker(registration(5)) > 0


def test_generated_broker_ids_are_distinct(connect_client) -> None:
    a, b = connect_client(), connect_client()
    ids = [a.generate_broker_id(), b.generate_broker_id(), a.generate_broker_id()]
    assert ids == [1001, 1002, 1003]  # seqid version (from 1) + reserved.broker.max.id
    assert b.generate_broker_id(reserved_broker_max_id=0) == 4


def test_cluster_id_is_created_once(connect_client) -> None:
    a, b = connect_client(), connect_client()
    assert a.get_cluster_id() is None
    first = a.get_or_create_cluster_id()
    assert len(first) == 22
    assert b.get_or_create_cluster_id() == first
    assert b.get_or_create_cluster_id(proposed=random_kafka_uuid()) == first
    a.close()
    assert connect_client().get_cluster_id() == first


def test_exactly_one_controller_and_epoch_grows(connect_client) -> None:
    clients = [connect_client() for _ in range(2)]
    barrier = threading.Barrier(2)
    outcomes: dict[int, object] = {}

    def contend(broker_id: int) -> None:
        barrier.wait()
        try:
            outcomes[broker_id] = clients[broker_id].register_controller(broker_id)
        except ControllerMoved as exc:
            outcomes[broker_id] = exc

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    winners = [b for b, outcome in outcomes.items() if isinstance(outcome, ControllerEpoch)]
    assert len(winners) == 1, outcomes
    winner = winners[0]
    loser = 1 - winner
    assert outcomes[winner] == ControllerEpoch(epoch=1, zk_version=1)
    assert clients[loser].get_controller().broker_id == winner

    clients[winner].close()
    wait_until(lambda: clients[loser].get_controller() is None, 5, "/controller to vanish")
    assert clients[loser].register_controller(loser).epoch == 2
    assert clients[loser].get_controller_epoch() == ControllerEpoch(2, 2)


def test_elector_fails_over_within_session_timeout(connect_client) -> None:
    events: list[tuple[int, str, int]] = []
    clients = [connect_client(), connect_client()]
    electors = []
    for broker_id, client in enumerate(clients):

        def elected(epoch: ControllerEpoch, broker_id: int = broker_id) -> None:
            events.append((broker_id, "elected", epoch.epoch))

        def resigned(broker_id: int = broker_id) -> None:
            events.append((broker_id, "resigned", 0))

        elector = ControllerElector(client, broker_id, elected, resigned)
        elector.start()
        electors.append(elector)
    wait_until(lambda: any(e.is_controller for e in electors), 10, "a first controller")
    assert sum(e.is_controller for e in electors) == 1
    winner = 0 if electors[0].is_controller else 1
    other = 1 - winner
    first_epoch = electors[winner].epoch.epoch

    started = time.monotonic()
    clients[winner].close()  # the winner's session ends
    wait_until(lambda: electors[other].is_controller, SESSION_MS / 1000 + 5, "failover")
    assert time.monotonic() - started < SESSION_MS / 1000 + 5
    assert electors[other].epoch.epoch == first_epoch + 1
    assert (other, "elected", first_epoch + 1) in events
    assert clients[other].get_controller().broker_id == other
    electors[other].stop()
    assert (other, "resigned", 0) in events
    assert clients[other].get_controller() is None


def test_partition_state_compare_and_set(connect_client) -> None:
    controller, leader = connect_client(), connect_client()
    epoch = controller.register_controller(1)
    assignment = TopicAssignment({0: (1, 2)}, random_kafka_uuid())
    controller.create_topic("orders", assignment, {"retention.ms": "1000"})
    with pytest.raises(NodeExists):
        controller.create_topic("orders", assignment)
    assert leader.get_topics() == ["orders"]
    assert leader.get_topic_assignment("orders") == (assignment, 0)
    assert leader.get_entity_config("topics", "orders") == {"retention.ms": "1000"}

    state = PartitionState(leader=1, leader_epoch=0, isr=(1, 2), controller_epoch=epoch.epoch)
    assert controller.create_partition_state("orders", 0, state, epoch.zk_version) == 0
    with pytest.raises(NodeExists):
        controller.create_partition_state("orders", 0, state, epoch.zk_version)

    read, version = leader.get_partition_state("orders", 0)
    assert (read, version) == (state, 0)
    shrunk = PartitionState(1, 0, (1,), epoch.epoch)
    assert leader.update_partition_state("orders", 0, shrunk, version) == 1
    # The controller still holds version 0: its write is stale and must not land.
    elected = PartitionState(2, 1, (2,), epoch.epoch)
    with pytest.raises(StaleVersion):
        controller.update_partition_state("orders", 0, elected, 0, epoch.zk_version)
    assert leader.get_partition_state("orders", 0) == (shrunk, 1)
    assert controller.update_partition_state("orders", 0, elected, 1, epoch.zk_version) == 2


def test_zombie_controller_writes_are_fenced(connect_client) -> None:
    old, new = connect_client(), connect_client()
    old_epoch = old.register_controller(1)
    old.create_topic("t", TopicAssignment({0: (1,)}))
    old.create_partition_state("t", 0, PartitionState(1, 0, (1,), 1), old_epoch.zk_version)
    old.resign_controller(old_epoch.zk_version)
    new_epoch = new.register_controller(2)
    assert new_epoch.epoch == old_epoch.epoch + 1
    with pytest.raises(ControllerMoved):
        old.update_partition_state("t", 0, PartitionState(1, 1, (1,), 1), 0, old_epoch.zk_version)
    with pytest.raises(ControllerMoved):
        old.create_partition_state("t", 1, PartitionState(1, 0, (1,), 1), old_epoch.zk_version)
    assert new.get_partition_state("t", 0)[1] == 0  # untouched
    with pytest.raises(ControllerMoved):
        old.resign_controller(old_epoch.zk_version)  # must not delete its successor's seat
    assert new.get_controller().broker_id == 2


def test_config_change_notifications_are_watched(connect_client) -> None:
    writer, reader = connect_client(), connect_client()
    seen: list[list[str]] = []
    stop = reader.watch_config_changes(seen.append)
    path = writer.change_entity_config("topics", "orders", {"cleanup.policy": "compact"})
    assert path == "/config/changes/config_change_0000000000"
    wait_until(lambda: seen and seen[-1] == ["config_change_0000000000"], 5, "the watch")
    assert reader.get_config_changes() == [(0, "topics/orders")]
    assert reader.get_entity_config("topics", "orders") == {"cleanup.policy": "compact"}
    stop()
    writer.create_isr_change_notification({("orders", 0), ("orders", 1)})
    assert reader.get_isr_change_notifications() == [(0, {("orders", 0), ("orders", 1)})]


def test_session_expiry_lets_the_broker_register_again(
    zk_connect: str, zookeeper_server: ZooKeeperServer, connect_client
) -> None:
    observer = connect_client()
    # The broker reaches ZooKeeper through a proxy the test can cut, so only its session
    # starves and expires on the server, as after a long pause or a network partition.
    proxy = TcpProxy(zookeeper_server.port).start()
    chroot = zk_connect[zk_connect.index("/") :]
    broker = ZkClient.connect(proxy.address + chroot, session_timeout_ms=SESSION_MS)
    try:
        lost, renewed = threading.Event(), threading.Event()
        broker.on_session_lost(lost.set)

        def register_again() -> None:
            broker.register_broker(registration(3))
            renewed.set()

        broker.on_new_session(register_again)
        broker.register_broker(registration(3))
        old_session = broker.session_id

        proxy.cut()
        wait_until(lambda: observer.get_broker_ids() == [], SESSION_MS / 1000 + 10, "expiry")
        assert not lost.is_set()  # the client cannot know before it reaches ZooKeeper again
        proxy.restore()

        assert lost.wait(10), "session loss not reported"
        assert renewed.wait(10), "no new session"
        assert broker.session_id != old_session
        wait_until(lambda: observer.get_broker_ids() == [3], 5, "the registration to return")
    finally:
        broker.close()
        proxy.close()


def test_a_call_while_reconnecting_waits_for_the_connection_until_interrupted(
    zk_connect: str, zookeeper_server: ZooKeeperServer
) -> None:
    """A call made while the connection is down waits for it (Kafka's
    retryRequestsUntilConnected) and goes through once it is back; interrupt() (a
    stopping broker) ends the waiting at once. Plain kazoo kept such a request in its
    queue, where nothing could end it: a controller cut off from ZooKeeper hung its own
    shutdown."""
    proxy = TcpProxy(zookeeper_server.port).start()
    chroot = zk_connect[zk_connect.index("/") :]
    client = ZkClient.connect(
        proxy.address + chroot, session_timeout_ms=20000, connection_timeout_ms=1000
    )
    outcomes: list[object] = []

    def call() -> None:
        try:
            outcomes.append(client.get_broker_ids())
        except ZooKeeperClientTimeout as exc:
            outcomes.append(exc)

    try:
        client.create_top_level_paths()
        proxy.cut()  # refuses reconnections too: kazoo keeps trying
        wait_until(lambda: not client.connected, 10, "the client to see the cut")
        waiting = threading.Thread(target=call, daemon=True)
        waiting.start()
        waiting.join(2.5)  # past the connection timeout: still waiting for ZooKeeper
        assert waiting.is_alive() and not outcomes
        proxy.restore()
        waiting.join(15)
        assert outcomes == [[]]  # done on the same session once reconnected

        proxy.cut()
        wait_until(lambda: not client.connected, 10, "the client to see the second cut")
        interrupted = threading.Thread(target=call, daemon=True)
        interrupted.start()
        time.sleep(0.5)
        started = time.monotonic()
        client.interrupt()
        interrupted.join(15)
        assert not interrupted.is_alive(), "interrupt() did not end the waiting call"
        assert isinstance(outcomes[1], ZooKeeperClientTimeout), outcomes
        assert time.monotonic() - started < 5
    finally:
        client.close()  # also ends a call still waiting (before the fix)
        proxy.close()


def test_connection_timeout_is_a_typed_error() -> None:
    started = time.monotonic()
    with pytest.raises(ZooKeeperClientTimeout):
        ZkClient.connect(f"127.0.0.1:{free_port()}", connection_timeout_ms=1000)
    assert time.monotonic() - started < 15


@pytest.mark.skipif(not zookeeper_available(), reason="ZooKeeper not installed")
def test_survives_zookeeper_kill_and_restart(tmp_path: Path) -> None:
    server = ZooKeeperServer(tmp_path).start()
    client = ZkClient.connect(f"{server.connect}/kafka", session_timeout_ms=18000)
    try:
        broker_epoch = client.register_broker(registration(1))
        cluster_id = client.get_or_create_cluster_id()
        epoch = client.register_controller(1)
        client.create_topic("t", TopicAssignment({0: (1,)}))
        state = PartitionState(1, 0, (1,), epoch.epoch)
        client.create_partition_state("t", 0, state, epoch.zk_version)
        session = client.session_id

        server.kill()  # SIGKILL: no shutdown, ZooKeeper recovers from its log
        wait_until(lambda: not client.connected, 10, "the client to notice")
        server.start()
        wait_until(lambda: client.connected, 30, "the client to reconnect")

        # Same session (ZooKeeper keeps sessions in its log), so ephemerals survive too.
        assert client.session_id == session
        assert client.get_cluster_id() == cluster_id
        assert client.get_broker_ids() == [1]
        assert client.get_controller().broker_id == 1
        assert client.get_partition_state("t", 0) == (state, 0)
        assert client.update_partition_state("t", 0, state, 0, epoch.zk_version) == 1
        assert client.register_broker(registration(1)) == broker_epoch
    finally:
        client.close()
        server.stop()


def test_elector_fails_over_when_the_controller_session_expires(
    zk_connect: str, zookeeper_server: ZooKeeperServer, connect_client
) -> None:
    """The controller's process lives on but cannot reach ZooKeeper (a partition or a long
    pause): its session expires, the other broker takes over, and the old controller
    learns it resigned once it is back."""
    proxy = TcpProxy(zookeeper_server.port).start()
    chroot = zk_connect[zk_connect.index("/") :]
    cut_off = ZkClient.connect(proxy.address + chroot, session_timeout_ms=SESSION_MS)
    healthy = connect_client()
    resigned = threading.Event()
    first = ControllerElector(cut_off, 1, lambda epoch: None, resigned.set)
    second = ControllerElector(healthy, 2, lambda epoch: None, lambda: None)
    try:
        first.start()
        wait_until(lambda: first.is_controller, 10, "broker 1 to be elected")
        second.start()
        assert not second.is_controller

        proxy.cut()
        started = time.monotonic()
        wait_until(lambda: second.is_controller, SESSION_MS / 1000 + 10, "failover")
        assert time.monotonic() - started < SESSION_MS / 1000 + 10
        assert second.epoch.epoch == 2
        proxy.restore()
        assert resigned.wait(15), "the old controller never learned it lost its seat"
        wait_until(lambda: not first.is_controller, 5, "broker 1 to step down")
        assert healthy.get_controller().broker_id == 2
    finally:
        first.stop()
        second.stop()
        cut_off.close()
        proxy.close()


def test_stale_session_loss_does_not_unseat_a_controller_elected_since(connect_client) -> None:
    """The session-lost callback runs on its own thread; when it arrives after the new
    session already re-elected this broker, the fresh epoch must stay."""
    client = connect_client()
    resigned = threading.Event()
    elector = ControllerElector(client, 1, lambda epoch: None, resigned.set)
    elector.start()
    try:
        wait_until(lambda: elector.is_controller, 10, "the election")
        elector._session_lost()  # as if delivered late, after the re-election
        assert elector.is_controller and not resigned.is_set()
    finally:
        elector.stop()


def test_many_partition_states_are_created_in_a_pipelined_batch(connect_client) -> None:
    controller = connect_client()
    epoch = controller.register_controller(1)
    controller.create_topic("many", TopicAssignment({i: (1,) for i in range(1200)}))
    state = PartitionState(1, 0, (1,), epoch.epoch)
    controller.create_partition_state("many", 5, state, epoch.zk_version)  # written before
    states = [("many", i, state) for i in range(1200)]
    outcomes = controller.create_partition_states(states, epoch.zk_version)
    assert [i for i, o in enumerate(outcomes) if o is not None] == [5]
    assert isinstance(outcomes[5], NodeExists)
    assert controller.get_partition_state("many", 1199) == (state, 0)
    assert controller.get_partition_state("many", 0) == (state, 0)
    # A deposed controller's batch is fenced.
    controller.resign_controller(epoch.zk_version)
    connect_client().register_controller(2)
    with pytest.raises(ControllerMoved):
        controller.create_partition_states([("many", 1200, state)], epoch.zk_version)
