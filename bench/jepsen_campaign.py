"""The long Jepsen-style campaign: many random faults against a three-broker cluster.

Run from the repository root, as root (nftables, ``setpriv --regid``):

    .venv/bin/python bench/jepsen_campaign.py --faults 100 --seed 7
    .venv/bin/python bench/jepsen_campaign.py --faults 1000 --duration 600
    .venv/bin/python bench/jepsen_campaign.py --kinds kill,pause,partition,disk-full

It starts a standalone ZooKeeper (Debian ``zookeeper``) on 127.0.0.1 and brokers 1-3 on
127.0.0.2-4 under their own group ids, creates a topic (replication factor 3,
``min.insync.replicas=2``), runs idempotent acks=all confluent-kafka producers and a
reader, and applies ``--faults`` random faults one after another (seeded; stops early
after ``--duration`` seconds): SIGKILL and restart, SIGSTOP short or past the ZooKeeper
session timeout, a partition between two brokers, a broker isolated from everyone, a
broker cut from ZooKeeper (kinds kill, pause, partition, isolate, zk-isolate: the
default). ``--kinds ...,disk-full`` adds a full disk: each broker's data directory is
then on a 128 MiB tmpfs of its own, the fault fills it, the broker halts on its next
write (exit status 1) and is restarted once the filler is removed and its session has
expired. Then it heals everything, reads the log back and prints the
checker's verdict (lost, moved, duplicated, reordered, phantom records, dirty reads),
the faults by kind, the acknowledged writes, the unavailability windows and the fault
schedule. Exit code 1 when the checker finds an anomaly.

The baseline is the producers' offered rate (``--rate`` per producer): the summary says
how much of it was acknowledged while the faults were on.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

from odradek.cluster.zookeeper_server import ZooKeeperServer

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.helpers.disks import TmpfsUnavailable  # noqa: E402
from tests.helpers.faults import (  # noqa: E402
    ALL_KINDS,
    CAMPAIGN_BROKER_SETTINGS,
    DISK_SIZE,
    KINDS,
    CampaignResult,
    FaultyCluster,
    Firewall,
    nft_unusable_reason,
    run_campaign,
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--faults", type=int, default=5, help="faults to inject (default 5)")
    parser.add_argument("--duration", type=float, default=None, help="stop faults after S s")
    parser.add_argument("--seed", type=int, default=None, help="RNG seed (random if unset)")
    parser.add_argument(
        "--kinds",
        default=",".join(KINDS),
        help=f"comma-separated fault kinds (default {','.join(KINDS)}; also disk-full)",
    )
    parser.add_argument("--producers", type=int, default=2)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rate", type=float, default=100.0, help="records/s per producer")
    parser.add_argument(
        "--overlap", action="store_true", help="two faults at a time (the second starts late)"
    )
    parser.add_argument(
        "--unclean",
        action="store_true",
        help="unclean.leader.election.enable=true on the topic (loss is then allowed)",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the data and broker logs when it fails"
    )
    args = parser.parse_args()
    reason = nft_unusable_reason()
    if reason is not None:
        print(f"error: {reason}", file=sys.stderr)
        return 2
    kinds = tuple(k for k in args.kinds.split(",") if k)
    unknown = set(kinds) - set(ALL_KINDS)
    if unknown:
        known = ", ".join(ALL_KINDS)
        print(f"error: unknown fault kinds {sorted(unknown)}; known: {known}", file=sys.stderr)
        return 2
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    print(
        f"seed {seed}, {args.faults} faults, kinds {kinds}, overlap {args.overlap}, "
        f"unclean {args.unclean}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="jepsen-") as tmp:
        base = Path(tmp)
        zookeeper = ZooKeeperServer(base / "zookeeper").start()
        try:
            cluster = FaultyCluster(
                base,
                f"{zookeeper.connect}/jepsen",
                3,
                CAMPAIGN_BROKER_SETTINGS,
                # Each broker's data on a tmpfs of its own, for the disk-full fault to fill.
                disk_size=DISK_SIZE if "disk-full" in kinds else None,
            )
        except TmpfsUnavailable as exc:
            zookeeper.stop()
            print(f"error: disk-full: {exc}", file=sys.stderr)
            return 2
        firewall = Firewall(f"campaign_{seed}")
        started = time.monotonic()
        load_before = os.getloadavg()
        result: CampaignResult | None = None
        kept: Path | None = None
        try:
            cluster.start()
            result = run_campaign(
                cluster,
                firewall,
                seed,
                args.faults,
                partitions=args.partitions,
                producers=args.producers,
                rate=args.rate,
                kinds=kinds,
                max_duration_s=args.duration,
                overlap=args.overlap,
                unclean=args.unclean,
            )
        finally:
            firewall.close()
            if args.keep and result is not None and not _ok(result):
                kept = Path(tempfile.mkdtemp(prefix="jepsen-kept-"))
            cluster.close(keep_disks=kept)  # the tmpfs data is copied before the unmount
            zookeeper.stop()
        print(result.summary())
        load_after = os.getloadavg()
        print(
            f"machine load (1/5/15 min) at start {load_before[0]:.2f}/{load_before[1]:.2f}/"
            f"{load_before[2]:.2f}, at end {load_after[0]:.2f}/{load_after[1]:.2f}/"
            f"{load_after[2]:.2f}, {os.cpu_count()} cores"
        )
        offered = args.rate * args.producers
        rate = result.acked_during / max(result.duration_s, 1e-9)
        print(
            f"acknowledged {rate:.0f}/s during the faults vs {offered:.0f}/s offered "
            f"(ratio {rate / offered:.2f}); whole run {time.monotonic() - started:.0f} s"
        )
        if kept is not None:
            # The disk-<i> mount points are empty now: close() copied their data already.
            skip = shutil.ignore_patterns("zookeeper")
            shutil.copytree(base, kept, dirs_exist_ok=True, ignore=skip)
            print(f"data and broker logs kept in {kept}")
        return 0 if _ok(result) else 1


def _ok(result: CampaignResult) -> bool:
    return result.report.valid and result.settled and result.nemesis_error is None


if __name__ == "__main__":
    sys.exit(main())
