"""Many partitions on the embedded broker: create, Metadata, restart, memory.

Run from the repository root: ``.venv/bin/python bench/bench_partitions.py`` (about a
minute; ``--partitions`` for the size of the restart and Metadata figures). One broker
subprocess in a temporary directory; every figure is printed with a baseline measured in
the same run (this machine is shared and noisy: the ratios mean more than the numbers):

1. **Create 1,000 partitions** (``--create``): CreateTopics answered, against the raw
   file-system work of the same layout (a directory, an empty ``.log`` and a
   ``partition.metadata`` per partition, and one fsync of the parent) done by this
   process in a scratch directory next to the broker's; alternately, until the broker
   has ``--partitions``, medians compared.
2. **Metadata for every topic** with ``--partitions`` partitions (topics of 1,000), v9,
   median of 20 on one connection once the answer is kept, and the first answer after a
   change; against a Metadata request naming no topic (what any request costs).
3. **Clean restart** with those partitions: SIGTERM to the first Metadata answer listing
   all of them from a new process, against the same for a broker with an empty data
   directory (the process start itself); the stop is timed too.
4. **RSS per idle partition**: the restarted broker's RSS minus the empty broker's,
   divided by the partitions.

``--acls`` measures only Metadata for every topic with ``--partitions`` partitions, on a
broker with the ACL authorizer (``authorizer.class.name``, ACLs in its data directory:
the PLAINTEXT principal ``User:ANONYMOUS`` may describe and create ``bench-*`` but not a
denied ``bench-hidden``, beside ``--other-acls`` ACLs of other users) against one without,
same run, alternating requests: the kept answer, and the first after each of ``--changes``
changes (a one-partition topic created); with ``--before-src`` a third broker, that checkout's with
the same ACLs, runs beside them (the answer built and filtered for every request before).

``--before-src DIR`` runs a second broker from another checkout's ``src`` (e.g. main's,
before a change) beside this one, interleaved step by step: its create and this one's
alternate with the raw baseline, and the restarts alternate (``--restarts`` each), so the
two sets of figures share the machine's load. The load average is printed at each step.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

from odradek.broker.security.acl import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclBinding,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)
from odradek.broker.security.authorizer import AclAuthorizer, AuthorizerSettings
from odradek.cluster.acl_store import LocalAclStore
from odradek.protocol.build import build_request
from odradek.protocol.codec import decode_response, encode_request

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.helpers.broker import BrokerProcess  # noqa: E402
from tests.helpers.raw import METADATA, RawClient  # noqa: E402

CREATE_TOPICS = 19


def create(client: RawClient, name: str, partitions: int) -> float:
    start = time.perf_counter()
    response = client.call(
        CREATE_TOPICS,
        5,
        {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1}],
         "timeout": 600_000},
    )  # fmt: skip
    took = time.perf_counter() - start
    error = response.topics[0].error_code  # type: ignore[attr-defined]
    if error != 0:
        raise SystemExit(f"creating {name} failed: error {error}")
    return took


def raw_layout(directory: Path, partitions: int) -> float:
    """The file-system floor of creating the partitions' files."""
    directory.mkdir()
    start = time.perf_counter()
    for i in range(partitions):
        path = f"{directory}/t-{i}"
        os.mkdir(path)
        os.close(os.open(f"{path}/00000000000000000000.log", os.O_CREAT | os.O_WRONLY, 0o644))
        fd = os.open(f"{path}/partition.metadata", os.O_CREAT | os.O_WRONLY, 0o644)
        os.write(fd, b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA\n")
        os.close(fd)
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    os.fsync(fd)
    os.close(fd)
    return time.perf_counter() - start


def metadata_request(client: RawClient, topics: list[str] | None) -> bytes:
    client.correlation += 1
    request = build_request(
        METADATA, 9, {"topics": None if topics is None else [{"name": t} for t in topics],
                      "allow_auto_topic_creation": False},
    )  # fmt: skip
    return encode_request(9, client.correlation, "bench", request)


def metadata_bytes(client: RawClient, topics: list[str] | None) -> tuple[float, bytes]:
    """Seconds from sending the request to the last byte of the answer (not decoded:
    decoding 10,000 partitions in Python costs the client far more than the broker)."""
    frame = metadata_request(client, topics)
    start = time.perf_counter()
    client.sock.sendall(frame)
    size = struct.unpack(">i", client.read(4))[0]
    payload = client.read(size)
    return time.perf_counter() - start, payload


def metadata_once(client: RawClient, topics: list[str] | None) -> tuple[float, int]:
    took, payload = metadata_bytes(client, topics)
    _, response = decode_response(METADATA, 9, payload)
    return took, sum(len(t.partitions) for t in response.topics)  # type: ignore[attr-defined]


def metadata_median(client: RawClient, topics: list[str] | None, requests: int) -> float:
    return statistics.median(metadata_bytes(client, topics)[0] for _ in range(requests))


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def start_until_listed(broker: BrokerProcess, expected: int, timeout_s: float) -> float:
    """Start the broker; seconds until a Metadata answer lists ``expected`` partitions."""
    start = time.perf_counter()
    broker.start()
    client = RawClient(broker.port)
    client.sock.settimeout(timeout_s)
    while True:
        _, listed = metadata_once(client, None)
        if listed >= expected:
            return time.perf_counter() - start
        if time.perf_counter() - start > timeout_s:
            raise SystemExit(f"only {listed} of {expected} partitions listed after restart")
        time.sleep(0.01)


def load() -> str:
    return "load " + " ".join(f"{x:.1f}" for x in os.getloadavg())


@contextlib.contextmanager
def source(src: str | None):
    """Brokers started inside run from ``src`` (PYTHONPATH), or from this checkout."""
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = src or str(REPO / "src")
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


def compare(args: argparse.Namespace) -> None:
    """This checkout against ``--before-src``, interleaved step by step."""
    names = {"before": args.before_src, "after": None}
    with tempfile.TemporaryDirectory(prefix="bench-partitions-") as tmp:
        root = Path(tmp)
        print(load())
        empty_start: dict[str, list[float]] = {"before": [], "after": []}
        empty_rss: dict[str, int] = {}
        for _ in range(args.restarts):
            for name, src in names.items():
                empty = BrokerProcess(root / f"empty-{name}")
                with source(src):
                    empty_start[name].append(start_until_listed(empty, 0, 60))
                time.sleep(0.5)
                empty_rss[name] = rss_kib(empty.proc.pid)  # type: ignore[union-attr]
                empty.stop()
        brokers, clients = {}, {}
        for name, src in names.items():
            with source(src):
                brokers[name] = BrokerProcess(root / f"data-{name}").start()
            clients[name] = RawClient(brokers[name].port)
            clients[name].sock.settimeout(600)
            metadata_once(clients[name], [])
        created: dict[str, list[float]] = {"before": [], "after": []}
        raw: list[float] = []
        index = 0
        while index * args.create < args.partitions:
            order = list(names) if index % 2 == 0 else list(reversed(names))
            for name in order:
                created[name].append(create(clients[name], f"bench-{index}", args.create))
            raw.append(raw_layout(root / f"raw-{index}", args.create))
            index += 1
            print(f"  create {index}: before {created['before'][-1]:.3f} s, after "
                  f"{created['after'][-1]:.3f} s, raw {raw[-1]:.3f} s; {load()}")  # fmt: skip
        floor = statistics.median(raw)
        for name in names:
            ours = statistics.median(created[name])
            print(f"{name}: create {args.create:,} partitions, median of {index}: {ours:.3f} s "
                  f"(best {min(created[name]):.3f} s); raw {floor:.3f} s; ratio "
                  f"{ours / floor:.2f}")  # fmt: skip
        listed = 0
        for name in names:
            first, listed = metadata_once(clients[name], None)
            kept = metadata_median(clients[name], None, args.requests)
            print(f"{name}: Metadata for {listed:,} partitions: first {first * 1000:.1f} ms, "
                  f"kept median {kept * 1000:.2f} ms")  # fmt: skip
        restarts: dict[str, list[float]] = {"before": [], "after": []}
        stops: dict[str, list[float]] = {"before": [], "after": []}
        rss: dict[str, int] = {}
        for name in names:
            start = time.perf_counter()
            brokers[name].stop(timeout=600)
            stops[name].append(time.perf_counter() - start)
        for round_ in range(args.restarts):
            order = list(names) if round_ % 2 == 0 else list(reversed(names))
            for name in order:
                with source(names[name]):
                    restarts[name].append(start_until_listed(brokers[name], listed, 600))
                time.sleep(0.5)
                rss[name] = rss_kib(brokers[name].proc.pid)  # type: ignore[union-attr]
                start = time.perf_counter()
                brokers[name].stop(timeout=600)
                stops[name].append(time.perf_counter() - start)
            print(f"  restart {round_ + 1}: before {restarts['before'][-1]:.2f} s, after "
                  f"{restarts['after'][-1]:.2f} s; {load()}")  # fmt: skip
        for name in names:
            ours, base = statistics.median(restarts[name]), statistics.median(empty_start[name])
            every = ", ".join(f"{x:.2f}" for x in restarts[name])
            stopped = ", ".join(f"{x:.2f}" for x in stops[name])
            print(f"{name}: clean restart with {listed:,} partitions, median of "
                  f"{args.restarts}: {ours:.2f} s (all: {every}); empty broker {base:.2f} s; "
                  f"ratio {ours / base:.2f}, +{ours - base:.2f} s; stops {stopped} s")  # fmt: skip
            per = (rss[name] - empty_rss[name]) * 1024 / listed
            print(f"{name}: RSS {rss[name] / 1024:.1f} MiB with {listed:,} idle partitions, "
                  f"empty {empty_rss[name] / 1024:.1f} MiB: {per / 1024:.2f} KiB each")  # fmt: skip
        print(load())


def write_acls(data_dir: Path, others: int) -> None:
    """The ACLs of the ``--acls`` broker, written to its store before it starts."""
    def acl(principal: str, kind: ResourceType, name: str, op: Operation,
            pattern: PatternType = PatternType.LITERAL,
            permission: Permission = Permission.ALLOW) -> AclBinding:  # fmt: skip
        entry = AccessControlEntry(principal, "*", op, permission)
        return AclBinding(ResourcePattern(kind, name, pattern), entry)

    me, topic, prefixed = "User:ANONYMOUS", ResourceType.TOPIC, PatternType.PREFIXED
    bindings = [
        acl(me, topic, "bench-", Operation.DESCRIBE, prefixed),
        acl(me, topic, "bench-", Operation.CREATE, prefixed),
        acl(me, topic, "bench-hidden", Operation.DESCRIBE, permission=Permission.DENY),
        acl(me, ResourceType.CLUSTER, CLUSTER_NAME, Operation.DESCRIBE),
    ]
    for i in range(others):
        bindings.append(acl(f"User:u{i}", topic, f"team{i}-", Operation.READ, prefixed))
        bindings.append(acl(f"User:u{i}", topic, f"t{i}", Operation.WRITE))
    authorizer = AclAuthorizer(LocalAclStore(data_dir), AuthorizerSettings(frozenset()))
    authorizer.start()
    authorizer.create(bindings)
    authorizer.close()


def acls(args: argparse.Namespace) -> None:
    """Metadata for every topic under the ACL authorizer against none, same run."""
    authorizer = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                  "super.users": "User:admin"}  # fmt: skip
    setups = {"no authorizer": (None, {}), "ACL authorizer": (None, authorizer)}
    if args.before_src:
        setups["ACL authorizer, before"] = (args.before_src, authorizer)
    with tempfile.TemporaryDirectory(prefix="bench-partitions-") as tmp:
        root = Path(tmp)
        brokers, clients = {}, {}
        for i, (name, (src, overrides)) in enumerate(setups.items()):
            data = root / f"data-{i}"
            if overrides:
                write_acls(data, args.other_acls)
            with source(src):
                brokers[name] = BrokerProcess(data, overrides=overrides).start()
            clients[name] = RawClient(brokers[name].port)
            clients[name].sock.settimeout(600)
        try:
            index = 0
            while index * args.create < args.partitions:
                for name in setups:
                    create(clients[name], f"bench-{index}", args.create)
                index += 1
            for name in setups:
                create(clients[name], "bench-hidden", 1)
            print(f"{load()}; {args.other_acls * 2 + 4} ACLs")
            first, kept = {}, {name: [] for name in setups}
            listed = {}
            for name in setups:
                first[name], listed[name] = metadata_once(clients[name], None)
            for _ in range(args.requests):  # alternating: the brokers share the load
                for name in setups:
                    kept[name].append(metadata_bytes(clients[name], None)[0])
            # A change (a one-partition topic), then the first answer after it, per round.
            changed: dict[str, list[float]] = {name: [] for name in setups}
            for round_ in range(args.changes):
                for name in setups:
                    create(clients[name], f"bench-change-{round_}", 1)
                    changed[name].append(metadata_once(clients[name], None)[0])
            base = statistics.median(kept["no authorizer"])
            base_changed = statistics.median(changed["no authorizer"])
            for name in setups:
                ours, after = statistics.median(kept[name]), statistics.median(changed[name])
                print(f"{name}: Metadata v9 for all {listed[name]:,} partitions: first "
                      f"{first[name] * 1000:.1f} ms, kept median of {args.requests} "
                      f"{ours * 1000:.2f} ms (ratio to none {ours / base:.2f}); first after a "
                      f"change, median of {args.changes}: {after * 1000:.1f} ms (ratio "
                      f"{after / base_changed:.2f})")  # fmt: skip
            if any(listed[n] != listed["no authorizer"] - 1 for n in setups if "ACL" in n):
                raise SystemExit("an authorizer did not hide bench-hidden")
            print(load())
        finally:
            for broker in brokers.values():
                broker.stop(timeout=600)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--create", type=int, default=1000, help="partitions of the timed create")
    parser.add_argument("--partitions", type=int, default=10_000,
                        help="partitions for the Metadata, restart and RSS figures")  # fmt: skip
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--before-src", help="also run a broker from this src dir, interleaved")
    parser.add_argument("--restarts", type=int, default=3, help="restarts each (--before-src)")
    parser.add_argument("--acls", action="store_true",
                        help="only Metadata, with the ACL authorizer vs without")  # fmt: skip
    parser.add_argument("--changes", type=int, default=5, help="--acls: changes measured")
    parser.add_argument("--other-acls", type=int, default=100,
                        help="--acls: pairs of ACLs of other users")  # fmt: skip
    args = parser.parse_args()
    if args.acls:
        acls(args)
        return
    if args.before_src:
        compare(args)
        return
    with tempfile.TemporaryDirectory(prefix="bench-partitions-") as tmp:
        root = Path(tmp)
        # The empty broker: process start and RSS baseline.
        empty = BrokerProcess(root / "empty")
        empty_start = start_until_listed(empty, 0, 60)
        time.sleep(1)
        empty_rss = rss_kib(empty.proc.pid)  # type: ignore[union-attr]
        empty.stop()

        broker = BrokerProcess(root / "data").start()
        client = RawClient(broker.port)
        client.sock.settimeout(600)
        metadata_once(client, [])
        # Topics of --create partitions until --partitions, each followed by the raw
        # layout of as many: the disk's speed swings by 10x from minute to minute here,
        # so the two alternate and the medians are compared.
        created, raw = [], []
        index = 0
        while index * args.create < args.partitions:
            created.append(create(client, f"bench-{index}", args.create))
            raw.append(raw_layout(root / f"raw-{index}", args.create))
            index += 1
        ours, floor = statistics.median(created), statistics.median(raw)
        print(f"create {args.create:,} partitions, median of {index}: {ours:.3f} s (best "
              f"{min(created):.3f} s); raw file-system work of the same files "
              f"{floor:.3f} s (best {min(raw):.3f} s); ratio {ours / floor:.2f}")  # fmt: skip
        first, listed = metadata_once(client, None)
        kept = metadata_median(client, None, args.requests)
        empty_request = metadata_median(client, [], args.requests)
        print(f"Metadata v9 for all {listed:,} partitions: first answer {first * 1000:.1f} ms, "
              f"kept answer median {kept * 1000:.2f} ms; naming no topic "
              f"{empty_request * 1000:.2f} ms; ratio {kept / empty_request:.2f}")  # fmt: skip

        start = time.perf_counter()
        broker.stop(timeout=600)
        stop = time.perf_counter() - start
        restart = start_until_listed(broker, listed, 600)
        time.sleep(1)
        rss = rss_kib(broker.proc.pid)  # type: ignore[union-attr]
        broker.stop(timeout=600)
        print(f"clean restart with {listed:,} partitions: {restart:.2f} s to the first full "
              f"Metadata answer; empty broker {empty_start:.2f} s; ratio "
              f"{restart / empty_start:.2f} (the stop before it took {stop:.2f} s)")  # fmt: skip
        per = (rss - empty_rss) * 1024 / listed
        print(f"RSS: {rss / 1024:.1f} MiB with {listed:,} idle partitions, empty broker "
              f"{empty_rss / 1024:.1f} MiB: {per / 1024:.2f} KiB per partition")  # fmt: skip


if __name__ == "__main__":
    main()
