"""Producer id allocation (InitProducerId, idempotent or transactional).

Ids come from blocks, as in Kafka. The embedded single broker (:class:`ProducerIdManager`)
reserves ``BLOCK_SIZE`` ids at a time by persisting the end of its current block (file
``producer-id-block`` in the data directory, written atomically) before handing out any
id from it. After a crash the unused rest of a block is skipped, so an id is never handed
out twice.

In a cluster every broker hands out ids, so blocks are claimed in ZooKeeper
(:class:`ZkProducerIdManager`, Kafka's ZkProducerIdManager): read
``/latest_producer_id_block``, write the next block with a compare-and-set on the znode
version, and read again if another broker was faster. Two brokers can never claim the
same block, so they never hand out the same id.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Protocol

from odradek.cluster.zk.client import ZkClient
from odradek.cluster.zk.codecs import ProducerIdBlock
from odradek.cluster.zk.errors import StaleVersion, ZNodeDecodeError, ZooKeeperError
from odradek.storage.checkpoint import atomic_write

log = logging.getLogger(__name__)

BLOCK_SIZE = 1000
FILE_NAME = "producer-id-block"
MAX_EPOCH = 32767


class ProducerIdManager:
    def __init__(self, data_dir: Path) -> None:
        self._path = data_dir / FILE_NAME
        self._next = 0
        self._block_end = 0
        if self._path.exists():
            try:
                self._next = self._block_end = int(self._path.read_text().split()[0])
            except (ValueError, IndexError, OSError):
                # An unreadable block file must not let ids repeat: start far past anything used.
                self._next = self._block_end = 1 << 40

    def next_id(self) -> int:
        if self._next >= self._block_end:
            self._block_end = self._next + BLOCK_SIZE
            atomic_write(self._path, f"{self._block_end}\n".encode())
        producer_id = self._next
        self._next += 1
        return producer_id

    def init_producer(self, producer_id: int, producer_epoch: int) -> tuple[int, int]:
        """(id, epoch) for an InitProducerId: a new id, or the same id with a bumped epoch.

        A producer that already has an id asks for an epoch bump after an error (KIP-360);
        when the epoch would overflow it gets a fresh id instead.
        """
        if producer_id < 0 or producer_epoch < 0 or producer_epoch >= MAX_EPOCH:
            return self.next_id(), 0
        return producer_id, producer_epoch + 1

    async def generate(self) -> int:
        return self.next_id()


class ProducerIdsUnavailable(Exception):
    """No block of ids could be claimed now (ZooKeeper unreachable or too contended):
    the client should retry (Kafka answers COORDINATOR_LOAD_IN_PROGRESS)."""


class ProducerIds(Protocol):
    async def generate(self) -> int: ...


async def init_producer(ids: ProducerIds, producer_id: int, producer_epoch: int) -> tuple[int, int]:
    """(id, epoch) for an idempotent InitProducerId: a new id, or the same id with a bumped
    epoch (KIP-360); a fresh id when the epoch would overflow."""
    if producer_id < 0 or producer_epoch < 0 or producer_epoch >= MAX_EPOCH:
        return await ids.generate(), 0
    return producer_id, producer_epoch + 1


_CLAIM_ATTEMPTS = 50


class ZkProducerIdManager:
    """Blocks of ids claimed in ZooKeeper (module docstring). ZooKeeper calls block, so
    they run in a thread; one claim at a time per broker."""

    def __init__(self, zk: ZkClient, broker_id: int, block_size: int = BLOCK_SIZE) -> None:
        self._zk = zk
        self._broker_id = broker_id
        self._block_size = block_size
        self._next = 0
        self._block_end = 0  # exclusive: nothing claimed yet
        self._lock = asyncio.Lock()

    async def generate(self) -> int:
        if self._next >= self._block_end:
            async with self._lock:
                if self._next >= self._block_end:
                    block = await asyncio.to_thread(self.claim_block)
                    self._next, self._block_end = block.first, block.last + 1
        producer_id = self._next
        self._next += 1
        return producer_id

    def claim_block(self) -> ProducerIdBlock:
        """Claim the block after the latest one (blocking)."""
        for _attempt in range(_CLAIM_ATTEMPTS):
            try:
                latest, version = self._zk.get_producer_id_block()
                first = 0 if latest is None else latest.last + 1
                if first + self._block_size - 1 >= 2**63:
                    raise ProducerIdsUnavailable("producer ids are exhausted")
                block = ProducerIdBlock(self._broker_id, first, first + self._block_size - 1)
                self._zk.set_producer_id_block(block, version)
            except StaleVersion:
                continue  # another broker claimed one since we read: read again
            except (ZooKeeperError, ZNodeDecodeError) as exc:
                raise ProducerIdsUnavailable(f"claiming producer ids failed: {exc}") from None
            log.info("claimed producer ids %d..%d", block.first, block.last)
            return block
        raise ProducerIdsUnavailable(
            f"no producer id block claimed after {_CLAIM_ATTEMPTS} contended attempts"
        )
