"""``meta.properties``: which broker (and cluster) a log directory belongs to.

Kafka writes this file into every log directory the first time a broker starts on it
(``BrokerMetadataCheckpoint``, Java properties format) and checks it on every later
start. odradek writes Kafka's ZooKeeper-mode layout, version 0::

    #
    #<date>
    version=0
    broker.id=0
    cluster.id=Y3zx0Z5bS2yXv8rTuJ0mEg      <- only once the cluster id is known

At start-up a broker whose configured ``broker.id`` differs from the stored one refuses
to start (Kafka's InconsistentBrokerIdException), and so does one whose cluster id
differs from a stored ``cluster.id`` (InconsistentClusterIdException). A file without
``cluster.id`` gets it added when the cluster id becomes known, as Kafka does.

The cluster id is optional here on purpose: the caller decides which cluster id is
authoritative (the local metadata store today, ZooKeeper's ``/cluster/id`` later).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from odradek.storage.checkpoint import atomic_write

META_PROPERTIES = "meta.properties"
VERSION = 0  # Kafka's ZooKeeper-mode layout (version 1 is KRaft's, with node.id)


class MetaPropertiesError(Exception):
    """meta.properties cannot be read, or does not belong to this broker or cluster."""


class InconsistentBrokerIdError(MetaPropertiesError):
    pass


class InconsistentClusterIdError(MetaPropertiesError):
    pass


@dataclass(frozen=True)
class MetaProperties:
    broker_id: int
    cluster_id: str | None = None
    version: int = VERSION

    def to_text(self) -> str:
        # Java's Properties.store header: an empty comment line, then the date.
        lines = ["#", "#" + time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime())]
        lines.append(f"version={self.version}")
        lines.append(f"broker.id={self.broker_id}")
        if self.cluster_id:
            lines.append(f"cluster.id={self.cluster_id}")
        return "\n".join(lines) + "\n"


def parse(text: str, source: Path | str = META_PROPERTIES) -> MetaProperties:
    """Parse the properties text; unknown keys (node.id, directory.id) are ignored."""
    values: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        key, sep, value = line.partition("=")
        if not sep:
            key, _, value = line.partition(":")
        values[key.strip()] = value.strip()
    try:
        version = int(values["version"])
    except (KeyError, ValueError):
        raise MetaPropertiesError(f"{source}: missing or invalid version") from None
    if version != VERSION:
        raise MetaPropertiesError(
            f"{source}: version {version} is not supported (this broker writes version {VERSION})"
        )
    try:
        broker_id = int(values["broker.id"])
    except (KeyError, ValueError):
        raise MetaPropertiesError(f"{source}: missing or invalid broker.id") from None
    return MetaProperties(broker_id, values.get("cluster.id") or None, version)


def read(directory: Path) -> MetaProperties | None:
    """The directory's meta.properties, or None if it has none yet."""
    path = Path(directory) / META_PROPERTIES
    try:
        text = path.read_text(encoding="latin-1")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise MetaPropertiesError(f"cannot read {path}: {exc.strerror or exc}") from None
    return parse(text, path)


def write(directory: Path, meta: MetaProperties) -> None:
    """Replace the directory's meta.properties atomically."""
    atomic_write(Path(directory) / META_PROPERTIES, meta.to_text().encode("latin-1"))


def check_and_write(directory: Path, broker_id: int, cluster_id: str | None = None) -> None:
    """Check the stored identity against ours; write the file if absent or incomplete."""
    directory = Path(directory)
    stored = read(directory)
    if stored is None:
        write(directory, MetaProperties(broker_id, cluster_id))
        return
    if stored.broker_id != broker_id:
        raise InconsistentBrokerIdError(
            f"Configured broker.id {broker_id} doesn't match stored broker.id "
            f"{stored.broker_id} in meta.properties in {directory.absolute()}. If you moved "
            "your data, make sure your configured broker.id matches. If you intend to create "
            "a new broker, you should remove all data in your data directories (log.dirs)."
        )
    if cluster_id and stored.cluster_id and stored.cluster_id != cluster_id:
        raise InconsistentClusterIdError(
            f"The Cluster ID {cluster_id} doesn't match stored clusterId {stored.cluster_id} "
            f"in meta.properties in {directory.absolute()}. The broker is trying to join the "
            "wrong cluster."
        )
    if cluster_id and not stored.cluster_id:
        write(directory, MetaProperties(broker_id, cluster_id))
