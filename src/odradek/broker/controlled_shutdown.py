"""A broker's side of controlled shutdown (Kafka's KafkaServer.controlledShutdown).

Before a broker in a cluster stops, it asks the active controller to move leadership of
its partitions to other in-sync replicas (ControlledShutdown, API key 7), so clients see
only retriable NOT_LEADER_OR_FOLLOWER errors and refresh their metadata instead of timing
out against a dead leader. As in Kafka: the controller is the one the metadata cache
names (the last UpdateMetadata), reached on its inter-broker listener, so a broker cut
off from ZooKeeper still tries; an attempt that fails or leaves partitions it could not
move is tried again, at most ``controlled.shutdown.max.retries`` attempts in all (Kafka's
count: 3 attempts by default, 0 skips it), ``controlled.shutdown.retry.backoff.ms``
apart; each attempt connects within ``CONNECT_TIMEOUT_S`` and waits
``controller.socket.timeout.ms`` for the answer, so :func:`bound_s` is the longest it
takes. After that the broker stops anyway (the controller's broker-failure handling moves
what is left when its registration disappears).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from kio.static.primitive import i32, i64

from odradek import timeouts
from odradek.broker.metadata_cache import MetadataCache
from odradek.cluster.controller.channel import exchange
from odradek.cluster.peer import Connector
from odradek.protocol import interbroker

log = logging.getLogger(__name__)

VERSION = 3  # Kafka 3.x brokers send v3 (with the broker epoch)
CONNECT_TIMEOUT_S = 5.0


async def controlled_shutdown(
    cache: MetadataCache,
    address_of: Callable[[int], tuple[str, int] | None],
    connector: Connector,
    broker_id: int,
    broker_epoch: int,
    *,
    max_retries: int,
    backoff_s: float,
    request_timeout_s: float,
) -> bool:
    """True once the controller answered NONE with no partitions left to move."""
    for attempt in range(max_retries):
        if attempt:
            await asyncio.sleep(backoff_s)
        try:
            response = await _ask_controller(
                cache, address_of, connector, broker_id, broker_epoch, request_timeout_s
            )
        except (OSError, TimeoutError, EOFError, ValueError) as exc:
            log.warning("controlled shutdown attempt %d failed: %s", attempt + 1, exc)
            continue
        if response is None:
            log.warning("controlled shutdown attempt %d: no controller yet", attempt + 1)
            continue
        remaining = [f"{p.topic_name}-{p.partition_index}" for p in response.remaining_partitions]
        if int(response.error_code) == 0 and not remaining:
            log.info("controlled shutdown succeeded")
            return True
        log.warning(
            "controlled shutdown attempt %d: error code %d, partitions still led here: %s",
            attempt + 1,
            int(response.error_code),
            ", ".join(remaining) or "none",
        )
    log.warning("controlled shutdown did not complete; stopping anyway")
    return False


def bound_s(max_retries: int, backoff_s: float, request_timeout_s: float) -> float:
    """The longest :func:`controlled_shutdown` takes: every attempt timing out."""
    attempts = max(0, max_retries)
    return attempts * (CONNECT_TIMEOUT_S + request_timeout_s) + max(0, attempts - 1) * backoff_s


async def _ask_controller(
    cache: MetadataCache,
    address_of: Callable[[int], tuple[str, int] | None],
    connector: Connector,
    broker_id: int,
    broker_epoch: int,
    timeout_s: float,
) -> Any:
    address = address_of(cache.controller_id)  # its inter-broker listener
    if address is None:
        return None
    link = await connector(*address, CONNECT_TIMEOUT_S, f"broker-{broker_id}")
    reader, writer = link.reader, link.writer
    try:
        request = interbroker.request_class(interbroker.CONTROLLED_SHUTDOWN, VERSION)(
            broker_id=i32(broker_id), broker_epoch=i64(broker_epoch)
        )
        return await timeouts.wait_for(
            exchange(
                reader,
                writer,
                interbroker.CONTROLLED_SHUTDOWN,
                VERSION,
                request,
                1,
                f"broker-{broker_id}",
            ),
            timeout_s,
        )
    finally:
        writer.close()
