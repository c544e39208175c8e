"""A ZooKeeper-coordinated odradek cluster of broker subprocesses, for fault tests.

``BrokerCluster(tmp_path, zk_connect, size=3).start()`` starts brokers 1..size on
127.0.0.1 free ports, all pointed at ``zk_connect`` (a real ZooKeeper, usually the
per-test chroot of the ``zk_connect`` fixture), with a short session timeout so failures
are noticed in seconds. Helpers read the cluster the way a client does (Metadata through
confluent-kafka, from one chosen broker) and the way the controller does (a ZkClient of
the test's own).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from confluent_kafka.admin import AdminClient, NewTopic

from odradek.cluster.zk.client import ZkClient
from tests.helpers.broker import BrokerProcess

SESSION_TIMEOUT_MS = 6000

T = TypeVar("T")


def wait_for(probe: Callable[[], T], timeout: float, what: str, interval: float = 0.1) -> T:
    """Poll ``probe`` until it returns something truthy; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = probe()
        except Exception as exc:  # a probe may fail while the cluster settles
            last = exc
        if last and not isinstance(last, Exception):
            return last
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")
        time.sleep(interval)


def zk_broker(
    tmp_path: Path, zk_connect: str, broker_id: int, overrides: dict[str, str] | None = None
) -> BrokerProcess:
    """Broker ``broker_id`` (not started) in ``tmp_path/b<id>``, logging to ``b<id>.log``,
    with the settings the hand-built clusters share: a 6 s ZooKeeper session, so a stopped
    broker is noticed quickly, and a short controlled-shutdown backoff, since the last
    broker to stop finds nowhere to move its leaders (don't wait 3 x 5 s)."""
    return BrokerProcess(
        tmp_path / f"b{broker_id}",
        overrides={
            "zookeeper.connect": zk_connect,
            "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
            "broker.id": str(broker_id),
            "controlled.shutdown.retry.backoff.ms": "100",
            **(overrides or {}),
        },
        log_path=tmp_path / f"b{broker_id}.log",
    )


class BrokerCluster:
    def __init__(
        self,
        tmp_path: Path,
        zk_connect: str,
        size: int = 3,
        overrides: dict[str, str] | None = None,
    ) -> None:
        self.zk_connect = zk_connect
        settings = {
            "zookeeper.connect": zk_connect,
            "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
            # A broker stopping last finds nowhere to move its leaders: don't wait 3 x 5 s.
            "controlled.shutdown.retry.backoff.ms": "200",
            **(overrides or {}),
        }
        self.brokers: dict[int, BrokerProcess] = {
            broker_id: BrokerProcess(
                tmp_path / f"broker-{broker_id}",
                overrides={**settings, "broker.id": str(broker_id)},
                log_path=tmp_path / f"broker-{broker_id}.log",
            )
            for broker_id in range(1, size + 1)
        }
        self.zk = ZkClient.connect(zk_connect, session_timeout_ms=SESSION_TIMEOUT_MS)

    def start(self) -> BrokerCluster:
        for broker in self.brokers.values():
            broker.start()
        ids = sorted(self.brokers)
        wait_for(lambda: self.zk.get_broker_ids() == ids, 30, f"brokers {ids} registered")
        wait_for(lambda: self.zk.get_controller() is not None, 30, "a controller")
        # Every broker has heard from the controller (UpdateMetadata lists all of them).
        for broker_id in ids:
            wait_for(
                lambda b=broker_id: sorted(self.metadata(b).brokers) == ids,
                30,
                f"broker {broker_id}'s metadata to list every broker",
            )
        return self

    def close(self) -> None:
        for broker in self.brokers.values():
            if broker.proc is not None and broker.is_running():
                broker.proc.send_signal(18)  # SIGCONT: a stopped broker cannot handle SIGTERM
        for broker in self.brokers.values():
            try:
                broker.stop()
            except RuntimeError:
                pass  # stop() killed it after the timeout
        self.zk.close()

    # --- reading the cluster ------------------------------------------------------------

    def bootstrap(self, *broker_ids: int) -> str:
        ids = broker_ids or tuple(self.brokers)
        return ",".join(self.brokers[b].bootstrap for b in ids)

    def live(self) -> list[int]:
        return [b for b, broker in self.brokers.items() if broker.is_running()]

    def admin(self, *broker_ids: int) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap(*(broker_ids or self.live()))})

    def metadata(self, broker_id: int, topic: str | None = None) -> Any:
        """Metadata as broker ``broker_id`` answers it (its own bootstrap only)."""
        return self.admin(broker_id).list_topics(topic, timeout=5)

    def controller_id(self) -> int | None:
        registration = self.zk.get_controller()
        return None if registration is None else registration.broker_id

    def leaders(self, topic: str, via: int) -> dict[int, int]:
        partitions = self.metadata(via, topic).topics[topic].partitions
        return {p: info.leader for p, info in partitions.items()}

    def create_topic(self, topic: str, partitions: int, replication_factor: int = 3) -> None:
        admin = self.admin()  # kept alive until the future is done
        futures = admin.create_topics(
            [NewTopic(topic, partitions, replication_factor)], operation_timeout=20
        )
        futures[topic].result(30)
        # Leaders known to every live broker: clients may bootstrap through any of them.
        for broker_id in self.live():
            wait_for(
                lambda b=broker_id: (
                    all(leader >= 0 for leader in self.leaders(topic, b).values())
                    and len(self.leaders(topic, b)) == partitions
                ),
                30,
                f"{topic}'s leaders on broker {broker_id}",
            )

    def wait_all_agree_on_controller(self, expected: int, timeout: float = 30) -> None:
        for broker_id in self.live():
            wait_for(
                lambda b=broker_id: self.metadata(b).controller_id == expected,
                timeout,
                f"broker {broker_id} to name controller {expected}",
            )
