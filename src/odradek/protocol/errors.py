"""Kafka error codes (kio's ``ErrorCode``) and the protocol layer's own exceptions.

Use Kafka's codes everywhere a client can see an error: ``ErrorCode.not_leader_or_follower``
is what librdkafka, kafka-python and aiokafka understand and retry on.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

__all__ = ["DecodeError", "ErrorCode", "error_name", "is_retriable"]


def error_name(code: int) -> str:
    """Kafka's upper-case name of an error code (``"NOT_LEADER_OR_FOLLOWER"``)."""
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"UNKNOWN_ERROR_CODE({code})"


def is_retriable(code: int) -> bool:
    """Whether Kafka marks the error as retriable (unknown codes are not)."""
    try:
        return bool(ErrorCode(code).retriable)
    except ValueError:
        return False


class DecodeError(ValueError):
    """A request or response that cannot be decoded.

    Every attribute that could be read before the failure is set, so the network layer
    can answer with the right error (or log which client sent garbage):

    * ``correlation_id``, ``api_key``, ``api_version``: from the header, or ``None``;
    * ``header``: the parsed ``RequestHeader`` when the whole header was readable;
    * ``error_code``: ``UNSUPPORTED_VERSION`` for an unknown API key or a version outside
      the table, ``INVALID_REQUEST`` for a header or body that does not parse.
    """

    def __init__(
        self,
        message: str,
        *,
        error_code: ErrorCode = ErrorCode.invalid_request,
        correlation_id: int | None = None,
        api_key: int | None = None,
        api_version: int | None = None,
        header: object | None = None,
    ) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.correlation_id = correlation_id
        self.api_key = api_key
        self.api_version = api_version
        self.header = header
