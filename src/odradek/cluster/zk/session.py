"""One ZooKeeper session over kazoo: connecting, retries, session expiry, fenced writes.

Every call is synchronous. While the connection is down it waits for kazoo to reconnect
and is then retried, as Kafka's ``retryRequestsUntilConnected`` does (a call that keeps
failing on a flapping connection gives up after ``zookeeper.connection.timeout.ms``).
:meth:`ZkSession.interrupt` ends that waiting: a stopping broker calls it, and from then
on a call made or waiting while disconnected fails at once. Plain kazoo queued a request
made while it was reconnecting and its synchronous call (ours, or one inside its watch
recipes) waited in that queue with nothing able to end it: a controller cut off from
ZooKeeper hung its own shutdown there. :class:`_BoundedKazooClient` fails such a request
at once with ConnectionLoss, and the waiting happens where it can be interrupted. An
asyncio caller runs them with ``asyncio.to_thread``. Callbacks (watches, session events)
run on kazoo's threads, never on an event loop: hand them over with ``loop.call_soon_threadsafe``.

A write made on behalf of a controller epoch takes the ``/controller_epoch`` znode
version that controller won with; it is sent as one ZooKeeper transaction with a version
check on ``/controller_epoch``, so a controller that lost its seat (a zombie) fails with
:class:`ControllerMoved` instead of overwriting the new controller's work, as Kafka's
controller does.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from functools import partial
from typing import Any, Self

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, ConnectionLoss, NoNodeError, RolledBackError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState, KeeperState, ZnodeStat
from kazoo.recipe.watchers import DataWatch
from kazoo.retry import InterruptedError as KazooInterruptedError
from kazoo.retry import KazooRetry, RetryFailedError

from odradek.cluster.zk import paths
from odradek.cluster.zk.errors import ControllerMoved, NoNode, StaleVersion, ZooKeeperClientTimeout

log = logging.getLogger(__name__)

DEFAULT_SESSION_TIMEOUT_MS = 18_000  # zookeeper.session.timeout.ms


class _BoundedDataWatch(DataWatch):
    """kazoo's DataWatch retries its reads for ever, up to 60 s apart: with requests that
    fail while reconnecting, it could sit in a backoff for a minute after the connection
    came back, and nothing could stop it. It takes the client's command retry instead (at
    most 1 s apart, ended by :meth:`ZkSession.interrupt`), as ChildrenWatch does."""

    @property  # type: ignore[override]
    def _retry(self) -> Callable[..., Any]:
        return self._client.retry

    @_retry.setter
    def _retry(self, _ignored: Any) -> None:
        pass  # DataWatch.__init__ sets its own unbounded retry


class _BoundedKazooClient(KazooClient):
    """A kazoo client whose requests never wait in its queue for a reconnection: one made
    while the client is reconnecting fails at once with ConnectionLoss, and the caller's
    retry (ours, or the watch recipes' ``command_retry``) waits and tries again, until
    ``stopping`` is set.
    Queueing and connection-state changes take one lock, so a request cannot slip into
    the queue just after a dropped connection failed everything queued (kazoo would then
    keep it until the next connection)."""

    def __init__(self, *args: Any, stopping: threading.Event, **kwargs: Any) -> None:
        self._state_lock = threading.RLock()
        self.stopping = stopping
        super().__init__(*args, **kwargs)
        self.DataWatch = partial(_BoundedDataWatch, self)

    def _call(self, request: Any, async_object: Any) -> Any:
        with self._state_lock:
            if self._state == KeeperState.CONNECTING:
                async_object.set_exception(ConnectionLoss("reconnecting to ZooKeeper"))
                return False
            return super()._call(request, async_object)

    def _session_callback(self, state: Any) -> None:
        with self._state_lock:
            super()._session_callback(state)


class ZkSession:
    """A kazoo client plus what Kafka's ZooKeeperClient adds around it."""

    def __init__(self, kazoo: KazooClient, session_timeout_ms: int, connection_timeout_ms: int):
        self._zk = kazoo
        self.session_timeout_ms = session_timeout_ms
        self.connection_timeout_ms = connection_timeout_ms
        self._closing = False
        self._lost = False
        self._lost_callbacks: list[Callable[[], None]] = []
        self._new_session_callbacks: list[Callable[[], None]] = []
        self._callback_lock = threading.Lock()
        # Set while connected: a call waits on it instead of queueing into kazoo while
        # it reconnects (see _retry).
        self._live = threading.Event()
        kazoo.add_listener(self._state_changed)
        if kazoo.connected:
            self._live.set()

    # --- connection ---------------------------------------------------------------

    @classmethod
    def connect(
        cls,
        zookeeper_connect: str,
        *,
        session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
        connection_timeout_ms: int | None = None,
    ) -> Self:
        """Connect as a Kafka broker does: ``zookeeper.connect``, its session timeout and
        its connection timeout (which defaults to the session timeout, as in Kafka).
        The chroot is created first if it does not exist yet, as KafkaServer does."""
        target = paths.parse_connect(zookeeper_connect)
        connection_timeout_ms = connection_timeout_ms or session_timeout_ms
        if target.chroot:
            root = _start(target.hosts, session_timeout_ms, connection_timeout_ms)
            try:
                _retry(root, connection_timeout_ms, root.ensure_path, target.chroot)
            finally:
                root.stop()
                root.close()
        kazoo = _start(str(target), session_timeout_ms, connection_timeout_ms)
        return cls(kazoo, session_timeout_ms, connection_timeout_ms)

    def close(self) -> None:
        """End the session: ZooKeeper drops this client's ephemeral znodes at once."""
        self._closing = True
        self._zk.stopping.set()  # calls waiting for a reconnection end now
        self._zk.stop()
        self._zk.close()

    @property
    def session_id(self) -> int:
        return self._zk.client_id[0] if self._zk.client_id else 0

    @property
    def connected(self) -> bool:
        return self._zk.connected

    def on_session_lost(self, callback: Callable[[], None]) -> None:
        """``callback()`` when the session expired: this client's ephemeral znodes (broker
        registration, /controller) are gone and watches need the new session."""
        with self._callback_lock:
            self._lost_callbacks.append(callback)

    def on_new_session(self, callback: Callable[[], None]) -> None:
        """``callback()`` once a new session is connected after a loss: the moment to
        register the broker again (Kafka's SessionExpirationListener)."""
        with self._callback_lock:
            self._new_session_callbacks.append(callback)

    def _state_changed(self, state: str) -> None:
        # Runs on kazoo's connection thread, which must not block: callbacks get a thread.
        if state == KazooState.CONNECTED:
            self._live.set()
        else:
            self._live.clear()
        if self._closing:
            return
        if state == KazooState.LOST:
            self._lost = True
            callbacks = self._lost_callbacks
        elif state == KazooState.CONNECTED and self._lost:
            self._lost = False
            callbacks = self._new_session_callbacks
        else:
            return
        with self._callback_lock:
            for callback in list(callbacks):
                self._zk.handler.spawn(_guarded, callback)

    def _call(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return _retry(
            self._zk,
            self.connection_timeout_ms,
            func,
            *args,
            live=self._live,
            stopping=self._zk.stopping,
            **kwargs,
        )

    def interrupt(self) -> None:
        """Stop waiting for ZooKeeper: from now on a call made, or waiting, while the
        connection is down fails at once (ZooKeeperClientTimeout). A stopping broker
        calls it first, so that no step of its shutdown waits for a reconnection."""
        self._zk.stopping.set()

    def _watch(self, recipe: Callable[..., Any], path: str, callback: Callable[..., Any]) -> Any:
        """Start a kazoo watch recipe (``ChildrenWatch``/``DataWatch``): its first read is
        made at once and, like every call, waits for the connection until interrupted."""
        try:
            return recipe(path, callback)
        except KazooInterruptedError:
            raise ZooKeeperClientTimeout("not connected to ZooKeeper, and stopping") from None

    def _get(self, path: str) -> tuple[bytes, ZnodeStat] | None:
        try:
            return self._call(self._zk.get, path)
        except NoNodeError:
            return None

    def _children(self, path: str) -> list[str]:
        try:
            return self._call(self._zk.get_children, path)
        except NoNodeError:
            return []

    # --- conditional writes -------------------------------------------------------

    def _multi(self, controller_epoch_version: int | None, add_ops: Callable[[Any], None]) -> list:
        """Run a transaction, first checking ``/controller_epoch`` when a version is given.
        Returns kazoo's result list without the check's entry; a failed check raises
        ControllerMoved."""

        def commit() -> list:
            txn = self._zk.transaction()  # built afresh on every retry
            if controller_epoch_version is not None:
                txn.check(paths.CONTROLLER_EPOCH, controller_epoch_version)
            add_ops(txn)
            return txn.commit()

        results = self._call(commit)
        if controller_epoch_version is None:
            return results
        check = results[0]
        if isinstance(check, Exception) and not isinstance(check, RolledBackError):
            raise ControllerMoved(
                f"controller epoch znode is no longer at version {controller_epoch_version}"
            )
        return results[1:]

    def _conditional_set(
        self, path: str, data: bytes, expected_version: int, controller_epoch_version: int | None
    ) -> int:
        if expected_version < 0:
            raise ValueError("a compare-and-set needs the version that was read")
        results = self._multi(
            controller_epoch_version, lambda txn: txn.set_data(path, data, expected_version)
        )
        outcome = results[0]
        if isinstance(outcome, BadVersionError):
            raise StaleVersion(path, expected_version)
        if isinstance(outcome, NoNodeError):
            raise NoNode(path)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome.version


def _start(hosts: str, session_timeout_ms: int, connection_timeout_ms: int) -> KazooClient:
    stopping = threading.Event()
    kazoo = _BoundedKazooClient(
        hosts=hosts,
        timeout=session_timeout_ms / 1000,
        # Reconnect for ever in the background; each command waits up to the connection
        # timeout for it (see _retry).
        connection_retry={"max_tries": -1, "delay": 0.1, "backoff": 2, "max_delay": 1.0},
        # The watch recipes' own calls: retried until connected, like ours, at most 1 s
        # apart, until the session is interrupted.
        command_retry={
            "max_tries": -1,
            "delay": 0.05,
            "max_delay": 1.0,
            "interrupt": stopping.is_set,
        },
        stopping=stopping,
    )
    try:
        kazoo.start(timeout=connection_timeout_ms / 1000)
    except KazooTimeoutError:
        kazoo.stop()
        kazoo.close()
        raise ZooKeeperClientTimeout(
            f"Timed out waiting for connection to {hosts} after {connection_timeout_ms} ms"
        ) from None
    return kazoo


def _retry(
    kazoo: KazooClient,
    timeout_ms: int,
    func: Callable[..., Any],
    *args: Any,
    live: threading.Event | None = None,
    stopping: threading.Event | None = None,
    **kwargs: Any,
) -> Any:
    """``func(*args, **kwargs)`` on a live connection. With ``live`` (set while connected)
    an attempt first waits for the connection, until ``stopping`` is set; a connection
    lost under an attempt is retried, given up ``timeout_ms`` after the first attempt."""

    def attempt() -> Any:
        while live is not None and not live.is_set():
            if stopping is not None and stopping.is_set():
                raise ZooKeeperClientTimeout("not connected to ZooKeeper, and stopping")
            live.wait(0.1)
        return func(*args, **kwargs)

    retry = KazooRetry(
        max_tries=-1,
        delay=0.05,
        max_delay=1.0,
        deadline=timeout_ms / 1000,
        sleep_func=kazoo.handler.sleep_func,
    )
    try:
        return retry(attempt)
    except RetryFailedError:
        raise ZooKeeperClientTimeout(
            f"no ZooKeeper connection for {timeout_ms} ms (zookeeper.connection.timeout.ms)"
        ) from None


def _guarded(callback: Callable[[], None]) -> None:
    try:
        callback()
    except Exception:
        log.exception("ZooKeeper session callback failed")
