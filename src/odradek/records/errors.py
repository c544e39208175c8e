"""The one exception type that decoding untrusted record bytes may raise."""


class CorruptRecordError(ValueError):
    """Bytes that claim to be a record batch (or records inside one) are not valid.

    Every decoder in :mod:`odradek.records` raises only this type for bad input,
    with a message that says what was wrong and where. It subclasses ValueError so
    callers that already catch ValueError keep working.
    """
