"""Kafka's ZooKeeper layout: every znode path a ZooKeeper-mode Kafka cluster uses.

Mirrors the ``path`` members of Kafka 3.x's ``core/src/main/scala/kafka/zk/ZkData.scala``
so an odradek cluster and Kafka's tools see the same tree. All paths are relative to the
chroot of ``zookeeper.connect`` (``host:port[,host:port...][/chroot]``), which kazoo
prefixes itself; :func:`parse_connect` splits it off.
"""

from __future__ import annotations

from dataclasses import dataclass

BROKERS = "/brokers"
BROKER_IDS = "/brokers/ids"
BROKER_SEQUENCE_ID = "/brokers/seqid"
TOPICS = "/brokers/topics"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
CONFIG = "/config"
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
ADMIN = "/admin"
DELETE_TOPICS = "/admin/delete_topics"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
ISR_CHANGE_NOTIFICATION = "/isr_change_notification"
ISR_CHANGE_PREFIX = "isr_change_"
LOG_DIR_EVENT_NOTIFICATION = "/log_dir_event_notification"
LATEST_PRODUCER_ID_BLOCK = "/latest_producer_id_block"
CONSUMERS = "/consumers"  # the old consumer's path; Kafka still creates it
CLUSTER = "/cluster"
CLUSTER_ID = "/cluster/id"

# Kafka's ConfigType.ALL: the entity types under /config.
CONFIG_TYPE_TOPIC = "topics"
CONFIG_TYPE_CLIENT = "clients"
CONFIG_TYPE_USER = "users"
CONFIG_TYPE_BROKER = "brokers"
CONFIG_TYPE_IP = "ips"
CONFIG_TYPES = (
    CONFIG_TYPE_TOPIC,
    CONFIG_TYPE_CLIENT,
    CONFIG_TYPE_USER,
    CONFIG_TYPE_BROKER,
    CONFIG_TYPE_IP,
)

# What Kafka creates at startup (ZkData.PersistentZkPaths), in its order.
PERSISTENT_PATHS = (
    CONSUMERS,
    BROKER_IDS,
    TOPICS,
    CONFIG_CHANGES,
    DELETE_TOPICS,
    BROKER_SEQUENCE_ID,
    ISR_CHANGE_NOTIFICATION,
    LATEST_PRODUCER_ID_BLOCK,
    LOG_DIR_EVENT_NOTIFICATION,
    *(f"{CONFIG}/{entity_type}" for entity_type in CONFIG_TYPES),
)


def broker_id(broker: int) -> str:
    return f"{BROKER_IDS}/{broker}"


def topic(name: str) -> str:
    return f"{TOPICS}/{name}"


def topic_partitions(name: str) -> str:
    return f"{TOPICS}/{name}/partitions"


def topic_partition(name: str, partition: int) -> str:
    return f"{TOPICS}/{name}/partitions/{partition}"


def partition_state(name: str, partition: int) -> str:
    return f"{TOPICS}/{name}/partitions/{partition}/state"


def config_entity_type(entity_type: str) -> str:
    return f"{CONFIG}/{entity_type}"


def config_entity(entity_type: str, entity_name: str) -> str:
    return f"{CONFIG}/{entity_type}/{entity_name}"


def topic_config(name: str) -> str:
    return config_entity(CONFIG_TYPE_TOPIC, name)


def broker_config(broker: int | str) -> str:
    """``/config/brokers/<id>``; ``<default>`` holds the cluster-wide defaults."""
    return config_entity(CONFIG_TYPE_BROKER, str(broker))


def config_change_prefix() -> str:
    """What a sequential create under /config/changes is given; ZooKeeper appends 10 digits."""
    return f"{CONFIG_CHANGES}/{CONFIG_CHANGE_PREFIX}"


def config_change(sequence: int | str) -> str:
    return f"{CONFIG_CHANGES}/{CONFIG_CHANGE_PREFIX}{_sequence(sequence)}"


def delete_topic(name: str) -> str:
    return f"{DELETE_TOPICS}/{name}"


def isr_change_prefix() -> str:
    return f"{ISR_CHANGE_NOTIFICATION}/{ISR_CHANGE_PREFIX}"


def isr_change(sequence: int | str) -> str:
    return f"{ISR_CHANGE_NOTIFICATION}/{ISR_CHANGE_PREFIX}{_sequence(sequence)}"


def sequence_number(path: str, prefix: str) -> int:
    """The number ZooKeeper appended to a sequential node (``config_change_0000000007`` -> 7)."""
    name = path.rsplit("/", 1)[-1]
    if not name.startswith(prefix) or not name[len(prefix) :].isdigit():
        raise ValueError(f"{path!r} is not a {prefix}<sequence> node")
    return int(name[len(prefix) :])


def _sequence(sequence: int | str) -> str:
    # ZooKeeper formats sequence numbers as 10 digits, zero padded.
    return f"{int(sequence):010d}" if isinstance(sequence, int) else sequence


class InvalidConnectString(ValueError):
    """``zookeeper.connect`` is not ``host:port[,host:port...][/chroot]``."""


@dataclass(frozen=True, slots=True)
class ConnectString:
    hosts: str  # "host:port,host:port", as kazoo takes it
    chroot: str  # "" or "/a/b"

    def __str__(self) -> str:
        return self.hosts + self.chroot


def parse_connect(value: str) -> ConnectString:
    """Split ``zookeeper.connect`` into its server list and chroot, checking both.

    As in ZooKeeper's ConnectStringParser, the chroot starts at the first ``/`` and is
    an absolute path without a trailing ``/``; a bare ``/`` means no chroot. A server
    without a port gets ZooKeeper's default 2181.
    """
    text = value.strip()
    if not text:
        raise InvalidConnectString("zookeeper.connect is empty")
    hosts_part, slash, chroot_part = text.partition("/")
    chroot = ""
    if slash and chroot_part:
        chroot = "/" + chroot_part
        if chroot.endswith("/") or "//" in chroot:
            raise InvalidConnectString(f"invalid chroot {chroot!r} in zookeeper.connect")
        if any(segment in (".", "..") for segment in chroot.split("/")[1:]):
            raise InvalidConnectString(f"invalid chroot {chroot!r} in zookeeper.connect")
    servers = []
    for server in hosts_part.split(","):
        server = server.strip()
        if not server:
            raise InvalidConnectString(f"empty server in zookeeper.connect {value!r}")
        host, colon, port = server.rpartition(":")
        if not colon or server.endswith("]"):
            host, port = server, "2181"  # no port given: ZooKeeper's default
        if ":" in host and not (host.startswith("[") and host.endswith("]")):
            raise InvalidConnectString(f"IPv6 address {host!r} needs brackets ([::1]:2181)")
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise InvalidConnectString(f"invalid port in zookeeper.connect server {server!r}")
        if not host:
            raise InvalidConnectString(f"missing host in zookeeper.connect server {server!r}")
        servers.append(f"{host}:{port}")
    return ConnectString(",".join(servers), chroot)
