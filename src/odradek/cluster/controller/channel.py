"""ControllerChannelManager: one connection and one queue per live broker.

As Kafka's ControllerChannelManager / RequestSendThread: requests to a broker go out one
at a time, in order; a request that fails (connection refused, reset, timeout) is sent
again on a new connection after ``controller.socket.retry.backoff`` until it is answered
or the broker is removed (it died; its queue is dropped). The endpoint is the broker's
endpoint of the inter-broker listener from ``/brokers/ids`` (``inter.broker.listener.name``,
or the listener named by ``security.inter.broker.protocol``), or without one its first
PLAINTEXT one; the connection is opened by the broker's connector, which secures it as
that listener demands (TLS, SASL: :mod:`odradek.broker.security.inter_broker`).

The connection is a small one of its own rather than the client's BrokerConnection: like
Kafka's controller it sends the versions its protocol level fixes without an ApiVersions
round trip first, and it needs nothing of the client's pipelining.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Mapping
from typing import Any

from odradek import timeouts
from odradek.cluster.controller.request_batch import OutgoingRequest
from odradek.cluster.peer import AuthenticationError, Connector, PeerLink, open_plaintext
from odradek.cluster.zk.codecs import BrokerEndpoint, BrokerRegistration
from odradek.protocol.codec import decode_response, encode_request

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
RETRY_BACKOFF_S = 0.1  # Kafka's RequestSendThread backs off 100 ms between attempts
MAX_RESPONSE_SIZE = 100 * 1024 * 1024


def inter_broker_endpoint(
    registration: BrokerRegistration, listener_name: str | None
) -> BrokerEndpoint | None:
    for endpoint in registration.endpoints:
        if listener_name is not None and endpoint.listener == listener_name:
            return endpoint
    if listener_name is not None:
        return None
    return next((e for e in registration.endpoints if e.security_protocol == "PLAINTEXT"), None)


async def exchange(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    api_key: int,
    version: int,
    request: Any,
    correlation_id: int,
    client_id: str,
) -> Any:
    """Send one request on an open connection and read its response (no ApiVersions
    first: inter-broker requests use versions fixed by the sender's protocol level)."""
    writer.write(encode_request(version, correlation_id, client_id, request))
    await writer.drain()
    (size,) = _SIZE.unpack(await reader.readexactly(4))
    if not 0 <= size <= MAX_RESPONSE_SIZE:
        raise ValueError(f"response size {size}")
    payload = await reader.readexactly(size)
    answered_id, response = decode_response(api_key, version, payload)
    if answered_id != correlation_id:
        raise ValueError(f"correlation id {answered_id}, expected {correlation_id}")
    return response


class BrokerChannel:
    """The send queue and connection of one broker."""

    def __init__(
        self,
        controller_id: int,
        broker: int,
        endpoint: BrokerEndpoint,
        timeout_s: float,
        connector: Connector = open_plaintext,
    ):
        self.controller_id = controller_id
        self.broker = broker
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        self.connector = connector
        self.queue: asyncio.Queue[OutgoingRequest] = asyncio.Queue()
        self._link: PeerLink | None = None
        self._correlation_id = 0
        self._last_failure = ""  # said once at WARNING, then at DEBUG while it repeats
        self._closed = False
        self._task = asyncio.create_task(self._run(), name=f"controller-channel-{broker}")

    async def close(self) -> None:
        # Cancel until the task is done. Before Python 3.12, asyncio.wait_for swallows a
        # cancellation that arrives just as the exchange completes; the task then went
        # back to waiting on its empty queue for ever, and the controller's resignation
        # (and so the broker's shutdown) hung on it. asyncio.wait also lets a
        # cancellation of the caller through instead of suppressing it.
        self._closed = True
        await timeouts.cancel_until_done(self._task, RETRY_BACKOFF_S)
        self._disconnect()

    async def _run(self) -> None:
        while not self._closed:
            item = await self.queue.get()
            response = None
            while response is None:
                try:
                    response = await timeouts.wait_for(self._exchange(item), self.timeout_s)
                except AuthenticationError as exc:
                    # Retried every backoff: say it once, not ten times a second.
                    if str(exc) != self._last_failure:
                        log.error(
                            "controller %d: cannot reach broker %d on the inter-broker "
                            "listener %s: %s",
                            self.controller_id,
                            self.broker,
                            self.endpoint.listener,
                            exc,
                        )
                    self._last_failure = str(exc)
                    self._disconnect()
                    await asyncio.sleep(RETRY_BACKOFF_S)
                except (OSError, TimeoutError, EOFError, ValueError) as exc:
                    log.info(
                        "controller %d: sending %s to broker %d failed (%s); retrying",
                        self.controller_id,
                        type(item.request).__name__,
                        self.broker,
                        exc or type(exc).__name__,
                    )
                    self._disconnect()
                    await asyncio.sleep(RETRY_BACKOFF_S)
                except Exception as exc:
                    # A bug must not end this task silently: the broker would never hear
                    # from the controller again. Said once, retried like a lost connection.
                    if repr(exc) != self._last_failure:
                        log.exception(
                            "controller %d: sending %s to broker %d failed; retrying",
                            self.controller_id,
                            type(item.request).__name__,
                            self.broker,
                        )
                    self._last_failure = repr(exc)
                    self._disconnect()
                    await asyncio.sleep(RETRY_BACKOFF_S)
                else:
                    self._last_failure = ""
            if item.callback is not None:
                try:
                    item.callback(self.broker, response)
                except Exception:
                    log.exception("controller response callback failed")

    async def _exchange(self, item: OutgoingRequest) -> Any:
        if self._link is not None and self._link.stale:
            self._disconnect()  # its SASL session ends soon: a fresh one
        if self._link is None:
            self._link = await self.connector(
                self.endpoint.host,
                self.endpoint.port,
                self.timeout_s,
                f"controller-{self.controller_id}",
            )
        self._correlation_id = (self._correlation_id + 1) & 0x7FFFFFFF
        return await exchange(
            self._link.reader,
            self._link.writer,
            item.api_key,
            item.version,
            item.request,
            self._correlation_id,
            f"controller-{self.controller_id}",
        )

    def _disconnect(self) -> None:
        if self._link is not None:
            self._link.close()
        self._link = None


class ControllerChannelManager:
    def __init__(
        self, controller_id: int, config: Mapping[str, Any], connector: Connector = open_plaintext
    ) -> None:
        self.controller_id = controller_id
        self.listener_name = config.get("inter.broker.listener.name") or None
        self.connector = connector
        self.timeout_s = int(config.get("controller.socket.timeout.ms", 30000)) / 1000
        self._channels: dict[int, BrokerChannel] = {}

    @property
    def brokers(self) -> set[int]:
        return set(self._channels)

    def add_broker(self, registration: BrokerRegistration) -> None:
        if registration.broker_id in self._channels:
            return
        endpoint = inter_broker_endpoint(registration, self.listener_name)
        if endpoint is None:
            log.error(
                "broker %d has no endpoint for the inter-broker listener %s",
                registration.broker_id,
                self.listener_name or "PLAINTEXT",
            )
            return
        self._channels[registration.broker_id] = BrokerChannel(
            self.controller_id, registration.broker_id, endpoint, self.timeout_s, self.connector
        )

    async def remove_broker(self, broker: int) -> None:
        channel = self._channels.pop(broker, None)
        if channel is not None:
            await channel.close()

    def send(self, request: OutgoingRequest) -> None:
        channel = self._channels.get(request.broker)
        if channel is None:
            log.debug("no channel to broker %d; dropping a request", request.broker)
            return
        channel.queue.put_nowait(request)

    async def close(self) -> None:
        for broker in list(self._channels):
            await self.remove_broker(broker)
