"""Jepsen-style fault injection for a ZooKeeper cluster of broker subprocesses.

- :class:`Firewall` is one nftables table (``inet odradek_faults_<name>``) with an output
  chain; each cut is a set of ``drop`` rules, and the table is deleted by ``close()``
  (use it as a context manager so a failing test deletes it too).
- :class:`FaultyCluster` runs broker ``i`` on the loopback alias ``127.0.0.{i+1}`` under
  the group id ``GID_BASE + i`` (``setpriv --regid``, as root). Every socket a broker
  opens (to other brokers and to ZooKeeper on 127.0.0.1) carries that group id, so
  ``meta skgid G ip daddr D`` drops exactly one broker's traffic to one destination,
  whichever source address the kernel picked (an unbound socket leaves from 127.0.0.1).
  The test process (clients, checker) keeps group 0 and always reaches every broker, as
  Jepsen's clients do.
- :class:`Nemesis` draws faults from a seeded RNG and applies them one at a time:
  ``kill`` (SIGKILL, restart later), ``pause`` (SIGSTOP then SIGCONT, short or past the
  ZooKeeper session timeout), ``partition`` (two brokers cut from each other),
  ``isolate`` (one broker cut from every other broker and ZooKeeper) and ``zk-isolate``
  (one broker cut from ZooKeeper only). Opt-in (not in :data:`KINDS`): ``disk-full``
  (the broker's own tmpfs filled, so it halts on its next write; needs
  ``FaultyCluster(disk_size=...)``). Each applied fault is logged with its time, so a
  failing run prints its seed and schedule.
- :class:`Workload` runs idempotent acks=all confluent-kafka producers and a reader while
  faults happen, recording everything in a :class:`tests.helpers.checker.History`;
  :func:`read_all` reads the log back after healing.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from tests.helpers.broker import BrokerProcess
from tests.helpers.checker import History, Readback, Record, Write
from tests.helpers.cluster import SESSION_TIMEOUT_MS, BrokerCluster, wait_for
from tests.helpers.disks import TmpfsUnavailable, fill, mount_tmpfs, unmount

GID_BASE = 47000  # broker i runs as group GID_BASE + i
KINDS = ("kill", "pause", "partition", "isolate", "zk-isolate")  # the default mix
# Every kind the Nemesis knows: disk-full only where asked for, since it needs each
# broker's data directory on a tmpfs of its own (root, FaultyCluster(disk_size=...)).
ALL_KINDS = (*KINDS, "disk-full")
DISK_SIZE = "128m"  # each broker's tmpfs for disk-full: hours of a campaign's writes
FILLER = "filler"  # the file that fills a broker's tmpfs, beside its data directory
RESTART_TIMEOUT_S = 120.0  # a killed broker's restart, until it listens
# The campaign's brokers: the ISR shrinks within a fault's duration, so shrinking and
# expanding are exercised too, and high watermarks are checkpointed often, so a killed
# broker restarts with a recent one.
CAMPAIGN_BROKER_SETTINGS = {
    "replica.lag.time.max.ms": "5000",
    "replica.socket.timeout.ms": "5000",
    "replica.high.watermark.checkpoint.interval.ms": "200",
}


def nft_unusable_reason() -> str | None:
    """Why nftables cannot be used here (None when it can): the tests skip with it."""
    if shutil.which("nft") is None:
        return "nft not installed (apt-get install nftables)"
    if shutil.which("setpriv") is None:
        return "setpriv not installed (util-linux)"
    if os.geteuid() != 0:
        return "fault injection needs root (nftables rules, setpriv --regid)"
    probe = f"odradek_probe_{os.getpid()}"
    made = subprocess.run(["nft", "add", "table", "inet", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"nft cannot create a table: {made.stderr.strip()}"
    subprocess.run(["nft", "delete", "table", "inet", probe], capture_output=True)
    return None


class Firewall:
    """One nftables table of drop rules on the output hook; ``close()`` deletes it."""

    def __init__(self, name: str) -> None:
        self.table = f"odradek_faults_{name}"[:60]
        self.rules: dict[str, list[str]] = {}  # cut name -> rule expressions
        subprocess.run(["nft", "delete", "table", "inet", self.table], capture_output=True)
        self._nft(
            f"table inet {self.table} {{\n chain out {{\n"
            "  type filter hook output priority 0; policy accept;\n }\n}\n"
        )

    def _nft(self, script: str) -> None:
        done = subprocess.run(["nft", "-f", "-"], input=script, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"nft failed: {done.stderr.strip()}\n{script}")

    def _apply(self) -> None:
        """Replace the chain's rules with the active cuts, atomically (one nft script)."""
        lines = [f"flush chain inet {self.table} out"]
        for exprs in self.rules.values():
            lines += [f"add rule inet {self.table} out {expr} drop" for expr in exprs]
        self._nft("\n".join(lines) + "\n")

    def cut(self, name: str, exprs: list[str]) -> None:
        self.rules[name] = exprs
        self._apply()

    def heal(self, name: str | None = None) -> None:
        """Remove one cut, or every cut."""
        if name is None:
            self.rules.clear()
        else:
            self.rules.pop(name, None)
        self._apply()

    def close(self) -> None:
        self.rules.clear()
        subprocess.run(["nft", "delete", "table", "inet", self.table], capture_output=True)

    def __enter__(self) -> Firewall:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class FaultyCluster(BrokerCluster):
    """A :class:`BrokerCluster` whose brokers can be cut off: broker i on 127.0.0.{i+1},
    running under group ``GID_BASE + i``.

    With ``disk_size`` (e.g. ``"128m"``), broker i's data directory is ``data`` on a
    tmpfs of that size of its own, mounted at ``tmp_path/disk-<i>`` (root only: raises
    :class:`tests.helpers.disks.TmpfsUnavailable` otherwise) and unmounted by
    ``close()``; its log file stays in ``tmp_path``, so the halt is logged."""

    def __init__(
        self,
        tmp_path: Path,
        zk_connect: str,
        size: int = 3,
        overrides: dict[str, str] | None = None,
        disk_size: str | None = None,
    ) -> None:
        super().__init__(tmp_path, zk_connect, size, overrides)
        self.disks: dict[int, Path] = {}  # broker id -> its tmpfs mount point
        if disk_size is not None:
            try:
                for broker_id in self.brokers:
                    disk = tmp_path / f"disk-{broker_id}"
                    mount_tmpfs(disk, disk_size)
                    self.disks[broker_id] = disk
                    self.brokers[broker_id].data_dir = disk / "data"
            except BaseException:
                self.zk.close()
                self._unmount()
                raise
        hosts, _, _ = zk_connect.partition("/")
        self.zk_host, _, zk_port = hosts.split(",")[0].rpartition(":")
        self.zk_port = int(zk_port)
        for broker_id, plain in list(self.brokers.items()):
            host = f"127.0.0.{broker_id + 1}"
            self.brokers[broker_id] = BrokerProcess(
                plain.data_dir,
                overrides=plain.overrides,
                log_path=plain.log_path,
                host=host,
                wrapper=["setpriv", f"--regid={self.gid(broker_id)}", "--clear-groups"],
            )
            broker = self.brokers[broker_id]
            broker.overrides["listeners"] = f"PLAINTEXT://{host}:{broker.port}"

    @staticmethod
    def gid(broker_id: int) -> int:
        return GID_BASE + broker_id

    def host(self, broker_id: int) -> str:
        return self.brokers[broker_id].host

    def pid(self, broker_id: int) -> int:
        proc = self.brokers[broker_id].proc
        assert proc is not None
        return proc.pid

    # --- full disks ---------------------------------------------------------------------

    def fill_disk(self, broker_id: int) -> None:
        """Fill broker ``broker_id``'s tmpfs: its next append (as leader or follower)
        fails with ENOSPC and the broker halts."""
        if broker_id not in self.disks:
            raise ValueError("disk-full needs FaultyCluster(disk_size=...): no tmpfs here")
        fill(self.disks[broker_id] / FILLER)

    def free_disk(self, broker_id: int) -> None:
        if broker_id in self.disks:
            (self.disks[broker_id] / FILLER).unlink(missing_ok=True)

    def _unmount(self) -> None:
        for disk in self.disks.values():
            unmount(disk)
        self.disks.clear()

    def close(self, keep_disks: Path | None = None) -> None:
        """Stop the brokers, then unmount their disks; ``keep_disks``: copy each disk's
        data there first (``disk-<i>``, without the filler), as evidence of a failed run."""
        try:
            super().close()
            if keep_disks is not None:
                for disk in self.disks.values():
                    shutil.copytree(
                        disk, keep_disks / disk.name, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns(FILLER),
                    )  # fmt: skip
        finally:
            self._unmount()  # after the brokers stopped: nothing holds the tmpfs then

    # --- the rules of each kind of cut -----------------------------------------------

    def rules_between(self, a: int, b: int) -> list[str]:
        """Both directions between two brokers (each one's listener)."""
        return [
            f"meta skgid {self.gid(a)} ip daddr {self.host(b)} tcp dport {self.brokers[b].port}",
            f"meta skgid {self.gid(b)} ip daddr {self.host(a)} tcp dport {self.brokers[a].port}",
        ]

    def rules_to_zookeeper(self, broker_id: int) -> list[str]:
        return [
            f"meta skgid {self.gid(broker_id)} ip daddr {self.zk_host} tcp dport {self.zk_port}"
        ]

    def rules_isolating(self, broker_id: int) -> list[str]:
        exprs = self.rules_to_zookeeper(broker_id)
        for other in self.brokers:
            if other != broker_id:
                exprs += self.rules_between(broker_id, other)
        return exprs

    def restart(self, broker_id: int) -> None:
        """Start a killed broker again once ZooKeeper has expired its old session: like
        Kafka's, a broker whose id is still registered by another session refuses to
        start (NodeExistsException)."""
        wait_for(
            lambda: broker_id not in self.zk.get_broker_ids(),
            SESSION_TIMEOUT_MS / 1000 * 3,
            f"broker {broker_id}'s old registration to expire",
            interval=0.2,
        )
        # Generous: on two cores loaded past 15 (a long campaign beside other tests) a
        # start-up took over 30 s, and the failed restart ended the campaign early.
        self.brokers[broker_id].start(timeout=RESTART_TIMEOUT_S)

    # --- reading ZooKeeper ----------------------------------------------------------

    def partition_state(self, topic: str, partition: int) -> Any:
        found = self.zk.get_partition_state(topic, partition)
        if found is None:
            return None
        return found[0] if isinstance(found, tuple) else found

    def leader_of(self, topic: str, partition: int) -> int | None:
        """The partition's leader as ZooKeeper has it, if it is one of this cluster's."""
        state = self.partition_state(topic, partition)
        return state.leader if state is not None and state.leader in self.brokers else None

    def wait_fully_replicated(self, topic: str, partitions: int, timeout: float) -> bool:
        """Every partition has a leader and every replica in its ISR (False on timeout)."""
        everyone = tuple(sorted(self.brokers))

        def settled() -> bool:
            for p in range(partitions):
                state = self.partition_state(topic, p)
                if state is None or state.leader < 0 or tuple(sorted(state.isr)) != everyone:
                    return False
            return True

        try:
            wait_for(settled, timeout, f"{topic} fully replicated", interval=0.5)
            return True
        except AssertionError:
            return False



