"""Blocking wrappers: SyncProducer, SyncConsumer, SyncAdmin.

Each wrapper owns a private asyncio event loop running in a daemon thread and the async object
living on it; every method hands a coroutine to that loop and blocks until it finishes, so the
wrappers can be used from plain scripts, the CLI, Spark executors or any thread. Exceptions
are the async API's own (KafkaError, ClientError, ValueError...), re-raised in the caller's
thread. ``SyncProducer.send`` returns a ``concurrent.futures.Future`` that resolves when the
record is acknowledged, like the Java producer's ``send``.

Calling a wrapper from its own loop thread (e.g. from inside a future's callback) would
deadlock; it raises RuntimeError instead.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, TypeVar

from odradek.client.admin import Admin, ConfigEntry, ConfigResource, NewTopic
from odradek.client.fetcher import Consumer, ConsumerRecord, FetchedPartition
from odradek.client.log_dirs import LogDirDescription
from odradek.client.metadata import ClusterMetadata
from odradek.client.producer import Producer, RecordMetadata
from odradek.records.batch import Record

if TYPE_CHECKING:  # group_admin imports this module
    from odradek.client.assignors import GroupMetadata
    from odradek.client.group_admin import OffsetAndMetadata

__all__ = ["SyncAdmin", "SyncConsumer", "SyncProducer"]

T = TypeVar("T")
TopicPartition = tuple[str, int]


class _LoopThread:
    """An event loop running forever in a daemon thread, until :meth:`stop`."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            # Cancel whatever is left (nothing, after a clean close) before closing the loop.
            pending = asyncio.all_tasks(self.loop)
            for task in pending:
                task.cancel()
            if pending:
                self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self.loop.close()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("a sync client called from its own event loop thread would deadlock")
        if not self._thread.is_alive():
            coro.close()
            raise RuntimeError("the client's event loop has stopped (closed?)")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        async def invoke() -> T:
            return fn(*args)

        return self.run(invoke())

    def stop(self) -> None:
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            if threading.current_thread() is not self._thread:
                self._thread.join()


class _SyncBase:
    _loop: _LoopThread
    _closed: bool

    def _start(self, name: str, factory: Callable[[], Any]) -> Any:
        self._loop = _LoopThread(name)
        self._closed = False

        async def create() -> Any:
            obj = factory()
            try:
                await obj.start()
            except BaseException:
                await obj.close()
                raise
            return obj

        try:
            return self._loop.run(create())
        except BaseException:
            self._loop.stop()
            raise

    def _close(self, obj: Any) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._loop.run(obj.close())
        finally:
            self._loop.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError


class SyncProducer(_SyncBase):
    """Blocking :class:`Producer`; same keyword arguments."""

    def __init__(self, bootstrap_servers: str | Sequence[str], **config: Any) -> None:
        self._producer: Producer = self._start(
            "odradek-sync-producer", lambda: Producer(bootstrap_servers, **config)
        )

    @property
    def producer(self) -> Producer:
        """The async producer (only to be used from its loop)."""
        return self._producer

    def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        *,
        partition: int | None = None,
        headers: Sequence[tuple[str, bytes | None]] = (),
        timestamp_ms: int | None = None,
    ) -> concurrent.futures.Future[RecordMetadata]:
        """Queue a record (blocking only for buffer space/metadata); the future resolves on ack."""
        result: concurrent.futures.Future[RecordMetadata] = concurrent.futures.Future()

        async def queue() -> None:
            ack = await self._producer.send(
                topic, value, key, partition=partition, headers=headers, timestamp_ms=timestamp_ms
            )

            def copy(done: asyncio.Future[RecordMetadata]) -> None:
                if done.cancelled():
                    result.cancel()
                elif done.exception() is not None:
                    result.set_exception(done.exception())  # type: ignore[arg-type]
                else:
                    result.set_result(done.result())

            ack.add_done_callback(copy)

        self._loop.run(queue())
        return result

    def send_and_wait(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        *,
        partition: int | None = None,
        headers: Sequence[tuple[str, bytes | None]] = (),
        timestamp_ms: int | None = None,
    ) -> RecordMetadata:
        return self._loop.run(
            self._producer.send_and_wait(
                topic, value, key, partition=partition, headers=headers, timestamp_ms=timestamp_ms
            )
        )

    def send_batch(self, topic: str, partition: int, records: Sequence[Record]) -> RecordMetadata:
        return self._loop.run(self._producer.send_batch(topic, partition, records))

    def flush(self) -> None:
        self._loop.run(self._producer.flush())

    def init_transactions(self) -> None:
        self._loop.run(self._producer.init_transactions())

    def begin_transaction(self) -> None:
        self._loop.call(self._producer.begin_transaction)

    def send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition, int | OffsetAndMetadata],
        group_metadata: GroupMetadata | str,
    ) -> None:
        self._loop.run(self._producer.send_offsets_to_transaction(offsets, group_metadata))

    def commit_transaction(self) -> None:
        self._loop.run(self._producer.commit_transaction())

    def abort_transaction(self) -> None:
        self._loop.run(self._producer.abort_transaction())

    def close(self) -> None:
        self._close(self._producer)


