"""Exceptions raised by :mod:`odradek.storage`.

Every class carries ``error_code``: the Kafka protocol error code a broker answers with
when the exception reaches a request handler, so handlers map exceptions to codes
without a table of their own.

The classes down to UnknownProducerIdError are the storage contract shared by the
storage-core and storage-state helpers; classes may only be appended after them.
"""

from __future__ import annotations


class StorageError(Exception):
    """Base class of every storage failure (KAFKA_STORAGE_ERROR unless a subclass says so)."""

    error_code: int = 56  # KAFKA_STORAGE_ERROR


class OffsetOutOfRangeError(StorageError):
    """A read or truncation asked for an offset outside [log start offset, log end offset]."""

    error_code = 1  # OFFSET_OUT_OF_RANGE


class CorruptLogError(StorageError):
    """Recovery found bad data (torn write, bad CRC) and truncated it. Informational."""

    error_code = 2  # CORRUPT_MESSAGE


class RecordTooLargeError(StorageError):
    """A batch is larger than max.message.bytes."""

    error_code = 10  # MESSAGE_TOO_LARGE


class InvalidRecordError(StorageError):
    """A batch failed validation: bad CRC, magic, offsets vs count, timestamp, etc."""

    error_code = 87  # INVALID_RECORD


class DuplicateSequenceError(StorageError):
    """The batch repeats one already in the log; carries where the original was written.

    A broker answers a duplicate with NONE and the ORIGINAL offsets, as Kafka does, so the
    producer's retry looks exactly like the first success.
    """

    error_code = 46  # DUPLICATE_SEQUENCE_NUMBER

    def __init__(
        self,
        message: str,
        *,
        first_offset: int,
        last_offset: int,
        log_append_time_ms: int = -1,
    ) -> None:
        super().__init__(message)
        self.first_offset = first_offset
        self.last_offset = last_offset
        self.log_append_time_ms = log_append_time_ms


class OutOfOrderSequenceError(StorageError):
    """The batch's first sequence does not follow the producer's last one (a gap)."""

    error_code = 45  # OUT_OF_ORDER_SEQUENCE_NUMBER


class InvalidProducerEpochError(StorageError):
    """The batch's producer epoch is older than the one this partition already saw."""

    error_code = 47  # INVALID_PRODUCER_EPOCH


class UnknownProducerIdError(StorageError):
    """The partition has no state for the producer id and cannot accept the batch."""

    error_code = 59  # UNKNOWN_PRODUCER_ID


# --- appended by storage-state (producer state, transaction index, checkpoints) ---


class InvalidTxnStateError(StorageError):
    """A producer with an open transaction wrote a non-transactional batch."""

    error_code = 48  # INVALID_TXN_STATE


class TransactionCoordinatorFencedError(StorageError):
    """A transaction marker came from a coordinator epoch older than one already seen."""

    error_code = 52  # TRANSACTION_COORDINATOR_FENCED


class CorruptIndexError(StorageError):
    """An index file (e.g. ``.txnindex``) has an impossible size or entries; rebuild it."""


class CorruptSnapshotError(StorageError):
    """A producer-state snapshot failed its version or CRC32C check; it is skipped."""


class CorruptCheckpointError(StorageError):
    """A text checkpoint file (leader epochs, offsets) is malformed."""


# --- appended by storage-core (append validation and replication) ---


class RecordBatchTooLargeError(StorageError):
    """An append is larger than segment.bytes: it could never fit in one segment."""

    error_code = 18  # RECORD_LIST_TOO_LARGE


class CorruptBatchError(InvalidRecordError):
    """A produced batch failed its CRC32C check or cannot be parsed as a v2 batch."""

    error_code = 2  # CORRUPT_MESSAGE


class InvalidTimestampError(InvalidRecordError):
    """A CreateTime timestamp is outside message.timestamp.before/after.max.ms of now."""

    error_code = 32  # INVALID_TIMESTAMP


class UnexpectedAppendOffsetError(StorageError):
    """A follower append starts below the log end offset (its offsets would go backwards).

    Not a wire error: the replica fetcher treats it as a reason to truncate and refetch.
    """

    error_code = -1  # UNKNOWN_SERVER_ERROR

    def __init__(self, message: str, *, first_offset: int, log_end_offset: int) -> None:
        super().__init__(message)
        self.first_offset = first_offset
        self.log_end_offset = log_end_offset


class InconsistentTopicIdError(StorageError):
    """The partition directory belongs to another incarnation of the topic (KIP-516)."""

    error_code = 103  # INCONSISTENT_TOPIC_ID
