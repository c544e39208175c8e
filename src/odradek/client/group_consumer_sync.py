"""SyncGroupConsumer: the blocking :class:`~odradek.client.group_consumer.GroupConsumer`.

Same pattern as :mod:`odradek.client.sync`: the async consumer lives on a private event loop
in a daemon thread, so heartbeats go on in the background while the caller's thread works
between polls (``max_poll_interval_ms`` still bounds that time). Rebalance listener methods
run on that loop thread during ``poll``/``close``: they may use the async consumer they are
given (``sync_consumer.consumer``) but must not call the blocking wrapper itself.
"""

from __future__ import annotations

import concurrent.futures
import re
from collections.abc import Mapping, Sequence
from typing import Any

from odradek.client.assignors import GroupMetadata
from odradek.client.group_admin import OffsetAndMetadata
from odradek.client.group_consumer import GroupConsumer, RebalanceListener
from odradek.client.sync import SyncConsumer

__all__ = ["SyncGroupConsumer"]

TopicPartition = tuple[str, int]


class SyncGroupConsumer(SyncConsumer):
    """Blocking :class:`GroupConsumer`; same keyword arguments. Use ``with``."""

    def __init__(self, bootstrap_servers: str | Sequence[str], **config: Any) -> None:
        self._group_consumer: GroupConsumer = self._start(
            "odradek-sync-group-consumer", lambda: GroupConsumer(bootstrap_servers, **config)
        )
        self._consumer = self._group_consumer

    @property
    def consumer(self) -> GroupConsumer:
        return self._group_consumer

    def subscribe(
        self,
        topics: Sequence[str] | None = None,
        *,
        pattern: str | re.Pattern[str] | None = None,
        listener: RebalanceListener | None = None,
    ) -> None:
        self._loop.call(
            lambda: self._group_consumer.subscribe(topics, pattern=pattern, listener=listener)
        )

    def subscription(self) -> set[str]:
        return self._loop.call(self._group_consumer.subscription)

    def unsubscribe(self) -> None:
        self._loop.run(self._group_consumer.unsubscribe())

    def group_metadata(self) -> GroupMetadata | None:
        return self._loop.call(self._group_consumer.group_metadata)

    def commit(
        self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None = None
    ) -> None:
        self._loop.run(self._group_consumer.commit(offsets))

    def commit_async(
        self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None = None
    ) -> concurrent.futures.Future[None]:
        """Start a commit; the returned future resolves (or fails) when it is done."""

        async def start() -> concurrent.futures.Future[None]:
            done: concurrent.futures.Future[None] = concurrent.futures.Future()

            def finish(_: Any, error: Exception | None) -> None:
                if error is None:
                    done.set_result(None)
                else:
                    done.set_exception(error)

            self._group_consumer.commit_async(offsets, finish)
            return done

        return self._loop.run(start())

    def committed(
        self, partitions: Sequence[tuple[str, int]]
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        return self._loop.run(self._group_consumer.committed(partitions))

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, tuple[int, int] | None]:
        return self._loop.run(self._group_consumer.offsets_for_times(timestamps))