@contextlib.contextmanager
def jepsen_firewall(name: str) -> Iterator[Firewall]:
    """A Firewall of its own for a test (named after it and this process), or
    pytest.skip where nftables cannot be used."""
    reason = nft_unusable_reason()
    if reason is not None:
        pytest.skip(reason)
    with Firewall(f"{os.getpid()}_{name[:30]}") as firewall:
        yield firewall


@contextlib.contextmanager
def jepsen_cluster(
    tmp_path: Path,
    zk_connect: str,
    name: str,
    settings: dict[str, str],
    *,
    disk_size: str | None = None,
) -> Iterator[tuple[FaultyCluster, Firewall]]:
    """A started three-broker FaultyCluster and the Firewall that cuts it, for a Jepsen
    test's fixture: skipped (pytest.skip) where nftables or a tmpfs cannot be used; the
    firewall is healed (a cut broker cannot stop cleanly) and the cluster closed after,
    also after a failure."""
    with jepsen_firewall(name) as firewall:
        try:
            cluster = FaultyCluster(tmp_path, zk_connect, 3, settings, disk_size=disk_size)
        except TmpfsUnavailable as exc:
            pytest.skip(str(exc))
        try:
            cluster.start()
            yield cluster, firewall
        finally:
            firewall.heal()
            cluster.close()  # unmounts a tmpfs too

