"""The two exception families the client raises.

* :class:`KafkaError` carries a Kafka error code that a broker sent back (or that the client
  applies itself where the Java client does, e.g. ``MESSAGE_TOO_LARGE`` for a record bigger than
  ``max.request.size``). ``name`` is Kafka's upper-case name (``TOPIC_ALREADY_EXISTS``) and
  ``retriable`` is Kafka's own classification, both taken from kio's ``ErrorCode`` table, which is
  generated from Kafka's sources.
* :class:`ClientError` is everything that is not a broker's answer: a refused connection, a
  request that timed out, no reachable broker, a response that cannot be decoded. Messages are one
  line and name the broker and the operation. :class:`ConnectionSetupError` is the one that
  usually means the client's ``security.protocol`` does not match the listener's.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

__all__ = [
    "ClientError",
    "ConnectionSetupError",
    "ErrorCode",
    "KafkaError",
    "KafkaTimeoutError",
    "InvalidProducerEpochError",
    "NoBrokersAvailableError",
    "ProducerFencedError",
    "TransactionAbortableError",
    "TransactionError",
    "TransactionFatalError",
    "TransactionStateError",
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


class ConnectionSetupError(ClientError):
    """The broker hung up before the connection was usable, or the TLS handshake failed.

    "Before usable": before it answered any request but ApiVersions. A PLAINTEXT client on an
    SSL listener is closed at its first request, on a SASL listener at its first request after
    ApiVersions (Kafka's SaslServerAuthenticator does the same); an SSL client on a PLAINTEXT
    listener loses its handshake. A caller can then suggest the security settings; a broker
    that crashes at that very moment looks the same, so it is a likely cause, not a proof.
    """


class NoBrokersAvailableError(ClientError):
    """None of the bootstrap servers or known brokers could be reached (``causes``: why not)."""

    def __init__(self, message: str, causes: tuple[ClientError, ...] = ()) -> None:
        super().__init__(message)
        self.causes = causes


class TransactionError(KafkaError):
    """A transactional producer's error; ``abortable`` says whether the producer can go on.

    As the Java client classifies them: an *abortable* error (:class:`TransactionAbortableError`)
    dooms the current transaction only: ``abort_transaction()`` and begin a new one. A *fatal*
    one (:class:`TransactionFatalError`, e.g. :class:`ProducerFencedError`) leaves the producer
    unusable: every later call raises it again; close the producer (a new instance with the
    same ``transactional_id`` fences this one and takes over).
    """

    abortable = False


class TransactionAbortableError(TransactionError):
    """The transaction cannot commit (a record failed, an offset commit was refused...):
    call ``abort_transaction()``, then begin again."""

    abortable = True


class InvalidProducerEpochError(TransactionAbortableError):
    """A partition leader refused a write with INVALID_PRODUCER_EPOCH. Abortable, as in Java
    (KIP-588): if the producer was really fenced, the abort then raises
    :class:`ProducerFencedError`."""


class TransactionFatalError(TransactionError):
    """The producer cannot continue (authorization, a coordinator that no longer knows the
    transaction, an unsupported broker...)."""


class ProducerFencedError(TransactionFatalError):
    """Another producer with the same ``transactional_id`` (a newer epoch) took over."""


class TransactionStateError(ClientError):
    """A transactional call made in the wrong state (``begin_transaction()`` twice, a send
    outside a transaction, ``commit_transaction()`` without one...). Java's
    IllegalStateException."""


def check_error(code: int, message: str | None = None) -> None:
    """Raise :class:`KafkaError` unless ``code`` is 0 (NONE)."""
    if code:
        raise KafkaError(code, message)
