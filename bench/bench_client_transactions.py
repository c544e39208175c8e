"""What a transaction costs odradek's own producer, against its idempotent producer in the same run.

Run from the repository root: ``.venv/bin/python bench/bench_client_transactions.py`` (``--help``
for the knobs). It starts its own broker subprocess and produces ``--records`` 100-byte
records to a 2-partition topic, each setting on a fresh topic:

* baseline: the idempotent producer (the default), ``flush()`` at the end;
* transactional, committing every ``N`` records for each ``N`` in ``--per-txn``, plus the
  same with ``send_offsets_to_transaction`` (a consume-transform-produce loop's commit).

Printed per setting: records/s, the ratio to the baseline, and the median time of one
``commit_transaction()`` (with the offsets: ``send_offsets_to_transaction`` + commit).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from odradek.client import Admin, NewTopic, Producer

REPO = Path(__file__).resolve().parents[1]
VALUE = b"x" * 100


async def new_topic(bootstrap: str) -> str:
    name = f"bench-txn-{uuid.uuid4().hex[:8]}"
    async with Admin(bootstrap) as admin:
        await admin.create_topics([NewTopic(name, 2, 1)])
    return name


async def baseline(bootstrap: str, records: int) -> float:
    topic = await new_topic(bootstrap)
    async with Producer(bootstrap, linger_ms=5) as producer:
        start = time.perf_counter()
        for i in range(records):
            await producer.send(topic, VALUE, partition=i % 2)
        await producer.flush()
        return time.perf_counter() - start


async def transactional(
    bootstrap: str, records: int, per_txn: int, offsets: bool
) -> tuple[float, list[float]]:
    topic = await new_topic(bootstrap)
    group = f"bench-group-{uuid.uuid4().hex[:8]}"
    commits: list[float] = []
    async with Producer(
        bootstrap, linger_ms=5, transactional_id=f"bench-{uuid.uuid4().hex[:8]}"
    ) as producer:
        await producer.init_transactions()
        start = time.perf_counter()
        for first in range(0, records, per_txn):
            producer.begin_transaction()
            for i in range(first, min(records, first + per_txn)):
                await producer.send(topic, VALUE, partition=i % 2)
            await producer.flush()  # the commit's own cost is what follows
            began = time.perf_counter()
            if offsets:
                await producer.send_offsets_to_transaction({(topic, 0): first + per_txn}, group)
            await producer.commit_transaction()
            commits.append(time.perf_counter() - began)
        return time.perf_counter() - start, commits


async def run(bootstrap: str, records: int, per_txn: list[int]) -> None:
    # Warm up: the first transaction creates __transaction_state and __consumer_offsets.
    await transactional(bootstrap, 10, 10, True)
    base = await baseline(bootstrap, records)
    print(f"idempotent (baseline)      {records / base:>10,.0f} rec/s")
    for n in per_txn:
        for offsets in (False, True):
            took, commits = await transactional(bootstrap, records, n, offsets)
            label = f"txn every {n:>6,}" + (" + offsets" if offsets else "")
            print(
                f"{label:26} {records / took:>10,.0f} rec/s  x{base / took:.2f} of baseline  "
                f"commit p50 {statistics.median(commits) * 1000:.1f} ms",
                flush=True,
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--per-txn", default="100,1000", help="records per transaction")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from tests.helpers.broker import BrokerProcess

    with tempfile.TemporaryDirectory(prefix="odradek-bench-txn-") as tmp:
        broker = BrokerProcess(Path(tmp) / "data", log_path=Path(tmp) / "broker.log").start()
        try:
            per_txn = [int(n) for n in args.per_txn.split(",")]
            asyncio.run(run(broker.bootstrap, args.records, per_txn))
        finally:
            broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
