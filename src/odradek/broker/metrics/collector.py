"""The scrape: every metric of a broker, computed when Prometheus asks for it.

Counters come from :class:`~odradek.broker.metrics.stats.BrokerStats` (bumped by the hot
paths); gauges are read from the broker's own state right now, once per scrape, by walking
the hosted partitions and groups a single time. Nothing polls in the background.

Names follow what the Prometheus JMX exporter's Kafka rules make of Kafka's MBeans
(``lowercaseOutputName``, ``lowercaseOutputLabelNames``), so dashboards written for Kafka
work unchanged; the table in docs/operations.md maps each MBean to its name here. Consumer
lag is not a Kafka broker MBean: it carries kafka_exporter's names (``kafka_consumergroup_*``).
Each group's lag and committed offsets are exported by the broker coordinating the group, and
by no other: for partitions led elsewhere the high watermark is asked of their leaders just
before the scrape is collected (:meth:`BrokerCollector.prepare`, lag.py).

The collector runs on the broker's event loop (the endpoint is served there), so it reads
the same dictionaries the handlers change without locks.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.samples import Sample

from odradek.broker.metrics.lag import RemoteHighWatermarks
from odradek.broker.metrics.stats import BrokerStats, Histogram
from odradek.cluster.controller.context import PartitionStateName

if TYPE_CHECKING:
    from odradek.broker.server import KafkaServer

# Kafka's group states, as the NumGroups<State> gauges name them.
GROUP_STATES = ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty")


class LoopBusy:
    """How busy the event loop is: the CPU time of its thread against the wall clock.

    The loop's thread is either running callbacks (on the CPU) or waiting in epoll (idle),
    so its thread CPU time is its busy time. Kafka's RequestHandlerAvgIdlePercent is the
    idle share of its request threads; ours is the idle share of the loop's thread since
    the previous scrape. Must be called on the loop's thread.
    """

    def __init__(self) -> None:
        self._last_wall = time.monotonic()
        self._last_cpu = time.thread_time()
        self.idle_ratio = 1.0

    def sample(self) -> tuple[float, float]:
        """(busy seconds since the thread started, idle ratio since the last sample)."""
        wall, cpu = time.monotonic(), time.thread_time()
        elapsed = wall - self._last_wall
        if elapsed > 0.01:  # back-to-back scrapes keep the last figure
            busy = (cpu - self._last_cpu) / elapsed
            self.idle_ratio = min(max(1.0 - busy, 0.0), 1.0)
            self._last_wall, self._last_cpu = wall, cpu
        return cpu, self.idle_ratio


class BrokerCollector:
    """A prometheus_client collector over one broker."""

    def __init__(self, server: KafkaServer, stats: BrokerStats) -> None:
        self.server = server
        self.stats = stats
        self.loop_busy = LoopBusy()
        # Set by the endpoint: seconds its previous collection took on the event loop.
        self.last_collect_seconds: Callable[[], float] = lambda: 0.0
        # High watermarks of partitions led by other brokers, asked for by prepare().
        self._remote_high_watermarks: dict[tuple[str, int], int] = {}

    async def prepare(self) -> None:
        """Before a collection: the high watermarks the lag of this broker's groups needs
        from other brokers (only in a cluster; a lone broker leads every partition)."""
        parts = self.server.cluster_parts
        if parts is None:
            return
        replica_manager = self.server.replica_manager
        broker_id = replica_manager.broker_id
        wanted = set()
        for group in self.server.group_coordinator.groups():
            for topic, index in group.offsets:
                partition = replica_manager.partition(topic, index)
                if partition is None or partition.leader_id != broker_id:
                    wanted.add((topic, index))
        if not wanted:
            self._remote_high_watermarks = {}
            return
        cache = parts.metadata_cache

        def leader_of(topic: str, index: int) -> int | None:
            info = cache.partition(topic, index)
            return None if info is None else info.leader

        remote = RemoteHighWatermarks(leader_of, parts.address_of)
        self._remote_high_watermarks = await remote.fetch(wanted)

    def describe(self) -> list[Metric]:
        return []  # families depend on the broker's state: don't collect at registration

    def collect(self) -> Iterator[Metric]:
        yield from self._topic_counters()
        yield from self._request_metrics()
        yield from self._partitions()
        yield from self._purgatories()
        yield from self._fetch_sessions()
        yield from self._controller()
        yield from self._groups()
        yield from self._loop_and_connections()
        yield _histogram(
            "kafka_log_logflushstats_logflushrateandtimems",
            "Log flushes (fsyncs) and their time in ms (LogFlushRateAndTimeMs)",
            [],
            [((), self.stats.flush)],
        )

    # BrokerTopicMetrics ------------------------------------------------------------------

    def _topic_counters(self) -> Iterator[Metric]:
        stats = self.stats
        # A deleted topic's series go, as Kafka removes a topic's metrics with its last
        # partition here (a topic never hosted here, named by a failed produce, too).
        hosted = {partition.topic for partition in self.server.replica_manager.partitions()}
        for gone in [topic for topic in stats.topics if topic not in hosted]:
            del stats.topics[gone]
        fields = (
            ("messagesin", "messages_in", "Records appended by producers (MessagesInPerSec)"),
            ("bytesin", "bytes_in", "Bytes appended by producers (BytesInPerSec)"),
            ("bytesout", "bytes_out", "Bytes read by consumers (BytesOutPerSec)"),
            (
                "totalproducerequests",
                "produce_requests",
                "Partitions of produce requests (TotalProduceRequestsPerSec)",
            ),
            (
                "totalfetchrequests",
                "fetch_requests",
                "Partitions of consumer fetches (TotalFetchRequestsPerSec)",
            ),
        )
        for short, attribute, doc in fields:
            name = f"kafka_server_brokertopicmetrics_{short}"
            family = CounterMetricFamily(name, doc, labels=["topic"])
            # The all-topics series has no topic label, as the exporter makes of Kafka's
            # topic-less MBean.
            family.samples.append(
                Sample(f"{name}_total", {}, getattr(stats.all_topics, attribute))
            )
            for topic, counters in stats.topics.items():
                family.add_metric([topic], getattr(counters, attribute))
            yield family
        yield CounterMetricFamily(
            "kafka_server_brokertopicmetrics_replicationbytesin",
            "Bytes appended as a follower (ReplicationBytesInPerSec)",
            value=self.server.replica_manager.replication_bytes_in,
        )
        yield CounterMetricFamily(
            "kafka_server_brokertopicmetrics_replicationbytesout",
            "Bytes read by followers (ReplicationBytesOutPerSec)",
            value=stats.replication_bytes_out,
        )

    # RequestMetrics ------------------------------------------------------------------------

    def _request_metrics(self) -> Iterator[Metric]:
        requests = self.stats.requests
        rate = CounterMetricFamily(
            "kafka_network_requestmetrics_requests",
            "Requests answered, by API and version (RequestsPerSec)",
            labels=["request", "version"],
        )
        for api, counters in requests.items():
            for version, count in counters.by_version.items():
                rate.add_metric([api, str(version)], count)
        yield rate
        yield _histogram(
            "kafka_network_requestmetrics_requestqueuetimems",
            "Time a request waited before its handler ran, ms (RequestQueueTimeMs)",
            ["request"],
            [((api, ), counters.queue) for api, counters in requests.items()],
        )
        yield _histogram(
            "kafka_network_requestmetrics_totaltimems",
            "Time from a request's arrival to its response, ms (TotalTimeMs)",
            ["request"],
            [((api, ), counters.total) for api, counters in requests.items()],
        )

    # ReplicaManager and Log --------------------------------------------------------------

    def _partitions(self) -> Iterator[Metric]:
        server = self.server
        replica_manager = server.replica_manager
        broker_id = replica_manager.broker_id
        size = GaugeMetricFamily(
            "kafka_log_log_size", "Bytes of a partition's log (Size)", labels=["topic", "partition"]
        )
        end = GaugeMetricFamily(
            "kafka_log_log_logendoffset",
            "A partition's log end offset (LogEndOffset)",
            labels=["topic", "partition"],
        )
        start = GaugeMetricFamily(
            "kafka_log_log_logstartoffset",
            "A partition's log start offset (LogStartOffset)",
            labels=["topic", "partition"],
        )
        partitions = leaders = under_replicated = under_min_isr = 0
        for partition in replica_manager.partitions():
            partitions += 1
            log_ = partition.log
            labels = [partition.topic, str(partition.index)]
            size.add_metric(labels, log_.size_in_bytes)
            end.add_metric(labels, log_.log_end_offset)
            start.add_metric(labels, log_.log_start_offset)
            if partition.leader_id != broker_id:
                continue
            leaders += 1
            in_sync = len(partition.isr)
            if in_sync < len(partition.replicas):
                under_replicated += 1
            if in_sync < log_.config.min_insync_replicas:
                under_min_isr += 1
        yield size
        yield end
        yield start
        gauges = (
            ("partitioncount", partitions, "Partitions hosted here (PartitionCount)"),
            ("leadercount", leaders, "Partitions led here (LeaderCount)"),
            (
                "underreplicatedpartitions",
                under_replicated,
                "Led partitions whose ISR is smaller than their replicas "
                "(UnderReplicatedPartitions)",
            ),
            (
                "underminisrpartitioncount",
                under_min_isr,
                "Led partitions with fewer in-sync replicas than min.insync.replicas "
                "(UnderMinIsrPartitionCount)",
            ),
        )
        for short, value, doc in gauges:
            yield GaugeMetricFamily(f"kafka_server_replicamanager_{short}", doc, value=value)
        yield CounterMetricFamily(
            "kafka_server_replicamanager_isrshrinks",
            "ISR shrinks of partitions led here (IsrShrinksPerSec)",
            value=replica_manager.isr_shrinks,
        )
        yield CounterMetricFamily(
            "kafka_server_replicamanager_isrexpands",
            "ISR expansions of partitions led here (IsrExpandsPerSec)",
            value=replica_manager.isr_expands,
        )

    def _fetch_sessions(self) -> Iterator[Metric]:
        """Kafka's FetchSessionCache gauges, and how many fetches used each kind of context."""
        cache = self.server.fetch_manager.cache
        prefix = "kafka_server_fetchsessioncache"
        yield GaugeMetricFamily(
            f"{prefix}_numincrementalfetchsessions",
            "Incremental fetch sessions cached (NumIncrementalFetchSessions)",
            value=len(cache),
        )
        yield GaugeMetricFamily(
            f"{prefix}_numincrementalfetchpartitionscached",
            "Partitions in cached fetch sessions (NumIncrementalFetchPartitionsCached)",
            value=cache.total_partitions,
        )
        yield CounterMetricFamily(
            f"{prefix}_incrementalfetchsessionevictions",
            "Fetch sessions evicted to make room (IncrementalFetchSessionEvictionsPerSec)",
            value=cache.evictions,
        )
        requests = CounterMetricFamily(
            "odradek_fetch_session_requests",
            "Fetch requests by session context (sessionless, full, incremental, error)",
            labels=["context"],
        )
        requests.add_metric(["sessionless"], cache.sessionless_fetches)
        requests.add_metric(["full"], cache.full_fetches)
        requests.add_metric(["incremental"], cache.incremental_fetches)
        requests.add_metric(["error"], cache.session_errors)
        yield requests

    def _purgatories(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "kafka_server_delayedoperationpurgatory_purgatorysize",
            "Requests waiting in a purgatory (PurgatorySize)",
            labels=["delayedoperation"],
        )
        waiting = self.server.fetch_waiters.waiting_by_kind()
        for kind in ("Produce", "Fetch", "DeleteRecords"):
            family.add_metric([kind], waiting.get(kind, 0))
        yield family

    # KafkaController ---------------------------------------------------------------------

    def _controller(self) -> Iterator[Metric]:
        server = self.server
        controller = server.controller
        if server.cluster is None:
            # The embedded single broker is its own controller; its partitions go offline
            # with its log directory.
            active = 1
            offline = (
                len(server.replica_manager.partitions())
                if server.log_manager.dir_failure.offline
                else 0
            )
        elif controller is not None and controller.is_active:
            active = 1
            offline = len(controller.ctx.partitions_in(PartitionStateName.OFFLINE))
        else:
            active = offline = 0
        yield GaugeMetricFamily(
            "kafka_controller_kafkacontroller_activecontrollercount",
            "1 on the active controller, else 0 (ActiveControllerCount)",
            value=active,
        )
        yield GaugeMetricFamily(
            "kafka_controller_kafkacontroller_offlinepartitionscount",
            "Partitions without a live leader, on the active controller "
            "(OfflinePartitionsCount)",
            value=offline,
        )

    # GroupMetadataManager and consumer lag -----------------------------------------------

    def _groups(self) -> Iterator[Metric]:
        server = self.server
        replica_manager = server.replica_manager
        broker_id = replica_manager.broker_id
        by_state = dict.fromkeys(GROUP_STATES, 0)
        remote = self._remote_high_watermarks
        lag = GaugeMetricFamily(
            "kafka_consumergroup_lag",
            "High watermark minus the committed offset, by the group's coordinator",
            labels=["consumergroup", "topic", "partition"],
        )
        current = GaugeMetricFamily(
            "kafka_consumergroup_current_offset",
            "A group's committed offset",
            labels=["consumergroup", "topic", "partition"],
        )
        groups = server.group_coordinator.groups()
        for group in groups:
            state = str(group.state)
            by_state[state] = by_state.get(state, 0) + 1
            for (topic, index), committed in group.offsets.items():
                labels = [group.group_id, topic, str(index)]
                current.add_metric(labels, committed.offset)
                partition = replica_manager.partition(topic, index)
                if partition is not None and partition.leader_id == broker_id:
                    high_watermark: int | None = partition.high_watermark
                else:
                    high_watermark = remote.get((topic, index))  # None: leader silent
                if high_watermark is not None:
                    # The same figure as kafka-consumer-groups --describe: never negative.
                    lag.add_metric(labels, max(high_watermark - committed.offset, 0))
        prefix = "kafka_coordinator_group_groupmetadatamanager_numgroups"
        yield GaugeMetricFamily(prefix, "Groups coordinated here (NumGroups)", value=len(groups))
        for state in GROUP_STATES:
            yield GaugeMetricFamily(
                f"{prefix}{state.lower()}",
                f"Groups in state {state} (NumGroups{state})",
                value=by_state[state],
            )
        yield lag
        yield current

    # Event loop and network ----------------------------------------------------------------

    def _loop_and_connections(self) -> Iterator[Metric]:
        busy_seconds, idle_ratio = self.loop_busy.sample()
        yield GaugeMetricFamily(
            "kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent",
            "Idle share (0-1) of the event loop's thread since the previous scrape "
            "(RequestHandlerAvgIdlePercent)",
            value=idle_ratio,
        )
        yield CounterMetricFamily(
            "odradek_event_loop_busy_seconds",
            "CPU seconds of the event loop's thread: 1 - rate() is the idle share",
            value=busy_seconds,
        )
        connections = GaugeMetricFamily(
            "kafka_server_socket_server_metrics_connection_count",
            "Open connections per listener (socket-server-metrics connection-count)",
            labels=["listener", "networkprocessor"],
        )
        for network in self.server.networks:
            connections.add_metric([network.listener_name, "0"], network.connection_count)
        yield connections
        yield GaugeMetricFamily(
            "odradek_metrics_collect_seconds",
            "Time the previous scrape spent gathering figures on the event loop",
            value=self.last_collect_seconds(),
        )


def _histogram(
    name: str, doc: str, labels: list[str], series: list[tuple[tuple[str, ...], Histogram]]
) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, doc, labels=labels)
    for values, histogram in series:
        family.add_metric(list(values), histogram.cumulative(), histogram.total)
    return family

