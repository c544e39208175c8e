"""Producer id allocation for idempotent producers (InitProducerId without a transactional id).

Ids come from blocks, as in Kafka: the broker reserves ``BLOCK_SIZE`` ids at a time by
persisting the end of its current block (file ``producer-id-block`` in the data
directory, written atomically) before handing out any id from it. After a crash the
unused rest of a block is skipped, so an id is never handed out twice.
"""

from __future__ import annotations

from pathlib import Path

from odradek.storage.checkpoint import atomic_write

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
