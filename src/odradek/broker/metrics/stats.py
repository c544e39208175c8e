"""Counters the hot paths bump: per topic, per API, per flush. Plain ints in dicts.

Every call here is made once per request, per partition of a request, or per flush, never
per record: a produce of 10,000 records costs one ``produced`` call. Nothing is locked: all
callers but :meth:`BrokerStats.flushed` run on the broker's event loop, the one thread that
also serves scrapes; flushes run on I/O threads and only add to two numbers (a lost update
under a race would cost one flush's sample, never a wrong count of records).

The collector (:mod:`odradek.broker.metrics.collector`) turns these into Prometheus
families at scrape time.
"""

from __future__ import annotations

from bisect import bisect_left

# Upper bounds (ms) of the request-time and flush-time histogram buckets; +Inf is implied.
# Kafka's own timers run from sub-millisecond (ApiVersions) to the 30 s of a long poll.
TIME_BUCKETS_MS: tuple[float, ...] = (
    0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000,
)  # fmt: skip


class Histogram:
    """Per-bucket counts (not cumulative until exported) and the sum, in milliseconds."""

    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * (len(TIME_BUCKETS_MS) + 1)
        self.total = 0.0

    def observe(self, value_ms: float) -> None:
        self.counts[bisect_left(TIME_BUCKETS_MS, value_ms)] += 1
        self.total += value_ms

    def cumulative(self) -> list[tuple[str, int]]:
        """Prometheus buckets: (upper bound, observations at or below it)."""
        buckets: list[tuple[str, int]] = []
        running = 0
        for bound, count in zip((*TIME_BUCKETS_MS, float("inf")), self.counts, strict=True):
            running += count
            buckets.append(("+Inf" if bound == float("inf") else repr(float(bound)), running))
        return buckets

    @property
    def count(self) -> int:
        return sum(self.counts)


class TopicCounters:
    """Kafka's BrokerTopicMetrics of one topic (or of all topics, the unlabelled series)."""

    __slots__ = ("bytes_in", "bytes_out", "fetch_requests", "messages_in", "produce_requests")

    def __init__(self) -> None:
        self.messages_in = 0
        self.bytes_in = 0
        self.bytes_out = 0
        self.produce_requests = 0  # per partition of a produce, as Kafka counts them
        self.fetch_requests = 0


class RequestCounters:
    """Kafka's RequestMetrics of one API: requests by version, queue and total time."""

    __slots__ = ("by_version", "queue", "total")

    def __init__(self) -> None:
        self.by_version: dict[int, int] = {}
        self.queue = Histogram()
        self.total = Histogram()


class BrokerStats:
    """The counters of one broker. Topics and APIs appear on first use."""

    def __init__(self) -> None:
        self.topics: dict[str, TopicCounters] = {}
        self.all_topics = TopicCounters()
        self.replication_bytes_out = 0
        self.requests: dict[str, RequestCounters] = {}
        self.flush = Histogram()

    def _topic(self, topic: str) -> TopicCounters:
        counters = self.topics.get(topic)
        if counters is None:
            counters = self.topics[topic] = TopicCounters()
        return counters

    def produced(self, topic: str, messages: int, size: int) -> None:
        """Records a client appended to one partition of ``topic`` (one batch set)."""
        counters = self._topic(topic)
        counters.messages_in += messages
        counters.bytes_in += size
        counters.produce_requests += 1
        every = self.all_topics
        every.messages_in += messages
        every.bytes_in += size
        every.produce_requests += 1

    def produce_failed(self, topic: str) -> None:
        self._topic(topic).produce_requests += 1
        self.all_topics.produce_requests += 1

    def fetched(self, topic: str, size: int) -> None:
        """Bytes a consumer's fetch read from one partition of ``topic``."""
        counters = self._topic(topic)
        counters.bytes_out += size
        counters.fetch_requests += 1
        self.all_topics.bytes_out += size
        self.all_topics.fetch_requests += 1

    def replicated_out(self, size: int) -> None:
        """Bytes a follower's fetch read here (Kafka's ReplicationBytesOutPerSec)."""
        self.replication_bytes_out += size

    def request(self, api: str, version: int, queue_ms: float, total_ms: float) -> None:
        counters = self.requests.get(api)
        if counters is None:
            counters = self.requests[api] = RequestCounters()
        counters.by_version[version] = counters.by_version.get(version, 0) + 1
        counters.queue.observe(queue_ms)
        counters.total.observe(total_ms)

    def flushed(self, seconds: float) -> None:
        self.flush.observe(seconds * 1000)

