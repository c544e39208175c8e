"""The metrics' hot-path counters and histograms, and the storage flush hook, in-process."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from odradek.broker.config import BrokerConfig, ConfigError
from odradek.broker.metrics.stats import TIME_BUCKETS_MS, BrokerStats, Histogram
from odradek.storage import flush_stats
from odradek.storage.config import LogConfig
from odradek.storage.log import Log
from tests.storage.conftest import clock, log_dir, open_log  # noqa: F401 - fixtures
from tests.storage.test_log import fill


def test_histogram_buckets_are_cumulative_with_the_sum() -> None:
    histogram = Histogram()
    for value in (0.1, 0.5, 3, 7, 40_000):
        histogram.observe(value)
    buckets = dict(histogram.cumulative())
    assert buckets["0.5"] == 2  # upper bounds are inclusive, as Prometheus' "le"
    assert buckets["1.0"] == 2
    assert buckets["5.0"] == 3
    assert buckets["10.0"] == 4
    assert buckets[repr(float(TIME_BUCKETS_MS[-1]))] == 4
    assert buckets["+Inf"] == 5 == histogram.count
    assert histogram.total == pytest.approx(40_010.6)


def test_topic_counters_and_the_all_topics_totals() -> None:
    stats = BrokerStats()
    stats.produced("a", 10, 1000)
    stats.produced("a", 5, 300)
    stats.produced("b", 1, 70)
    stats.produce_failed("b")
    stats.fetched("a", 1300)
    stats.replicated_out(99)
    assert (stats.topics["a"].messages_in, stats.topics["a"].bytes_in) == (15, 1300)
    assert stats.topics["a"].bytes_out == 1300
    assert stats.topics["b"].produce_requests == 2
    every = stats.all_topics
    assert (every.messages_in, every.bytes_in, every.bytes_out) == (16, 1370, 1300)
    assert every.produce_requests == 4 and every.fetch_requests == 1
    assert stats.replication_bytes_out == 99


def test_request_counters_by_api_and_version() -> None:
    stats = BrokerStats()
    stats.request("Produce", 9, 0.2, 3.0)
    stats.request("Produce", 10, 0.3, 4.0)
    stats.request("Produce", 10, 0.1, 2.0)
    counters = stats.requests["Produce"]
    assert counters.by_version == {9: 1, 10: 2}
    assert counters.queue.count == 3 and counters.queue.total == pytest.approx(0.6)
    assert counters.total.total == pytest.approx(9.0)


@pytest.fixture
def flush_times() -> Iterator[list[float]]:
    seen: list[float] = []
    flush_stats.observer = seen.append
    try:
        yield seen
    finally:
        flush_stats.observer = None


def test_log_flushes_report_their_time(
    open_log: Callable[..., Log],  # noqa: F811 - the fixture
    flush_times: list[float],
) -> None:
    log = open_log(LogConfig(segment_bytes=100_000))
    fill(log, 3)
    log.flush()
    assert len(flush_times) == 1 and flush_times[0] >= 0
    log.flush()  # nothing new to fsync: not a flush
    assert len(flush_times) == 1
    fill(log, 1)
    log.flush()
    assert len(flush_times) == 2


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("log.format", "xml", "must be one of text, json"),
        ("metrics.port", "70000", "must be between 0 and 65535"),
        ("log.slow.request.threshold.ms", "-5", "must be at least -1"),
    ],
)
def test_observability_keys_are_checked(key: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        BrokerConfig({key: value})


def test_observability_defaults() -> None:
    config = BrokerConfig({})
    assert config.get("metrics.port") is None
    assert config.get("metrics.host") == "127.0.0.1"
    assert config.get("log.format") == "text"
    assert config.get("log.slow.request.threshold.ms") == -1
