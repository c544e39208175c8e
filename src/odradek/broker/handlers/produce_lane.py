"""The lone-produce lane: a Produce request naming one partition, handled without the
generic request machinery.

A producer with ``linger.ms=0`` sends one request per record batch, and for such a
request the generic path (decoding into kio entities, dispatch, the handler's per-topic
loops and dicts) costs more than the append itself. The lane reads the frame directly
(:func:`odradek.protocol.produce_request.read_lone_request`) and calls the same replica
manager, quota-free answer encoder and metrics as :func:`handle_produce`, so the answer is
the same bytes. It declines (the connection then takes the generic path, which decides
and words every error) whenever anything could make the generic path answer otherwise:
an authorizer, a client or request quota, the request observer (metrics, slow-request
log), a transactional id, an unsupported version, invalid acks or topic name, or any
other shape of request.
"""

from __future__ import annotations

from collections.abc import Awaitable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from odradek.broker.client_quotas import PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE
from odradek.broker.handlers.produce import (
    _await_replication,
    _fill,
    _legal_topic_name,
    record_produce_quota,
)
from odradek.broker.replica_manager import AppendResult
from odradek.protocol.produce_request import LoneProduce, read_lone_request
from odradek.protocol.produce_response import (
    VERSIONS,
    encode_one_partition,
    encode_produce_response,
)
from odradek.protocol.versions import PRODUCE

if TYPE_CHECKING:
    from odradek.broker.requests import RequestContext
    from odradek.broker.server import KafkaServer
    from odradek.protocol.headers import RequestHeader

__all__ = ["ProduceLane"]

class ProduceLane:
    """Decides per frame whether it can answer it; see the module docstring."""

    __slots__ = ("_server",)

    def __init__(self, server: KafkaServer) -> None:
        self._server = server

    def accept(
        self, frame: memoryview, versions: Mapping[int, tuple[int, int]]
    ) -> tuple[RequestHeader, LoneProduce] | None:
        """The request's header and body when the lane can answer it (``answer``), else
        None. Nothing has happened yet when it declines: no append, no metric."""
        server = self._server
        if server.authorizer is not None:
            return None
        quotas = server.client_quotas
        if quotas.enabled(PRODUCER_BYTE_RATE) or quotas.enabled(REQUEST_PERCENTAGE):
            return None
        read = read_lone_request(frame)
        if read is None:
            return None
        header, lone = read
        version = header.api_version
        bounds = versions.get(PRODUCE)
        if (
            bounds is None
            or not bounds[0] <= version <= bounds[1]
            or version not in VERSIONS  # what encode_produce_response writes
            or lone.acks not in (-1, 0, 1)
            or not _legal_topic_name(lone.topic)
        ):
            return None
        return read

    def answer(
        self, ctx: RequestContext, lone: LoneProduce
    ) -> bytes | Coroutine[Any, Any, bytes | None] | None:
        """handle_produce for one partition: the framed answer (None for acks=0), or, when
        it must wait (an append on the append thread, acks=all replication), a coroutine
        to await for it. The commonest request is answered without creating one."""
        server = self._server
        replicas = server.replica_manager
        result = replicas.append_or_offload(
            lone.topic, lone.partition, lone.records, required_acks=lone.acks
        )
        if not isinstance(result, AppendResult):  # on the append thread (large, or queued)
            return self._answer_after(ctx, lone, result)
        if result.error_code or result.error_message or server.stats is not None:
            return self._answer_entry(ctx, lone, result)
        # Appended, no metrics to count: the numbers go straight into the answer, as
        # _fill and encode_produce_response would put them there.
        code = 0
        if lone.acks == -1:
            code = replicas.produce_status(lone.topic, lone.partition, result.last_offset + 1)
            if code is None:  # the followers have not caught up yet: wait for them
                entry, pending = self._entry(lone, result)
                return self._answer_replicated(ctx, lone, entry, pending)
        throttle_ms = record_produce_quota(server, ctx, len(lone.records))
        if lone.acks == 0:
            return None
        header = ctx.header
        append_time = result.log_append_time_ms
        return encode_one_partition(
            header.correlation_id,
            header.api_version,
            lone.topic,
            lone.partition,
            code,
            result.base_offset,
            append_time if append_time >= 0 else -1,
            result.log_start_offset,
            throttle_ms,
        )

    def _answer_entry(
        self, ctx: RequestContext, lone: LoneProduce, result: AppendResult
    ) -> bytes | Coroutine[Any, Any, bytes | None] | None:
        """answer's general case (an error, or metrics to count): the partition entry
        handle_produce builds, filled by the same _fill."""
        entry, pending = self._entry(lone, result)
        if pending and not self._replicated(lone, entry, pending):
            return self._answer_replicated(ctx, lone, entry, pending)
        return self._encode(ctx, lone, entry)

    async def _answer_after(
        self, ctx: RequestContext, lone: LoneProduce, appending: Awaitable[AppendResult]
    ) -> bytes | None:
        entry, pending = self._entry(lone, await appending)
        if pending and not self._replicated(lone, entry, pending):
            await _await_replication(self._server, pending, lone.timeout_ms)
        return self._encode(ctx, lone, entry)

    async def _answer_replicated(
        self,
        ctx: RequestContext,
        lone: LoneProduce,
        entry: dict[str, Any],
        pending: list[tuple[str, int, dict[str, Any], int]],
    ) -> bytes | None:
        await _await_replication(self._server, pending, lone.timeout_ms)
        return self._encode(ctx, lone, entry)

    def _entry(
        self, lone: LoneProduce, result: AppendResult
    ) -> tuple[dict[str, Any], list[tuple[str, int, dict[str, Any], int]]]:
        """The answer's partition entry, and what acks=all waits for (as handle_produce)."""
        entry: dict[str, Any] = {
            "index": lone.partition,
            "base_offset": -1,
            "log_append_time": None,
            "log_start_offset": -1,
        }
        pending: list[tuple[str, int, dict[str, Any], int]] = []
        _fill(self._server, entry, lone.topic, len(lone.records), result, lone.acks, pending)
        return entry, pending

    def _replicated(
        self,
        lone: LoneProduce,
        entry: dict[str, Any],
        pending: list[tuple[str, int, dict[str, Any], int]],
    ) -> bool:
        """acks=all: whether the answer can go now. Most often the HW is already there
        (one replica, or followers ahead of the request); the entry then gets
        _await_replication's verdict without it."""
        status = self._server.replica_manager.produce_status(
            lone.topic, lone.partition, pending[0][3]
        )
        if status is None:
            return False
        if status:
            entry["error_code"] = ErrorCode(status)
        return True

    def _encode(
        self, ctx: RequestContext, lone: LoneProduce, entry: dict[str, Any]
    ) -> bytes | None:
        # No quota was set when the lane took the request; one set meanwhile (while the
        # append or the replication was awaited) counts these bytes, as on the generic path.
        throttle_ms = record_produce_quota(self._server, ctx, len(lone.records))
        if lone.acks == 0:
            return None
        header = ctx.header
        encoded = encode_produce_response(
            header.correlation_id, header.api_version, [(lone.topic, [entry])], throttle_ms
        )
        if encoded is None:  # cannot happen for the versions accepted: a bug
            raise RuntimeError(f"no direct encoding of a Produce v{header.api_version} answer")
        return encoded
