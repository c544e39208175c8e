"""One TCP connection to one broker: pipelined requests matched by correlation id.

Life of a connection:

1. :meth:`BrokerConnection.connect` opens the socket (TLS when the client's security says
   so) and negotiates versions with ApiVersions (v3 first; a broker that does not know v3
   answers UNSUPPORTED_VERSION with a v0 body listing its range and the connection retries
   with the broker's highest version), then authenticates with SASL when configured
   (security.py).
2. :meth:`BrokerConnection.send` writes a request frame and, unless the request expects no
   response (Produce with acks=0), waits for the response whose correlation id matches. Any
   number of requests may be in flight; a single reader task decodes responses as they arrive
   and resolves the waiting futures.
3. A request that is not answered within its timeout closes the connection, as the Java client
   does: the broker may be stuck, and every other request in flight on it fails with
   :class:`ClientError` so callers can retry elsewhere.

Frames larger than ``max_response_size`` or with negative sizes are protocol errors and close the
connection. Nothing here retries; retry policy belongs to the producer, consumer and admin.

A broker that hangs up before the connection is usable (before it answered any request but
ApiVersions), answers with TLS records, or fails the TLS handshake raises
:class:`~odradek.client.errors.ConnectionSetupError` instead of a bare ClientError: the usual
cause is a ``security.protocol`` that does not match the listener's, which the CLI says.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import logging
import ssl
import struct
from typing import Any

from kio.schema.errors import ErrorCode

from odradek import timeouts
from odradek.client.entities import api_name, build_request
from odradek.client.errors import (
    ClientError,
    ConnectionSetupError,
    KafkaError,
    KafkaTimeoutError,
)
from odradek.client.security import ClientSecurity
from odradek.client.versions import API_VERSIONS, FIRST_API_VERSIONS_VERSION, pick_version
from odradek.protocol.codec import DecodeError, decode_response, encode_request

log = logging.getLogger(__name__)

_INT32 = struct.Struct(">i")
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
DEFAULT_MAX_RESPONSE_SIZE = 1 << 30  # a Fetch may legitimately carry fetch.max.bytes and more
# A TLS record starts with its content type (0x15 alert, 0x16 handshake) and major version 3.
# Read as a Kafka size prefix that is a frame of 350+ MB, which no ApiVersions answer is.
_TLS_RECORD_TYPES = (0x15, 0x16)
_HUNG_UP = "closed the connection"

try:
    _SOFTWARE_VERSION = importlib.metadata.version("odradek")
except importlib.metadata.PackageNotFoundError:  # running from a source tree
    _SOFTWARE_VERSION = "0.0.0"


class _Pending:
    __slots__ = ("api_key", "api_version", "future")

    def __init__(self, api_key: int, api_version: int, future: asyncio.Future[Any]) -> None:
        self.api_key = api_key
        self.api_version = api_version
        self.future = future


class BrokerConnection:
    """A connection to ``host:port`` (broker ``node_id``; negative ids are bootstrap servers)."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        node_id: int = -1,
        client_id: str | None = "odradek",
        request_timeout_ms: int = 30000,
        max_response_size: int = DEFAULT_MAX_RESPONSE_SIZE,
        security: ClientSecurity | None = None,
    ) -> None:
        self.security = security
        self.host = host
        self.port = port
        self.node_id = node_id
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.max_response_size = max_response_size
        self.api_versions: dict[int, tuple[int, int]] = {}
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._read_task: asyncio.Task[None] | None = None
        self._pending: dict[int, _Pending] = {}
        self._next_correlation_id = 0
        self._closed = False
        self._close_reason: str | None = None
        # Set by the first answer to anything but ApiVersions: from then on a hang-up is a
        # lost connection, not a sign of the wrong security protocol.
        self._in_use = False
        self._setup_failed = False

    def __repr__(self) -> str:
        return f"<BrokerConnection node {self.node_id} {self.host}:{self.port}>"

    @property
    def label(self) -> str:
        if self.node_id < 0:
            return f"bootstrap server {self.host}:{self.port}"
        return f"node {self.node_id} ({self.host}:{self.port})"

    @property
    def connected(self) -> bool:
        return self._writer is not None and not self._closed

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    # -- setup ---------------------------------------------------------------------------------

    async def connect(self, timeout_ms: int | None = None) -> None:
        """Open the socket and negotiate API versions. Raises ClientError if that fails."""
        if self._closed:
            raise ClientError(f"connection to {self.label} is closed")
        timeout = (timeout_ms if timeout_ms is not None else self.request_timeout_ms) / 1000
        try:
            tls = self.security.ssl_context if self.security is not None else None
            self._reader, self._writer = await timeouts.wait_for(
                asyncio.open_connection(
                    self.host, self.port, ssl=tls, server_hostname=self.host if tls else None
                ),
                timeout,
            )
        except TimeoutError:
            self._closed = True
            raise KafkaTimeoutError(
                f"connecting to {self.label} timed out after {timeout * 1000:.0f} ms"
            ) from None
        except OSError as exc:
            self._closed = True
            reason = exc.strerror or str(exc)
            if tls is not None and _handshake_failure(exc):
                # A PLAINTEXT listener drops a ClientHello it reads as a huge frame: the
                # reset comes without any text.
                raise ConnectionSetupError(
                    f"TLS handshake with {self.label} failed: "
                    f"{reason or 'the broker closed the connection'}"
                ) from None
            raise ClientError(f"cannot connect to {self.label}: {reason}") from None
        self._read_task = asyncio.create_task(
            self._read_loop(), name=f"odradek-client-read-{self.host}:{self.port}"
        )
        try:
            await self._negotiate_versions(timeout_ms)
        except BaseException:
            await self.close("version negotiation failed")
            raise
        if self.security is not None and self.security.uses_sasl:
            try:
                await self._authenticate(self.security, timeout_ms)
            except BaseException:
                await self.close("SASL authentication failed")
                raise

    async def _authenticate(self, security: ClientSecurity, timeout_ms: int | None) -> None:
        """SaslHandshake v1 then SaslAuthenticate (KIP-152), as Kafka's clients do."""
        handshake = await self.send(
            build_request(SASL_HANDSHAKE, 1, mechanism=security.sasl_mechanism),
            timeout_ms=timeout_ms,
        )
        if handshake.error_code:
            enabled = ", ".join(str(m) for m in handshake.mechanisms)
            raise KafkaError(
                handshake.error_code,
                f"{self.label} does not enable SASL mechanism {security.sasl_mechanism}"
                f" (enabled: {enabled or 'none'})",
            )
        version = min(self.api_versions.get(SASL_AUTHENTICATE, (0, 2))[1], 2)
        exchange = security.exchange()
        challenge = b""
        while not exchange.done:
            try:
                token = exchange.respond(challenge)
            except (ValueError, KeyError, UnicodeDecodeError) as exc:
                raise KafkaError(
                    ErrorCode.sasl_authentication_failed, f"{self.label}: {exc}"
                ) from None
            if token is None:
                break
            answer = await self.send(
                build_request(SASL_AUTHENTICATE, version, auth_bytes=token),
                timeout_ms=timeout_ms,
            )
            if answer.error_code:
                raise KafkaError(
                    answer.error_code,
                    f"{self.label}: {answer.error_message or 'authentication failed'}",
                )
            challenge = bytes(answer.auth_bytes)
        if not exchange.done:  # SCRAM: the server-final message still to check
            try:
                exchange.respond(challenge)
            except (ValueError, KeyError, UnicodeDecodeError) as exc:
                raise KafkaError(
                    ErrorCode.sasl_authentication_failed, f"{self.label}: {exc}"
                ) from None

    async def _negotiate_versions(self, timeout_ms: int | None) -> None:
        version = FIRST_API_VERSIONS_VERSION
        for _ in range(3):
            request = build_request(
                API_VERSIONS,
                version,
                client_software_name="odradek",
                client_software_version=_SOFTWARE_VERSION,
            )
            response = await self.send(request, timeout_ms=timeout_ms)
            if response.error_code == ErrorCode.unsupported_version:
                # The v0 error body lists the broker's ApiVersions range: retry with its max.
                theirs = {k.api_key: k.max_version for k in response.api_keys}
                broker_max = int(theirs.get(API_VERSIONS, 0))
                if broker_max >= version:
                    broker_max = version - 1
                if broker_max < 0:
                    break
                version = broker_max
                continue
            if response.error_code:
                raise KafkaError(response.error_code, f"ApiVersions from {self.label}")
            self.api_versions = {
                int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys
            }
            return
        raise KafkaError(
            ErrorCode.unsupported_version, f"{self.label} accepts no ApiVersions version we know"
        )

    def version_for(self, api_key: int) -> int:
        """The version to use for ``api_key`` on this connection (after :meth:`connect`)."""
        return pick_version(api_key, self.api_versions)

    def supports(self, api_key: int) -> bool:
        try:
            self.version_for(api_key)
        except KafkaError:
            return False
        return True

    # -- requests ------------------------------------------------------------------------------

    async def send(
        self, request: Any, *, timeout_ms: int | None = None, expect_response: bool = True
    ) -> Any:
        """Send a kio request entity; return the decoded response (None if none is expected)."""
        if self._closed or self._writer is None:
            reason = f": {self._close_reason}" if self._close_reason else ""
            error = ConnectionSetupError if self._setup_failed else ClientError
            raise error(f"connection to {self.label} is closed{reason}")
        cls = type(request)
        api_key = int(cls.__api_key__)
        api_version = int(cls.__version__)
        if self.api_versions and api_key != API_VERSIONS:
            supported = self.api_versions.get(api_key)
            if supported is None or not supported[0] <= api_version <= supported[1]:
                raise KafkaError(
                    ErrorCode.unsupported_version,
                    f"{self.label} does not support {api_name(api_key)} v{api_version}",
                )
        correlation_id = self._next_correlation_id
        self._next_correlation_id = (correlation_id + 1) & 0x7FFFFFFF
        frame = encode_request(api_version, correlation_id, self.client_id, request)
        if not expect_response:
            self._writer.write(frame)
            await self._drain()
            return None
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._pending[correlation_id] = _Pending(api_key, api_version, future)
        self._writer.write(frame)
        timeout = (timeout_ms if timeout_ms is not None else self.request_timeout_ms) / 1000
        try:
            await self._drain()
            # Not asyncio.wait_for: on Python 3.11, when the caller is cancelled in the loop
            # iteration the response arrives, wait_for returns the response and swallows
            # the cancellation (CPython gh-86296). A heartbeat loop cancelled by close() then
            # went on heartbeating, close() waited for it forever and, its poll() no longer
            # called, the member blocked the group's next rebalance for the rebalance
            # timeout. asyncio.wait never swallows a cancellation.
            await asyncio.wait((future,), timeout=timeout)
            if future.done():
                return future.result()
            message = (
                f"{api_name(api_key)} request to {self.label} timed out after "
                f"{timeout * 1000:.0f} ms"
            )
            await self.close(message)
            raise KafkaTimeoutError(message) from None
        finally:
            self._pending.pop(correlation_id, None)
            if not future.done():
                future.cancel()
            elif not future.cancelled():
                future.exception()  # already raised to the caller in some form: mark it seen

    async def _drain(self) -> None:
        assert self._writer is not None
        try:
            await self._writer.drain()
        except (OSError, RuntimeError) as exc:
            # RuntimeError: the transport closed while we were paused for back-pressure
            hung_up = isinstance(exc, (ConnectionResetError, BrokenPipeError))
            await self.close(f"write failed: {exc}", setup=_HUNG_UP if hung_up else None)
            error = ConnectionSetupError if self._setup_failed else ClientError
            raise error(f"connection to {self.label} lost while sending: {exc}") from None

    async def _read_loop(self) -> None:
        assert self._reader is not None
        reader = self._reader
        reason = "closed by the broker"
        setup: str | None = None  # what went wrong, if it means "not set up right"
        try:
            while True:
                size_bytes = await reader.readexactly(4)
                if not self._in_use and _looks_like_tls(size_bytes):
                    reason = setup = "answered with TLS records"
                    break
                (size,) = _INT32.unpack(size_bytes)
                if size < 4 or size > self.max_response_size:
                    reason = f"response frame of impossible size {size}"
                    break
                payload = await reader.readexactly(size)
                (correlation_id,) = _INT32.unpack_from(payload, 0)
                pending = self._pending.pop(correlation_id, None)
                if pending is None:
                    # A response nobody waits for: its request timed out or was cancelled
                    # (the connection was then closed) — or the broker is confused.
                    log.debug("%s: dropping response to correlation id %d", self, correlation_id)
                    continue
                if pending.future.done():
                    continue
                try:
                    _, response = decode_response(pending.api_key, pending.api_version, payload)
                except DecodeError as exc:
                    pending.future.set_exception(
                        ClientError(f"bad response from {self.label}: {exc}")
                    )
                else:
                    self._in_use = self._in_use or pending.api_key != API_VERSIONS
                    pending.future.set_result(response)
        except asyncio.IncompleteReadError:
            reason, setup = "closed by the broker", _HUNG_UP
        except OSError as exc:
            reason = f"read failed: {exc.strerror or exc}"
            setup = _HUNG_UP if isinstance(exc, ConnectionResetError) else None
        except asyncio.CancelledError:
            return
        self._read_task = None  # we are that task: close() must not cancel us
        await self.close(reason, setup=setup)

    # -- teardown ------------------------------------------------------------------------------

    async def close(self, reason: str | None = None, *, setup: str | None = None) -> None:
        """Close the socket; fail every request still waiting with ClientError.

        ``setup`` says how the broker broke off ("closed the connection", "answered with TLS
        records"): before the connection was in use, the waiting requests get
        ConnectionSetupError naming it instead."""
        if self._closed and self._writer is None:
            return
        self._closed = True
        self._close_reason = self._close_reason or reason
        pending, self._pending = self._pending, {}
        # Only with a request waiting: an idle connection the broker closes (idle timeout)
        # says nothing about its settings.
        setup_failed = setup is not None and not self._in_use and bool(pending)
        self._setup_failed = self._setup_failed or setup_failed
        if reason:
            log.debug("closing %s: %s", self, reason)
        message = f"connection to {self.label} closed" + (f": {reason}" if reason else "")
        for item in pending.values():
            if item.future.done():
                continue
            if setup_failed:
                item.future.set_exception(
                    ConnectionSetupError(
                        f"{self.label} {setup} before answering {api_name(item.api_key)}"
                    )
                )
            else:
                item.future.set_exception(ClientError(message))
        task, self._read_task = self._read_task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError, RuntimeError):
                await writer.wait_closed()


def _looks_like_tls(size_bytes: bytes) -> bool:
    """The first bytes of an answer are a TLS record header (an SSL listener's alert)."""
    return size_bytes[0] in _TLS_RECORD_TYPES and size_bytes[1] == 3


def _handshake_failure(exc: OSError) -> bool:
    """A TLS handshake the peer broke off or answered with something else than TLS; an
    untrusted certificate is not one (its own message says what is wrong)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return False
    return isinstance(exc, (ssl.SSLError, ConnectionResetError, BrokenPipeError))
