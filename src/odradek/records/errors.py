"""The one exception type that decoding untrusted record bytes may raise."""


class CorruptRecordError(ValueError):
    """Bytes that claim to be a record batch (or records inside one) are not valid.

    Every decoder in :mod:`odradek.records` raises only this type for bad input,
    with a message that says what was wrong and where. It subclasses ValueError so
    callers that already catch ValueError keep working.
    """


class InvalidRecordsError(CorruptRecordError):
    """A batch's header and CRC are sound but its records do not match it.

    Wrong record count, a record that overruns or underfills its length, bytes left
    after the last record, offset deltas out of order: Kafka answers these with
    INVALID_RECORD (its ``InvalidRecordException``), not CORRUPT_MESSAGE.
    """


class UncompressedSizeError(CorruptRecordError):
    """A compressed records section inflates past the allowed size (a decompression bomb).

    Raised as soon as the bound is crossed, having held at most the bound in memory.
    """