@dataclass
class Fault:
    kind: str
    targets: tuple[int, ...]
    duration: float
    started: float = 0.0  # seconds since the run began
    healed: float = 0.0  # seconds since the run began, once healed (a restart included)
    rule_name: str = ""  # its nftables cut
    # disk-full: the broker's exit status when healed (None: it was still running, its
    # disk freed before it wrote)
    exit_status: int | None = None

    def __str__(self) -> str:
        who = "-".join(str(t) for t in self.targets)
        line = f"t={self.started:6.1f}s {self.kind:<10} {who:<5} for {self.duration:4.1f}s"
        if self.kind == "disk-full" and self.healed:
            halted = "still running" if self.exit_status is None else f"{self.exit_status}"
            line += f" (exit status: {halted})"
        return line


@dataclass
class Nemesis:
    """Draws and applies faults one at a time (seeded), healing each before the next."""

    cluster: FaultyCluster
    firewall: Firewall
    seed: int
    topic: str
    partitions: int
    kinds: tuple[str, ...] = KINDS
    gap_s: tuple[float, float] = (0.5, 2.0)  # quiet time between faults
    overlap: bool = False  # two faults at a time (the second starts during the first)
    log: list[Fault] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.t0 = time.monotonic()
        self._stopped: set[int] = set()
        self.gaps_s = 0.0
        # The first faults are every kind once, in random order: a short run still has
        # every kind; the rest are drawn freely.
        self._first_kinds = list(self.kinds)
        self.rng.shuffle(self._first_kinds)

    def draw(self) -> Fault:
        rng = self.rng
        kind = self._first_kinds.pop() if self._first_kinds else rng.choice(self.kinds)
        ids = sorted(self.cluster.brokers)
        # Half of the time hit a partition's leader: that is where loss would happen.
        target = rng.choice(ids)
        if rng.random() < 0.5:
            state = self.cluster.partition_state(self.topic, rng.randrange(self.partitions))
            if state is not None and state.leader in ids:
                target = state.leader
        session_s = SESSION_TIMEOUT_MS / 1000
        if kind == "partition":
            other = rng.choice([b for b in ids if b != target])
            return Fault(kind, (target, other), rng.uniform(1.0, session_s + 3))
        if kind == "pause":
            # Short pauses (a GC) and pauses long enough for the session to expire.
            short = rng.random() < 0.5
            duration = rng.uniform(0.5, 3.0) if short else rng.uniform(session_s + 1, session_s + 3)
            return Fault(kind, (target,), duration)
        if kind in ("isolate", "zk-isolate"):
            return Fault(kind, (target,), rng.uniform(1.0, session_s + 3))
        if kind == "disk-full":
            # Long enough for the broker to write (it fetches as a follower all the time)
            # and halt; the heal waits for its session to expire anyway.
            return Fault(kind, (target,), rng.uniform(2.0, session_s + 2))
        return Fault(kind, (target,), rng.uniform(0.5, session_s + 2))  # kill: down for

    def apply(self, fault: Fault) -> None:
        fault.started = time.monotonic() - self.t0
        self.log.append(fault)
        c = self.cluster
        name = f"fault-{len(self.log)}"
        fault.rule_name = name
        if fault.kind == "kill":
            c.brokers[fault.targets[0]].kill()
        elif fault.kind == "pause":
            os.kill(c.pid(fault.targets[0]), signal.SIGSTOP)
            self._stopped.add(fault.targets[0])
        elif fault.kind == "partition":
            self.firewall.cut(name, c.rules_between(*fault.targets))
        elif fault.kind == "isolate":
            self.firewall.cut(name, c.rules_isolating(fault.targets[0]))
        elif fault.kind == "zk-isolate":
            self.firewall.cut(name, c.rules_to_zookeeper(fault.targets[0]))
        elif fault.kind == "disk-full":
            c.fill_disk(fault.targets[0])
        else:
            raise ValueError(f"unknown fault kind {fault.kind}")

    def heal(self, fault: Fault | None = None) -> None:
        """Undo a fault (or everything: every cut, every pause, every dead broker)."""
        c = self.cluster
        if fault is None:
            self.firewall.heal()
        elif fault.kind in ("partition", "isolate", "zk-isolate"):
            self.firewall.heal(fault.rule_name)
        for broker_id in list(self._stopped):
            if fault is None or (fault.kind == "pause" and broker_id == fault.targets[0]):
                if c.brokers[broker_id].is_running():
                    os.kill(c.pid(broker_id), signal.SIGCONT)
                self._stopped.discard(broker_id)
        # Free a full disk before its broker restarts (a restart on a full disk fails).
        for broker_id in c.disks:
            if fault is None or (fault.kind == "disk-full" and broker_id == fault.targets[0]):
                c.free_disk(broker_id)
        for broker_id, broker in c.brokers.items():
            if broker.is_running():
                continue
            if fault is None or (
                fault.kind in ("kill", "disk-full") and broker_id == fault.targets[0]
            ):
                if fault is not None and fault.kind == "disk-full" and broker.proc is not None:
                    fault.exit_status = broker.proc.returncode  # (halted: 1)
                c.restart(broker_id)

    def run(self, faults: int, stop: threading.Event | None = None) -> None:
        applied = 0
        while applied < faults:
            if stop is not None and stop.is_set():
                return
            first = self.draw()
            batch = [first]
            if self.overlap and applied + 1 < faults:
                # A second fault starts while the first is on.
                # Other brokers only: a killed broker restarting while cut from ZooKeeper
                # fails to start (as Kafka's does), which is not the fault under test.
                second = self.draw()
                if not set(second.targets) & set(first.targets):
                    batch.append(second)
            try:
                self.apply(first)
                if len(batch) == 2:
                    lead = self.rng.uniform(0, first.duration)
                    time.sleep(lead)
                    self.apply(batch[1])
                    time.sleep(max(0.0, first.duration - lead))
                    self.heal(first)
                    time.sleep(max(0.0, batch[1].duration - (first.duration - lead)))
                    self.heal(batch[1])
                else:
                    time.sleep(first.duration)
            finally:
                for fault in batch:
                    self.heal(fault)
                    fault.healed = time.monotonic() - self.t0
            applied += len(batch)
            gap = self.rng.uniform(*self.gap_s)
            self.gaps_s += gap
            time.sleep(gap)

    def schedule(self) -> str:
        return "\n".join(str(f) for f in self.log)

    def counts(self) -> Counter[str]:
        return Counter(f.kind for f in self.log)

    def cost(self) -> dict[str, float]:
        """Mean seconds from applying a fault to having healed it, by kind: where a
        time-bounded run's time goes (a kill waits for the session to expire and for the
        restarted broker to listen)."""
        spent: dict[str, list[float]] = {}
        for f in self.log:
            if f.healed:
                spent.setdefault(f.kind, []).append(f.healed - f.started)
        return {kind: sum(v) / len(v) for kind, v in sorted(spent.items())}


