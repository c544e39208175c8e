"""ACLs in ZooKeeper, in Kafka's layout (ZkData.scala's ZkAclStore and ZkAclChangeStore).

* literal patterns: ``/kafka-acl/<ResourceType>/<name>``;
* prefixed patterns: ``/kafka-acl-extended/prefixed/<ResourceType>/<name>``;
* each znode holds ``{"version":1,"acls":[...]}`` and changes only by a write conditional
  on the version read (a conflict reads again and re-applies the change); a resource left
  without ACLs loses its znode;
* every change is announced with a sequential ``/kafka-acl-changes/acl_changes_<seq>``
  (literal: ``TOPIC:<name>``) or ``/kafka-acl-extended-changes/acl_changes_<seq>``
  (``{"version":1,"resourceType":"TOPIC","name":..,"patternType":"PREFIXED"}``). Every
  broker watches both and re-reads the resource each new notification names; those older
  than 15 minutes are deleted as newer ones are processed.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError

from odradek.cluster.acl_store import AclStore, Change, Entry, ResourceKey, decode_acls, encode_acls
from odradek.cluster.zk.errors import ZooKeeperError
from odradek.cluster.zk.paths import sequence_number
from odradek.cluster.zk.session import ZkSession

log = logging.getLogger(__name__)

LITERAL_ROOT = "/kafka-acl"
EXTENDED_ROOT = "/kafka-acl-extended"
LITERAL_CHANGES = "/kafka-acl-changes"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
_MAX_CONFLICTS = 50
# Notifications older than this are deleted by whichever broker processes a newer one
# (Kafka's ZkNodeChangeNotificationListener.changeExpirationMs).
CHANGE_EXPIRATION_MS = 15 * 60 * 1000

# Kafka's ResourceType enum names, for the legacy literal change notifications.
_ENUM_NAMES = {
    "Topic": "TOPIC",
    "Group": "GROUP",
    "Cluster": "CLUSTER",
    "TransactionalId": "TRANSACTIONAL_ID",
    "DelegationToken": "DELEGATION_TOKEN",
    "User": "USER",
}
_ZK_NAMES = {enum_name: zk_name for zk_name, enum_name in _ENUM_NAMES.items()}


def resource_path(key: ResourceKey) -> str:
    kind, pattern, name = key
    if pattern == "LITERAL":
        return f"{LITERAL_ROOT}/{kind}/{name}"
    return f"{EXTENDED_ROOT}/{pattern.lower()}/{kind}/{name}"


def encode_change(key: ResourceKey) -> tuple[str, bytes]:
    """The change path and notification body for a resource."""
    kind, pattern, name = key
    if pattern == "LITERAL":
        return LITERAL_CHANGES, f"{_ENUM_NAMES.get(kind, kind.upper())}:{name}".encode()
    body = {
        "version": 1,
        "resourceType": _ENUM_NAMES.get(kind, kind.upper()),
        "name": name,
        "patternType": pattern,
    }
    return EXTENDED_CHANGES, json.dumps(body).encode()


def decode_change(root: str, data: bytes) -> ResourceKey:
    text = data.decode()
    if root == LITERAL_CHANGES:
        kind, sep, name = text.partition(":")
        if not sep:
            raise ValueError(f"expected ResourceType:ResourceName, got {text!r}")
        return _zk_name(kind), "LITERAL", name
    doc = json.loads(text)
    return _zk_name(str(doc["resourceType"])), str(doc["patternType"]).upper(), str(doc["name"])


def _zk_name(kind: str) -> str:
    """``TOPIC`` (Kafka's enum name, as notifications carry it) or ``Topic`` -> ``Topic``."""
    return _ZK_NAMES.get(kind.upper(), kind)


class ZkAclStore(AclStore):
    def __init__(self, zk: ZkSession, change_expiration_ms: int = CHANGE_EXPIRATION_MS) -> None:
        self._zk = zk
        self._expiration_ms = change_expiration_ms
        self._stopped = threading.Event()
        self._seen: dict[str, int] = {}
        self._watch_lock = threading.Lock()

    # --- reading ---------------------------------------------------------------------

    def load(self, key: ResourceKey) -> frozenset[Entry]:
        found = self._zk._get(resource_path(key))
        return frozenset() if found is None else decode_acls(found[0])

    def load_all(self) -> dict[ResourceKey, frozenset[Entry]]:
        out: dict[ResourceKey, frozenset[Entry]] = {}
        roots = [(LITERAL_ROOT, "LITERAL")] + [
            (f"{EXTENDED_ROOT}/{pattern}", pattern.upper())
            for pattern in self._zk._children(EXTENDED_ROOT)
        ]
        for root, pattern in roots:
            for kind in self._zk._children(root):
                for name in self._zk._children(f"{root}/{kind}"):
                    key = (kind, pattern, name)
                    try:
                        entries = self.load(key)
                    except ValueError as exc:
                        log.error("ignoring %s: %s", resource_path(key), exc)
                        continue
                    if entries:
                        out[key] = entries
        return out

    # --- writing ---------------------------------------------------------------------

    def update(self, key: ResourceKey, change: Change) -> frozenset[Entry]:
        path = resource_path(key)
        kazoo = self._zk._zk
        for _ in range(_MAX_CONFLICTS):
            found = self._zk._get(path)
            before = frozenset() if found is None else decode_acls(found[0])
            after = frozenset(change(before))
            if after == before:
                return after
            try:
                if found is None:
                    self._zk._call(kazoo.create, path, encode_acls(after), makepath=True)
                elif after:
                    self._zk._call(kazoo.set, path, encode_acls(after), found[1].version)
                else:
                    self._zk._call(kazoo.delete, path, found[1].version)
            except (BadVersionError, NodeExistsError, NoNodeError, NotEmptyError):
                continue  # another writer got there first: read again
            self._notify(key)
            return after
        raise ZooKeeperError(f"{path}: gave up after {_MAX_CONFLICTS} conflicting updates")

    def _notify(self, key: ResourceKey) -> None:
        root, body = encode_change(key)
        self._zk._call(
            self._zk._zk.create, f"{root}/{CHANGE_PREFIX}", body, sequence=True, makepath=True
        )

    # --- change notifications ----------------------------------------------------------

    def watch(self, on_change: Callable[[ResourceKey], None]) -> None:
        """Notifications that exist now were written before our ``load_all`` and are
        skipped; each newer one reloads its resource via ``on_change``."""
        for root in (LITERAL_CHANGES, EXTENDED_CHANGES):
            self._zk._call(self._zk._zk.ensure_path, root)
            self._seen[root] = max(
                (sequence_number(c, CHANGE_PREFIX) for c in self._zk._children(root)),
                default=-1,
            )

            def changed(children: list[str], root: str = root) -> bool | None:
                if self._stopped.is_set():
                    return False
                self._process(root, children, on_change)
                return None

            self._zk._watch(self._zk._zk.ChildrenWatch, root, changed)

    def _process(
        self, root: str, children: list[str], on_change: Callable[[ResourceKey], None]
    ) -> None:
        with self._watch_lock:
            for child in sorted(children, key=lambda c: sequence_number(c, CHANGE_PREFIX)):
                sequence = sequence_number(child, CHANGE_PREFIX)
                if sequence <= self._seen.get(root, -1):
                    continue
                self._seen[root] = sequence
                try:
                    found = self._zk._get(f"{root}/{child}")
                    if found is not None:
                        on_change(decode_change(root, found[0]))
                except Exception:  # one bad notification must not stop the others
                    log.exception("processing ACL change %s/%s failed", root, child)
            self._purge(root, children)

    def _purge(self, root: str, children: list[str]) -> None:
        """Delete notifications older than the expiry (every broker has long seen them)."""
        cutoff = time.time() * 1000 - self._expiration_ms
        for child in children:
            try:
                found = self._zk._get(f"{root}/{child}")
                if found is not None and found[1].ctime < cutoff:
                    self._zk._call(self._zk._zk.delete, f"{root}/{child}", found[1].version)
            except (NoNodeError, BadVersionError):
                continue  # another broker purged it first
            except Exception:
                log.exception("purging ACL change %s/%s failed", root, child)

    def close(self) -> None:
        self._stopped.set()
