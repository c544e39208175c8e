"""The producer's settings, checked once and shared by its parts.

:class:`ProducerConfig` is one mutable object that the producer, its accumulator and its
sender all read, so a setting changed on the producer after it was made
(``producer.linger_ms = 0``) reaches every part, as it did when they were one class.
Names and defaults are the Java producer's (``linger.ms`` -> ``linger_ms``).
"""

from __future__ import annotations

import logging
from typing import Any, Generic, TypeVar, overload

from kio.schema.errors import ErrorCode

from odradek.client.errors import KafkaError
from odradek.records.compression import Compression

__all__ = ["MAX_IN_FLIGHT_PER_PARTITION", "ProducerConfig", "Setting", "parse_acks"]

# The producer's parts log under the producer's name, as they did before it was split, so
# one logger setting still covers all of them.
log = logging.getLogger("odradek.client.producer")

MAX_IN_FLIGHT_PER_PARTITION = 5  # what brokers keep for duplicate detection


def parse_acks(acks: int | str) -> int:
    text = str(acks).strip().lower()
    if text == "all":
        return -1
    try:
        value = int(text)
    except ValueError:
        value = None
    if value not in (-1, 0, 1):
        raise ValueError(f"acks must be 0, 1, -1 or 'all', not {acks!r}")
    return value


class ProducerConfig:
    """Checked producer settings (see :class:`odradek.client.producer.Producer`)."""

    def __init__(
        self,
        *,
        acks: int | str,
        compression_type: str,
        linger_ms: int,
        batch_size: int,
        max_request_size: int,
        enable_idempotence: bool,
        retries: int,
        delivery_timeout_ms: int,
        request_timeout_ms: int,
        retry_backoff_ms: int,
        max_in_flight_requests_per_connection: int,
        buffer_memory: int,
        max_block_ms: int,
        transactional_id: str | None,
        transaction_timeout_ms: int,
    ) -> None:
        self.acks = parse_acks(acks)
        if transactional_id is not None:
            # Java: "Cannot set a transactional.id without also enabling idempotence."
            if not enable_idempotence or self.acks != -1:
                raise ValueError("a transactional producer needs enable_idempotence and acks='all'")
            if transaction_timeout_ms <= 0:
                raise ValueError("transaction_timeout_ms must be > 0")
        self.compression = Compression.from_name(compression_type)
        if linger_ms < 0 or batch_size < 0 or max_request_size <= 0 or retries < 0:
            raise ValueError("linger_ms, batch_size and retries must be >= 0, max_request_size > 0")
        if delivery_timeout_ms < linger_ms + request_timeout_ms:
            raise ValueError(
                "delivery_timeout_ms should be at least linger_ms + request_timeout_ms "
                f"({linger_ms} + {request_timeout_ms})"
            )
        if max_in_flight_requests_per_connection < 1:
            raise ValueError("max_in_flight_requests_per_connection must be >= 1")
        self.idempotent = enable_idempotence and self.acks == -1
        if enable_idempotence and not self.idempotent:
            log.info("idempotence disabled: it needs acks='all' (acks=%s)", acks)
        if self.idempotent and max_in_flight_requests_per_connection > MAX_IN_FLIGHT_PER_PARTITION:
            raise ValueError("an idempotent producer allows at most 5 requests in flight")
        self.linger_ms = linger_ms
        self.batch_size = batch_size
        self.max_request_size = max_request_size
        self.retries = retries
        self.delivery_timeout_ms = delivery_timeout_ms
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.max_in_flight = max_in_flight_requests_per_connection
        self.buffer_memory = buffer_memory
        self.max_block_ms = max_block_ms
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms

    def check_record_size(self, size: int) -> None:
        """Raise MESSAGE_TOO_LARGE for a batch of ``size`` bytes that could never be sent."""
        if size <= self.max_request_size and size <= self.buffer_memory:
            return
        if size > self.max_request_size:
            raise KafkaError(
                ErrorCode.message_too_large,
                f"the record is {size} bytes, more than max_request_size={self.max_request_size}",
            )
        if size > self.buffer_memory:
            raise KafkaError(
                ErrorCode.message_too_large,
                f"the record is {size} bytes, more than buffer_memory={self.buffer_memory}",
            )


T = TypeVar("T")


class Setting(Generic[T]):
    """A producer attribute kept in its :class:`ProducerConfig` (``owner._config``): reading
    or setting ``producer.linger_ms`` reads or sets the value every part uses."""

    __slots__ = ("name",)

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> Setting[T]: ...
    @overload
    def __get__(self, obj: object, owner: type | None = None) -> T: ...
    def __get__(self, obj: Any, owner: type | None = None) -> T | Setting[T]:
        if obj is None:
            return self
        value: T = getattr(obj._config, self.name)
        return value

    def __set__(self, obj: Any, value: T) -> None:
        setattr(obj._config, self.name, value)
