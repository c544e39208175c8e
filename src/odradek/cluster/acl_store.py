"""Where ACLs live: the store interface, Kafka's znode JSON, and the embedded local file.

A store knows ACLs only as strings, the way Kafka writes them in ZooKeeper, so it needs
nothing from the authorizer above it:

* a resource key is ``(resource type, pattern type, name)``: ``("Topic", "LITERAL", "t")``;
* an entry is ``(principal, host, operation, permission)``:
  ``("User:alice", "*", "Read", "Allow")``.

Each resource's entries are one document, ``{"version":1,"acls":[{"principal":..,
"permissionType":..,"operation":..,"host":..}]}`` (Kafka's ``AclEntry.toJsonCompatibleMap``),
changed only by ``update``, which applies a function to the current set and writes the
result conditionally (ZooKeeper: on the znode version, retrying on a conflict).

:class:`LocalAclStore` keeps every resource's document in ``<data_dir>/odradek-acls.json``,
rewritten atomically on each change, so ACLs survive restarts of the embedded broker.
The ZooKeeper store is :mod:`odradek.cluster.zk.acls`.
"""

from __future__ import annotations

import json
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from pathlib import Path

from odradek.cluster.metadata import MetadataError
from odradek.storage.checkpoint import atomic_write

__all__ = ["AclStore", "Entry", "LocalAclStore", "ResourceKey", "decode_acls", "encode_acls"]

ResourceKey = tuple[str, str, str]
Entry = tuple[str, str, str, str]
Change = Callable[[frozenset[Entry]], frozenset[Entry]]
Stored = frozenset[Entry]

ACL_FORMAT_VERSION = 1
FILE_NAME = "odradek-acls.json"


def encode_acls(entries: Iterable[Entry]) -> bytes:
    acls = [
        {"principal": p, "permissionType": perm, "operation": op, "host": host}
        for p, host, op, perm in sorted(entries)
    ]
    return json.dumps({"version": ACL_FORMAT_VERSION, "acls": acls}).encode()


def _entries_of(doc: object) -> frozenset[Entry]:
    if not isinstance(doc, dict) or doc.get("version") != ACL_FORMAT_VERSION:
        raise ValueError(f"expected an ACL document of version {ACL_FORMAT_VERSION}")
    return frozenset(
        (str(a["principal"]), str(a["host"]), str(a["operation"]), str(a["permissionType"]))
        for a in doc.get("acls", [])
    )


def decode_acls(data: bytes) -> frozenset[Entry]:
    """Kafka's resource znode; an empty znode is no ACLs. ``ValueError`` if malformed."""
    if not data:
        return frozenset()
    try:
        return _entries_of(json.loads(data))
    except (KeyError, TypeError, json.JSONDecodeError) as exc:
        raise ValueError(f"malformed ACL document: {exc}") from None


class AclStore(ABC):
    """Durable ACLs by resource. Calls block (run them in a thread on the event loop)."""

    @abstractmethod
    def load_all(self) -> dict[ResourceKey, frozenset[Entry]]: ...

    @abstractmethod
    def load(self, key: ResourceKey) -> frozenset[Entry]: ...

    @abstractmethod
    def update(self, key: ResourceKey, change: Change) -> frozenset[Entry]:
        """Apply ``change`` to the resource's entries atomically; return the new set."""

    def update_many(self, changes: dict[ResourceKey, Change]) -> dict[ResourceKey, Stored]:
        """``update`` of several resources; each is atomic on its own (as Kafka's znodes)."""
        return {key: self.update(key, change) for key, change in changes.items()}

    def watch(self, on_change: Callable[[ResourceKey], None]) -> None:  # noqa: B027
        """Call ``on_change(key)`` (from any thread) when another writer changed a
        resource. A single-writer store has nothing to report."""

    def close(self) -> None:  # noqa: B027
        """Stop watching."""


class LocalAclStore(AclStore):
    """The embedded broker's ACLs: one JSON file, atomically rewritten on every change."""

    def __init__(self, data_dir: Path) -> None:
        self._path = data_dir / FILE_NAME
        self._lock = threading.Lock()
        self._acls: dict[ResourceKey, frozenset[Entry]] = {}
        data_dir.mkdir(parents=True, exist_ok=True)
        if self._path.exists():
            self._read()

    def _read(self) -> None:
        try:
            doc = json.loads(self._path.read_text(encoding="utf-8"))
            if doc.get("version") != ACL_FORMAT_VERSION:
                raise ValueError(f"unsupported format version {doc.get('version')!r}")
            for item in doc["resources"]:
                key = (str(item["resourceType"]), str(item["patternType"]), str(item["name"]))
                self._acls[key] = _entries_of(item)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise MetadataError(
                "UNKNOWN_SERVER_ERROR", f"cannot read {self._path}: {exc}"
            ) from None

    def _write(self) -> None:
        resources = []
        for (kind, pattern, name), entries in sorted(self._acls.items()):
            doc = json.loads(encode_acls(entries))
            resources.append({"resourceType": kind, "patternType": pattern, "name": name, **doc})
        body = {"version": ACL_FORMAT_VERSION, "resources": resources}
        atomic_write(self._path, json.dumps(body, indent=1).encode())

    def load_all(self) -> dict[ResourceKey, frozenset[Entry]]:
        with self._lock:
            return dict(self._acls)

    def load(self, key: ResourceKey) -> frozenset[Entry]:
        with self._lock:
            return self._acls.get(key, frozenset())

    def update(self, key: ResourceKey, change: Change) -> frozenset[Entry]:
        return self.update_many({key: change})[key]

    def update_many(self, changes: dict[ResourceKey, Change]) -> dict[ResourceKey, Stored]:
        # One rewrite of the file for the lot: a CreateAcls of a thousand resources must
        # not cost a thousand fsyncs.
        with self._lock:
            out = {}
            changed = False
            for key, change in changes.items():
                before = self._acls.get(key, frozenset())
                after = out[key] = frozenset(change(before))
                if after == before:
                    continue
                changed = True
                if after:
                    self._acls[key] = after
                else:
                    self._acls.pop(key, None)
            if changed:
                self._write()
            return out
