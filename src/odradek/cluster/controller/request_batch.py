"""ControllerBrokerRequestBatch: what one event tells each broker, sent once at its end.

As Kafka's AbstractControllerBrokerRequestBatch: while an event is processed the state
machines add LeaderAndIsr partition states, StopReplica partitions and UpdateMetadata
partitions per broker; :meth:`RequestBatch.requests` turns them into one request of each
kind per broker, stamped with the controller id, the controller epoch and the broker's
epoch, so a broker can drop what a replaced controller (or a controller that saw an
older incarnation of the broker) sends.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from odradek.cluster.controller.context import ControllerContext, LeaderIsr, TopicPartition
from odradek.cluster.zk.codecs import parse_kafka_uuid
from odradek.protocol import interbroker
from odradek.protocol.build import build

# Kafka 3.9 with inter.broker.protocol.version 3.9 sends these versions.
LEADER_AND_ISR_VERSION = 7
UPDATE_METADATA_VERSION = 8
STOP_REPLICA_VERSION = 4
LEADER_DURING_DELETE = -2  # LeaderAndIsr.LeaderDuringDelete: the topic is being deleted
SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}

ResponseCallback = Callable[[int, Any], None]  # (broker id, response entity or None)


@dataclass(frozen=True, slots=True)
class OutgoingRequest:
    broker: int
    api_key: int
    version: int
    request: Any
    callback: ResponseCallback | None = None


@dataclass
class RequestBatch:
    controller_id: int
    leader_and_isr: dict[int, dict[TopicPartition, tuple[LeaderIsr, bool]]] = field(
        default_factory=dict
    )
    stop_replica: dict[int, dict[TopicPartition, bool]] = field(default_factory=dict)
    update_metadata_brokers: set[int] = field(default_factory=set)
    update_metadata_partitions: set[TopicPartition] = field(default_factory=set)
    stop_replica_callback: ResponseCallback | None = None
    listener: str | None = None  # the inter-broker listener (None: the first PLAINTEXT)

    def is_empty(self) -> bool:
        return not (self.leader_and_isr or self.stop_replica or self.update_metadata_brokers)

    def add_leader_and_isr(
        self, brokers: Iterable[int], tp: TopicPartition, state: LeaderIsr, is_new: bool = False
    ) -> None:
        """LeaderAndIsr for ``tp`` to ``brokers``; UpdateMetadata for ``tp`` goes to every
        live broker with it, as Kafka's addLeaderAndIsrRequestForBrokers does."""
        for broker in brokers:
            if broker >= 0:
                self.leader_and_isr.setdefault(broker, {})[tp] = (state, is_new)
                # A StopReplica (no delete) queued earlier in this event is superseded:
                # Kafka sends each state change's batch at once, so a bounced broker gets
                # StopReplica (its old incarnation failed) and then LeaderAndIsr (it
                # started). One batch sends LeaderAndIsr first; keeping the StopReplica
                # would leave the restarted broker stopped until the next leader change.
                pending = self.stop_replica.get(broker)
                if pending is not None and pending.get(tp) is False:
                    del pending[tp]
                    if not pending:
                        del self.stop_replica[broker]
        self.update_metadata_partitions.add(tp)

    def add_stop_replica(self, brokers: Iterable[int], tp: TopicPartition, delete: bool) -> None:
        for broker in brokers:
            per_broker = self.stop_replica.setdefault(broker, {})
            per_broker[tp] = per_broker.get(tp, False) or delete

    def add_update_metadata(
        self, brokers: Iterable[int], partitions: Iterable[TopicPartition] = ()
    ) -> None:
        self.update_metadata_brokers.update(brokers)
        self.update_metadata_partitions.update(partitions)

    # --- building the requests ------------------------------------------------------

    def requests(self, ctx: ControllerContext) -> list[OutgoingRequest]:
        """The batch as requests, in Kafka's order: LeaderAndIsr, UpdateMetadata,
        StopReplica. Brokers that are not live are skipped. The batch is emptied."""
        out: list[OutgoingRequest] = []
        for broker, states in sorted(self.leader_and_isr.items()):
            if ctx.is_live(broker):
                out.append(self._leader_and_isr(ctx, broker, states))
        if self.leader_and_isr or self.update_metadata_brokers:
            # Every partition whose leadership changed goes to every live broker.
            targets = self.update_metadata_brokers | (
                ctx.live_broker_ids if self.leader_and_isr else set()
            )
            for broker in sorted(targets):
                if ctx.is_live(broker):
                    out.append(self._update_metadata(ctx, broker))
        for broker, partitions in sorted(self.stop_replica.items()):
            if ctx.is_live(broker):
                out.append(self._stop_replica(ctx, broker, partitions))
        self.leader_and_isr = {}
        self.stop_replica = {}
        self.update_metadata_brokers = set()
        self.update_metadata_partitions = set()
        return out

    def _common(self, ctx: ControllerContext, broker: int) -> dict[str, Any]:
        return {
            "controller_id": self.controller_id,
            "controller_epoch": ctx.epoch,
            "broker_epoch": ctx.broker_epochs.get(broker, -1),
        }

    def _leader_and_isr(
        self,
        ctx: ControllerContext,
        broker: int,
        states: dict[TopicPartition, tuple[LeaderIsr, bool]],
    ) -> OutgoingRequest:
        topics: dict[str, list[dict[str, Any]]] = {}
        leaders: set[int] = set()
        for (topic, partition), (state, is_new) in sorted(states.items()):
            leaders.add(state.leader)
            replicas = ctx.assignment.get((topic, partition), ())
            adding, removing = ctx.reassigning.get((topic, partition), ((), ()))
            topics.setdefault(topic, []).append(
                {
                    "topic_name": topic,
                    "partition_index": partition,
                    "controller_epoch": state.controller_epoch,
                    "leader": state.leader,
                    "leader_epoch": state.leader_epoch,
                    "isr": state.isr,
                    "partition_epoch": state.zk_version,
                    "replicas": replicas,
                    "adding_replicas": adding,
                    "removing_replicas": removing,
                    "is_new": is_new,
                    "leader_recovery_state": state.leader_recovery_state,
                }
            )
        live_leaders = []
        for leader in sorted(leaders):
            endpoint = _endpoint(ctx, leader, self.listener)
            if endpoint is not None:
                live_leaders.append(
                    {"broker_id": leader, "host_name": endpoint.host, "port": endpoint.port}
                )
        values = self._common(ctx, broker) | {
            "topic_states": [
                {
                    "topic_name": topic,
                    "topic_id": _topic_id(ctx, topic),
                    "partition_states": partitions,
                }
                for topic, partitions in topics.items()
            ],
            "live_leaders": live_leaders,
        }
        cls = interbroker.request_class(interbroker.LEADER_AND_ISR, LEADER_AND_ISR_VERSION)
        return OutgoingRequest(
            broker, interbroker.LEADER_AND_ISR, LEADER_AND_ISR_VERSION, build(cls, values)
        )

    def _update_metadata(self, ctx: ControllerContext, broker: int) -> OutgoingRequest:
        topics: dict[str, list[dict[str, Any]]] = {}
        for topic, partition in sorted(self.update_metadata_partitions):
            state = ctx.leadership.get((topic, partition))
            if state is None:
                continue
            replicas = ctx.assignment.get((topic, partition), ())
            leader = LEADER_DURING_DELETE if topic in ctx.topics_to_delete else state.leader
            topics.setdefault(topic, []).append(
                {
                    "partition_index": partition,
                    "controller_epoch": state.controller_epoch,
                    "leader": leader,
                    "leader_epoch": state.leader_epoch,
                    "isr": state.isr,
                    "zk_version": state.zk_version,
                    "replicas": replicas,
                    "offline_replicas": [r for r in replicas if not ctx.is_live(r)],
                }
            )
        values = self._common(ctx, broker) | {
            "topic_states": [
                {"topic_name": t, "topic_id": _topic_id(ctx, t), "partition_states": p}
                for t, p in topics.items()
            ],
            "live_brokers": [
                {
                    "id_": registration.broker_id,
                    "endpoints": [
                        {
                            "port": e.port,
                            "host": e.host,
                            "listener": e.listener,
                            "security_protocol": SECURITY_PROTOCOL_IDS.get(e.security_protocol, 0),
                        }
                        for e in registration.endpoints
                    ],
                    "rack": registration.rack,
                }
                for _id, registration in sorted(ctx.live_brokers.items())
            ],
        }
        cls = interbroker.request_class(interbroker.UPDATE_METADATA, UPDATE_METADATA_VERSION)
        return OutgoingRequest(
            broker, interbroker.UPDATE_METADATA, UPDATE_METADATA_VERSION, build(cls, values)
        )

    def _stop_replica(
        self, ctx: ControllerContext, broker: int, partitions: dict[TopicPartition, bool]
    ) -> OutgoingRequest:
        topics: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition), delete in sorted(partitions.items()):
            state = ctx.leadership.get((topic, partition))
            # LeaderDuringDelete lets the broker skip its leader-epoch check while the topic
            # is deleted; a reassignment's removed replica gets the current leader epoch.
            deleting = delete and topic in ctx.topics_to_delete
            epoch = LEADER_DURING_DELETE if deleting else (state.leader_epoch if state else -1)
            topics.setdefault(topic, []).append(
                {"partition_index": partition, "leader_epoch": epoch, "delete_partition": delete}
            )
        values = self._common(ctx, broker) | {
            "topic_states": [{"topic_name": t, "partition_states": p} for t, p in topics.items()]
        }
        cls = interbroker.request_class(interbroker.STOP_REPLICA, STOP_REPLICA_VERSION)
        callback = self.stop_replica_callback if any(partitions.values()) else None
        return OutgoingRequest(
            broker, interbroker.STOP_REPLICA, STOP_REPLICA_VERSION, build(cls, values), callback
        )


def _topic_id(ctx: ControllerContext, topic: str) -> Any:
    topic_id = ctx.topic_ids.get(topic)
    return None if topic_id is None else parse_kafka_uuid(topic_id)


def _endpoint(ctx: ControllerContext, broker: int, listener: str | None = None) -> Any:
    registration = ctx.live_brokers.get(broker)
    if registration is None:
        return None
    if listener is not None:
        return next((e for e in registration.endpoints if e.listener == listener), None)
    plaintext = [e for e in registration.endpoints if e.security_protocol == "PLAINTEXT"]
    return (plaintext or list(registration.endpoints) or [None])[0]