class Workload:
    """Idempotent acks=all producers writing unique values, and one reader, in threads."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        partitions: int,
        producers: int = 2,
        rate: float = 100.0,  # records per second per producer
        history: History | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.producers = producers
        self.rate = rate
        self.history = history or History()
        self.stop = threading.Event()
        self.fatal: list[str] = []
        self._threads: list[threading.Thread] = []

    def start(self) -> Workload:
        for i in range(self.producers):
            self._threads.append(
                threading.Thread(target=self._produce, args=(f"p{i}",), daemon=True)
            )
        self._threads.append(threading.Thread(target=self._read, daemon=True))
        for thread in self._threads:
            thread.start()
        return self

    def finish(self, timeout: float = 90) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join(timeout)

    def _produce(self, name: str) -> None:
        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                # Outlive the faults: an unacknowledged record is indeterminate anyway.
                "message.timeout.ms": 60000,
                "client.id": f"jepsen-{name}",
                # e.g. JEPSEN_RDKAFKA_DEBUG=eos,msg: why librdkafka bumps epochs (stderr)
                **(
                    {"debug": os.environ["JEPSEN_RDKAFKA_DEBUG"]}
                    if os.environ.get("JEPSEN_RDKAFKA_DEBUG")
                    else {}
                ),
            }
        )
        history = self.history

        def report(err: KafkaError | None, msg: Any) -> None:
            if err is None:
                history.ack(
                    Record(msg.topic(), msg.partition(), msg.offset(), msg.value()),
                    time.monotonic(),
                )
            else:
                history.fail(msg.value(), err.name())
                if err.fatal():
                    self.fatal.append(f"{name}: {err}")

        seq = 0
        interval = 1.0 / self.rate
        next_at = time.monotonic()
        # Each producer owns its partitions: until producer ids come from ZooKeeper
        # (clustertxn branch), two brokers may give two producers the same id, and two
        # producers with one id on one partition break each other's sequences.
        index = int(name[1:])
        owned = [p for p in range(self.partitions) if p % self.producers == index]
        while not self.stop.is_set() and not self.fatal:
            partition = owned[seq % len(owned)]
            value = f"{name}-{seq}".encode()
            history.attempt(Write(name, seq, self.topic, partition, value))
            try:
                producer.produce(self.topic, value, partition=partition, on_delivery=report)
            except BufferError:
                producer.poll(0.5)
                continue
            seq += 1
            next_at += interval
            try:
                producer.poll(max(0.0, next_at - time.monotonic()))
            except KafkaException as exc:  # a fatal idempotence error surfaces here
                self.fatal.append(f"{name}: {exc}")
        try:
            producer.flush(70)
        except KafkaException as exc:
            self.fatal.append(f"{name}: {exc}")

    def _read(self) -> None:
        """A read_uncommitted reader during the faults: what it sees must stay in the log
        at that offset (else it was served above the high watermark)."""
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": "jepsen-reader",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "enable.partition.eof": False,
            }
        )
        consumer.assign([TopicPartition(self.topic, p, 0) for p in range(self.partitions)])
        try:
            while not self.stop.is_set():
                msg = consumer.poll(0.2)
                if msg is None or msg.error():
                    continue
                self.history.observe(
                    Record(msg.topic(), msg.partition(), msg.offset(), msg.value())
                )
        finally:
            consumer.close()


def read_all(bootstrap: str, topic: str, partitions: int, timeout: float = 60) -> list[Record]:
    """Every record of every partition up to its high watermark, read after healing."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "jepsen-final",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
        }
    )
    try:
        ends = {}
        for p in range(partitions):
            _low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, p), timeout=timeout, cached=False
            )
            ends[p] = high
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        readback = Readback()
        position = {p: 0 for p in range(partitions)}
        deadline = time.monotonic() + timeout
        while any(position[p] < ends[p] for p in ends):
            if time.monotonic() > deadline:
                raise AssertionError(f"final read stuck at {position}, ends {ends}")
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            p = msg.partition()
            if msg.offset() < ends[p]:
                readback.add(Record(msg.topic(), p, msg.offset(), msg.value()))
            position[p] = max(position[p], msg.offset() + 1)
        if readback.again:
            print(
                f"final read: {len(readback.again)} offsets delivered again (counted once), "
                f"first {readback.again[:5]}",
                flush=True,
            )
        return readback.records
    finally:
        consumer.close()