class SyncConsumer(_SyncBase):
    """Blocking :class:`Consumer`; same keyword arguments."""

    def __init__(self, bootstrap_servers: str | Sequence[str], **config: Any) -> None:
        self._consumer: Consumer = self._start(
            "odradek-sync-consumer", lambda: Consumer(bootstrap_servers, **config)
        )

    @property
    def consumer(self) -> Consumer:
        return self._consumer

    def assign(self, partitions: Sequence[tuple[str, int]]) -> None:
        self._loop.call(self._consumer.assign, partitions)

    def assignment(self) -> set[TopicPartition]:
        return self._loop.call(self._consumer.assignment)

    def seek(self, topic: str, partition: int, offset: int) -> None:
        self._loop.call(self._consumer.seek, topic, partition, offset)

    def seek_to_beginning(self, *partitions: tuple[str, int]) -> None:
        self._loop.run(self._consumer.seek_to_beginning(*partitions))

    def seek_to_end(self, *partitions: tuple[str, int]) -> None:
        self._loop.run(self._consumer.seek_to_end(*partitions))

    def position(self, topic: str, partition: int) -> int:
        return self._loop.call(self._consumer.position, topic, partition)

    def highwater(self, topic: str, partition: int) -> int | None:
        return self._loop.call(self._consumer.highwater, topic, partition)

    def pause(self, *partitions: tuple[str, int]) -> None:
        self._loop.call(self._consumer.pause, *partitions)

    def resume(self, *partitions: tuple[str, int]) -> None:
        self._loop.call(self._consumer.resume, *partitions)

    def paused(self) -> set[TopicPartition]:
        return self._loop.call(self._consumer.paused)

    def poll(self, timeout_ms: int = 1000, max_records: int | None = None) -> list[ConsumerRecord]:
        return self._loop.run(self._consumer.poll(timeout_ms, max_records))

    def fetch_raw(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_bytes: int,
        *,
        max_wait_ms: int = 0,
        isolation_level: str = "read_uncommitted",
    ) -> FetchedPartition:
        return self._loop.run(
            self._consumer.fetch_raw(
                topic,
                partition,
                offset,
                max_bytes,
                max_wait_ms=max_wait_ms,
                isolation_level=isolation_level,
            )
        )

    def list_offsets(
        self, specs: dict[TopicPartition, int], *, isolation_level: int | None = None
    ) -> dict[TopicPartition, tuple[int, int]]:
        return self._loop.run(self._consumer.list_offsets(specs, isolation_level=isolation_level))

    def close(self) -> None:
        self._close(self._consumer)


class SyncAdmin(_SyncBase):
    """Blocking :class:`Admin`; same keyword arguments."""

    def __init__(self, bootstrap_servers: str | Sequence[str], **config: Any) -> None:
        self._admin: Admin = self._start(
            "odradek-sync-admin", lambda: Admin(bootstrap_servers, **config)
        )

    @property
    def admin(self) -> Admin:
        return self._admin

    def create_topics(
        self, topics: Sequence[NewTopic], *, validate_only: bool = False, timeout_ms: int = 30000
    ) -> None:
        self._loop.run(
            self._admin.create_topics(topics, validate_only=validate_only, timeout_ms=timeout_ms)
        )

    def delete_topics(self, names: Sequence[str], *, timeout_ms: int = 30000) -> None:
        self._loop.run(self._admin.delete_topics(names, timeout_ms=timeout_ms))

    def create_partitions(
        self, new_totals: Mapping[str, int], *, validate_only: bool = False, timeout_ms: int = 30000
    ) -> None:
        self._loop.run(
            self._admin.create_partitions(
                new_totals, validate_only=validate_only, timeout_ms=timeout_ms
            )
        )

    def list_topics(self, *, include_internal: bool = True) -> ClusterMetadata:
        return self._loop.run(self._admin.list_topics(include_internal=include_internal))

    def describe_cluster(self) -> ClusterMetadata:
        return self._loop.run(self._admin.describe_cluster())

    def describe_configs(
        self, resources: Sequence[ConfigResource], *, keys: Sequence[str] | None = None
    ) -> dict[ConfigResource, dict[str, ConfigEntry]]:
        return self._loop.run(self._admin.describe_configs(resources, keys=keys))

    def alter_configs(
        self, configs: Mapping[ConfigResource, Mapping[str, str]], *, validate_only: bool = False
    ) -> None:
        self._loop.run(self._admin.alter_configs(configs, validate_only=validate_only))

    def incremental_alter_configs(
        self,
        changes: Mapping[ConfigResource, Sequence[tuple[str, str, str | None]]],
        *,
        validate_only: bool = False,
    ) -> None:
        self._loop.run(self._admin.incremental_alter_configs(changes, validate_only=validate_only))

    def list_offsets(
        self,
        specs: Mapping[TopicPartition, str | int],
        *,
        isolation_level: str = "read_uncommitted",
    ) -> dict[TopicPartition, tuple[int, int]]:
        return self._loop.run(self._admin.list_offsets(specs, isolation_level=isolation_level))

    def delete_records(
        self, before: Mapping[TopicPartition, int], *, timeout_ms: int = 30000
    ) -> dict[TopicPartition, int]:
        return self._loop.run(self._admin.delete_records(before, timeout_ms=timeout_ms))

    def describe_log_dirs(
        self,
        brokers: Sequence[int] | None = None,
        partitions: Sequence[TopicPartition] | None = None,
    ) -> dict[int, dict[str, LogDirDescription]]:
        return self._loop.run(self._admin.describe_log_dirs(brokers, partitions))

    def close(self) -> None:
        self._close(self._admin)
