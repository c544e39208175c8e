"""The two exception families the client raises.

* :class:`KafkaError` carries a Kafka error code that a broker sent back (or that the client
  applies itself where the Java client does, e.g. ``MESSAGE_TOO_LARGE`` for a record bigger than
  ``max.request.size``). ``name`` is Kafka's upper-case name (``TOPIC_ALREADY_EXISTS``) and
  ``retriable`` is Kafka's own classification, both taken from kio's ``ErrorCode`` table, which is
  generated from Kafka's sources.
* :class:`ClientError` is everything that is not a broker's answer: a refused connection, a
  request that timed out, no reachable broker, a response that cannot be decoded. Messages are one
  line and name the broker and the operation.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

__all__ = [
    "ClientError",
    "ErrorCode",
    "KafkaError",
    "KafkaTimeoutError",
    "NoBrokersAvailableError",
    "check_error",
]


class KafkaError(Exception):
    """A Kafka error code, with Kafka's name and retriable flag.

    ``KafkaError(ErrorCode.topic_already_exists, "topic 'a' already exists")`` renders as
    ``TOPIC_ALREADY_EXISTS: topic 'a' already exists``. Codes unknown to kio keep their number
    (``UNKNOWN_ERROR_CODE_1234``) and count as not retriable.
    """

    code: int
    name: str
    retriable: bool

    def __init__(self, code: int, message: str | None = None) -> None:
        self.code = int(code)
        try:
            known = ErrorCode(self.code)
        except ValueError:
            self.name = f"UNKNOWN_ERROR_CODE_{self.code}"
            self.retriable = False
        else:
            self.name = known.name.upper()
            self.retriable = bool(known.retriable)
        self.message = message
        # For calls about many items (Admin): every failed item -> its error, this one included.
        self.errors: dict[Any, KafkaError] = {}
        super().__init__(f"{self.name}: {message}" if message else self.name)

    def __reduce__(self) -> tuple[type[KafkaError], tuple[int, str | None]]:
        # Exceptions with a custom __init__ need this to survive pickling (sync wrappers,
        # multiprocessing in Spark executors).
        return (type(self), (self.code, self.message))


class ClientError(Exception):
    """Not a broker's answer: connection refused or lost, timeout, no broker, bad bytes."""


class KafkaTimeoutError(ClientError):
    """A request, a metadata wait or a record's delivery (``delivery.timeout.ms``) timed out."""


class NoBrokersAvailableError(ClientError):
    """None of the bootstrap servers or known brokers could be reached."""


def check_error(code: int, message: str | None = None) -> None:
    """Raise :class:`KafkaError` unless ``code`` is 0 (NONE)."""
    if code:
        raise KafkaError(code, message)