@dataclass
class CampaignResult:
    seed: int
    report: Any  # checker.Report
    schedule: str
    counts: Counter[str]
    duration_s: float
    acked_during: int  # acknowledgements while faults were being injected
    unavailable: list[tuple[float, float]]  # windows without any acknowledgement
    settled: bool  # every partition fully replicated again after healing
    fatal: list[str]
    nemesis_error: str | None = None  # the harness itself failed (e.g. a restart)
    failures: Counter[str] = field(default_factory=Counter)  # failed deliveries by error
    cost: dict[str, float] = field(default_factory=dict)  # mean s per fault, by kind
    gaps_s: float = 0.0  # quiet time between faults, in all
    faults: list[Fault] = field(default_factory=list)  # the Nemesis log (exit statuses)

    def summary(self) -> str:
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(self.counts.items()))
        windows = ", ".join(f"{a:.1f}-{b:.1f}s" for a, b in self.unavailable) or "none"
        down = sum(b - a for a, b in self.unavailable)
        return "\n".join(
            [
                f"seed {self.seed}: {sum(self.counts.values())} faults in "
                f"{self.duration_s:.0f} s ({kinds})",
                self.report.summary(),
                f"failed deliveries: {dict(self.failures) or 'none'}",
                "mean seconds per fault (applied to healed): "
                + ", ".join(f"{k} {v:.1f}" for k, v in self.cost.items())
                + f"; quiet gaps {self.gaps_s:.0f} s in all",
                f"acknowledged during the faults: {self.acked_during} "
                f"({self.acked_during / max(self.duration_s, 1e-9):.0f}/s)",
                f"unavailable (no acknowledgement for > 2 s): {len(self.unavailable)} windows, "
                f"{down:.0f} s = {down / max(self.duration_s, 1e-9):.0%} of the faults' time: "
                f"{windows}",
                f"fully replicated after healing: {self.settled}; "
                f"fatal producer errors: {self.fatal or 'none'}; "
                f"harness error: {self.nemesis_error or 'none'}",
                "schedule:",
                self.schedule,
            ]
        )


