"""Controller election through ``/controller``, as Kafka's KafkaController.elect.

Every broker runs a :class:`ControllerElector`. It watches ``/controller``; whenever the
znode is absent it tries :meth:`ZkClient.register_controller`. The winner's
``on_elected(epoch)`` runs; when its seat is lost (its session expired, or ``/controller``
names another broker) ``on_resigned()`` runs and it takes part in the next election.
Callbacks run on kazoo's threads, one at a time, and must return quickly (hand the work
to the controller's event queue): kazoo delivers every other watch on the same thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from odradek.cluster.zk.client import ControllerEpoch, ZkClient
from odradek.cluster.zk.codecs import ControllerRegistration
from odradek.cluster.zk.errors import ControllerMoved, ZooKeeperError

log = logging.getLogger(__name__)


class ControllerElector:
    def __init__(
        self,
        zk: ZkClient,
        broker_id: int,
        on_elected: Callable[[ControllerEpoch], None],
        on_resigned: Callable[[], None],
    ) -> None:
        self._zk = zk
        self.broker_id = broker_id
        self._on_elected = on_elected
        self._on_resigned = on_resigned
        self._lock = threading.RLock()
        self._stop_watch: Callable[[], None] | None = None
        self._stopped = False
        self.epoch: ControllerEpoch | None = None  # set while this broker is controller
        self._elected_session = 0  # the ZooKeeper session that won self.epoch

    @property
    def is_controller(self) -> bool:
        return self.epoch is not None

    def start(self) -> None:
        self._zk.on_session_lost(self._session_lost)
        self._stop_watch = self._zk.watch_controller(self._controller_changed)

    def stop(self) -> None:
        """Stop taking part; resign if this broker is the controller."""
        with self._lock:
            self._stopped = True
            if self._stop_watch is not None:
                self._stop_watch()
            if self.epoch is not None:
                epoch, self.epoch = self.epoch, None
                if not self._zk.connected:
                    # The ephemeral /controller goes with the session, which the broker
                    # closes as it stops (Kafka never deletes it on shutdown): waiting
                    # for a reconnection here would only hold the shutdown up.
                    log.info("not connected to ZooKeeper: /controller goes with the session")
                else:
                    try:
                        self._zk.resign_controller(epoch.zk_version)
                    except ZooKeeperError as exc:
                        log.warning("could not delete /controller on resigning: %s", exc)
                self._on_resigned()

    def _session_lost(self) -> None:
        # The ephemeral /controller went with the session; the watch elects again once
        # the new session sees the znode absent. This callback runs on its own thread and
        # may come after that re-election: an epoch won in the live session stays.
        with self._lock:
            if self.epoch is not None and self._elected_session == self._zk.session_id:
                return
            self._resign("ZooKeeper session expired")

    def _resign(self, reason: str) -> None:
        if self.epoch is None:
            return
        log.info(
            "broker %d is no longer controller (epoch %d): %s",
            self.broker_id,
            self.epoch.epoch,
            reason,
        )
        self.epoch = None
        self._on_resigned()

    def _controller_changed(self, registration: ControllerRegistration | None) -> None:
        with self._lock:
            if self._stopped:
                return
            if registration is not None:
                if registration.broker_id != self.broker_id:
                    self._resign(f"broker {registration.broker_id} is controller")
                return
            self._resign("/controller was deleted")
            try:
                self.epoch = self._zk.register_controller(self.broker_id)
                self._elected_session = self._zk.session_id
            except ControllerMoved as exc:
                log.debug("%s", exc)
                return
            except ZooKeeperError as exc:
                log.warning("controller election failed: %s", exc)
                return
            log.info("broker %d elected controller with epoch %d", self.broker_id, self.epoch.epoch)
            self._on_elected(self.epoch)
