"""Encoded Metadata answers, kept until the metadata they were built from changes.

Clients ask for Metadata all the time (every new connection, every refresh interval,
every leader change they notice), and with many partitions building and encoding the
answer dominates: 10,000 partitions take about 100 ms of Python. The answer depends only
on the metadata and on the request's API version, the topics it names and the listener it
came in on (which endpoints the brokers are advertised with), so the encoded body (all
after the response header) is kept per such key. A repeated request then costs a lookup
and a response header.

Every entry belongs to one ``generation`` of the metadata (the embedded store's, or the
cluster metadata cache's, which grows with every UpdateMetadata): the first lookup with a
newer generation drops them all, so an answer never outlives a topic creation or
deletion, a partition added, or a leader or ISR change. Entries are few (the distinct
topic lists clients ask for) and bounded, least recently used first out.

Below the whole answers, :class:`TopicEntries` keeps each topic's encoded entry (made by
:mod:`odradek.protocol.metadata_encoder`) while that topic stays the same, so the first
answer after a change re-encodes only the topics that changed and joins the rest: with
10,000 partitions, a few milliseconds instead of building and encoding everything
(0.15-1.9 s with kio's dataclasses).
"""

from __future__ import annotations

import asyncio
import struct
from collections import OrderedDict
from collections.abc import Callable, Collection, Hashable

from odradek.broker.requests import ChunkedResponse, RequestContext
from odradek.protocol.headers import encode_response_header

MAX_ENTRIES = 64
# Bytes of bodies kept at most (10,000 partitions encode to about 0.4 MB); a body over a
# quarter of it is not kept (a request naming half a million topics).
MAX_BYTES = 64 << 20

# A topic entry of more partitions than this is encoded on a thread; below it the event
# loop encodes it (20,000 partitions: about 4 ms on a quiet core here, more under load).
ENCODE_ON_THREAD_PARTITIONS = 20_000

_INT32 = struct.Struct(">i")
_METADATA = 3


class EncodedAnswers:
    """Encoded response bodies by key, all of one metadata generation."""

    def __init__(self, max_entries: int = MAX_ENTRIES, max_bytes: int = MAX_BYTES) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.generation: int | None = None
        self._bodies: OrderedDict[Hashable, bytes] = OrderedDict()
        self._bytes = 0
        self.hits = 0
        self.misses = 0

    def get(self, generation: int, key: Hashable) -> bytes | None:
        if generation != self.generation:
            self._bodies.clear()
            self._bytes = 0
            self.generation = generation
        body = self._bodies.get(key)
        if body is None:
            self.misses += 1
            return None
        self._bodies.move_to_end(key)
        self.hits += 1
        return body

    def put(self, generation: int, key: Hashable, body: bytes) -> None:
        """Keep ``body`` unless the metadata moved on while it was being built."""
        if generation != self.generation or len(body) > self.max_bytes // 4:
            return
        old = self._bodies.pop(key, None)
        if old is not None:
            self._bytes -= len(old)
        self._bodies[key] = body
        self._bytes += len(body)
        while len(self._bodies) > self.max_entries or self._bytes > self.max_bytes:
            _, dropped = self._bodies.popitem(last=False)
            self._bytes -= len(dropped)


class TopicEntries:
    """Encoded Metadata topic entries by (topic, layout of the version asked).

    An entry is valid while the topic's ``state`` is the very object it was encoded from
    and ``extra`` (anything else it depends on) is equal: the metadata stores publish a
    new object for a topic whenever its partitions, leaders, epochs or ISR change and
    never change a published one, so a topic left alone keeps its entry across changes
    to others. Holding ``state`` keeps its identity from being reused.
    """

    def __init__(self) -> None:
        self._entries: dict[tuple[str, int], tuple[object, Hashable, bytes]] = {}
        self._pruned_generation: int | None = None
        self.encoded = 0  # entries encoded (for tests and benchmarks)

    def __len__(self) -> int:
        return len(self._entries)

    def kept(self, name: str, layout: int, state: object, extra: Hashable) -> bytes | None:
        """The entry kept for ``name`` in ``layout`` (:func:`topic_layout` of the version
        asked) if it was encoded from this very ``state`` and an equal ``extra``."""
        found = self._entries.get((name, layout))
        if found is not None and found[0] is state and found[1] == extra:
            return found[2]
        return None

    async def encode(
        self,
        name: str,
        layout: int,
        state: object,
        extra: Hashable,
        encode: Callable[[], bytes],
        partitions: int = 0,
    ) -> bytes:
        """``encode()``'s entry, kept; a topic of more than ``ENCODE_ON_THREAD_PARTITIONS``
        is encoded on a thread (``state`` is never changed, so the thread reads it
        safely) while the event loop serves others."""
        if partitions > ENCODE_ON_THREAD_PARTITIONS:
            entry = await asyncio.to_thread(encode)
        else:
            entry = encode()
        self.encoded += 1
        self._entries[(name, layout)] = (state, extra, entry)
        return entry

    def prune(self, generation: int, present: Collection[str]) -> None:
        """Forget entries of topics no longer ``present`` (once per metadata generation:
        deleted topics would otherwise be kept for ever)."""
        if generation == self._pruned_generation:
            return
        self._pruned_generation = generation
        gone = [key for key in self._entries if key[0] not in present]
        for key in gone:
            del self._entries[key]


def throttled(ctx: RequestContext, answer: ChunkedResponse, throttle_ms: int) -> ChunkedResponse:
    """An answer made by :func:`framed` saying ``throttle_time_ms`` (a request-quota
    throttle): the field is the body's first from Metadata v3 on; kept bodies say 0."""
    chunks = answer.chunks
    if ctx.header.api_key != _METADATA or ctx.header.api_version < 3 or len(chunks) != 2:
        return answer
    body = chunks[1]
    return ChunkedResponse([chunks[0], _INT32.pack(throttle_ms) + body[4:]])


def framed(ctx: RequestContext, body: bytes) -> ChunkedResponse:
    """``body`` as the answer to this request: size prefix and response header first."""
    header = ctx.header
    head = encode_response_header(header.api_key, header.api_version, header.correlation_id)
    return ChunkedResponse([_INT32.pack(len(head) + len(body)) + head, body])