def run_campaign(
    cluster: FaultyCluster,
    firewall: Firewall,
    seed: int,
    faults: int,
    topic: str = "jepsen",
    partitions: int = 4,
    producers: int = 2,
    rate: float = 100.0,
    kinds: tuple[str, ...] = KINDS,
    max_duration_s: float | None = None,
    overlap: bool = False,
    unclean: bool = False,
) -> CampaignResult:
    """Create the topic (RF 3, min.insync.replicas=2), write while ``faults`` random
    faults happen, heal, read everything back and check it. ``unclean`` sets
    ``unclean.leader.election.enable=true`` on the topic: a replica outside the ISR may
    then lead, and what only the ISR had is lost (the checker reports it)."""
    from confluent_kafka.admin import NewTopic

    from tests.helpers.checker import check, unavailability

    admin = cluster.admin()
    futures = admin.create_topics(
        [
            NewTopic(
                topic,
                partitions,
                3,
                config={
                    "min.insync.replicas": "2",
                    **({"unclean.leader.election.enable": "true"} if unclean else {}),
                },
            )
        ],
        operation_timeout=30,
    )
    futures[topic].result(60)
    if not cluster.wait_fully_replicated(topic, partitions, 60):
        raise AssertionError(f"{topic} never fully replicated before the faults")
    workload = Workload(cluster.bootstrap(), topic, partitions, producers, rate).start()
    nemesis = Nemesis(cluster, firewall, seed, topic, partitions, kinds, overlap=overlap)
    started = time.monotonic()
    stop = threading.Event()
    timer = threading.Timer(max_duration_s or 0, stop.set)
    if max_duration_s:
        timer.start()
    error = None
    try:
        nemesis.run(faults, stop)
    except Exception as exc:  # the harness failed: still heal, check and report
        error = f"{type(exc).__name__}: {str(exc)[:300]}"
    finally:
        timer.cancel()
        nemesis.heal()
    ended = time.monotonic()
    settled = cluster.wait_fully_replicated(topic, partitions, 90)
    time.sleep(2)  # writes acknowledged after healing show the cluster serves again
    workload.finish()
    final = read_all(cluster.bootstrap(), topic, partitions)
    history = workload.history
    return CampaignResult(
        seed=seed,
        report=check(history, final),
        schedule=nemesis.schedule(),
        counts=nemesis.counts(),
        cost=nemesis.cost(),
        gaps_s=nemesis.gaps_s,
        duration_s=ended - started,
        acked_during=sum(1 for t in history.ack_times if started <= t <= ended),
        unavailable=unavailability(history.ack_times, started, ended, gap_s=2.0),
        settled=settled,
        fatal=workload.fatal,
        nemesis_error=error,
        failures=Counter(history.failed.values()),
        faults=list(nemesis.log),
    )


def produce_recorded(
    bootstrap: str,
    topic: str,
    values: list[bytes],
    history: History,
    name: str,
    timeout_s: float = 30,
    idempotent: bool = True,
) -> int:
    """Write ``values`` to partition 0 with a new acks=all producer, recording attempts
    and acknowledgements in ``history``; returns how many were acknowledged."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": idempotent,
            "message.timeout.ms": int(timeout_s * 1000),
        }
    )
    acked = 0

    def report(err: KafkaError | None, msg: Any) -> None:
        nonlocal acked
        if err is None:
            acked += 1
            history.ack(
                Record(msg.topic(), msg.partition(), msg.offset(), msg.value()), time.monotonic()
            )
        else:
            history.fail(msg.value(), err.name())

    for seq, value in enumerate(values):
        history.attempt(Write(name, seq, topic, 0, value))
        producer.produce(topic, value, partition=0, on_delivery=report)
    producer.flush(timeout_s + 10)
    return acked
