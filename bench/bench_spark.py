"""Spark reading and writing odradek, as a ratio to Spark doing the same with the rows as Parquet.

    python bench/bench_spark.py [--records 1000000] [--partitions 4] [--value-bytes 100]
                                [--bootstrap-server HOST:PORT] [--master local[2]] [--repeat 3]
                                [--standalone]

Without ``--bootstrap-server`` it starts an odradek broker on a free port with a temporary data
directory. In one run and one Spark session it:

1. builds ``--records`` rows (8-byte-ish string key, ``--value-bytes`` value) and caches them;
2. writes them to Parquet and to an odradek topic (``--partitions`` partitions, uncompressed
   unless ``--compression`` names a codec);
3. reads both back: ``count()`` and a full scan of every column (``format("noop")``, which
   materialises every row without writing it anywhere).

With ``--standalone`` the bench starts a Spark standalone cluster on this machine first (a
master and one worker with ``--cores`` cores, both with ``bin/spark-class`` from the pip
package, every address pinned to 127.0.0.1) and runs against it instead of ``--master``:
Python workers then run in a separate executor JVM, as on a real cluster.

Each figure is the best of ``--repeat`` runs, in rows per second, and each odradek figure is
printed next to the Parquet figure of the same operation and their ratio. The runs of the
things compared take turns (Parquet, odradek, Parquet, ...), so that a change in the machine's
load hits both. Beside each wall-time ratio is the ratio of CPU per row (this process and all
its descendants: Spark's JVMs and Python workers and the broker, read from ``/proc``; the least
of the runs): on a machine shared with other work it moves much less between runs, and where
both sides keep every core busy it is the throughput ratio an idle machine would show. The
goals are a full-scan ratio of at least 0.5 and a write ratio of at least 0.4. Parquet's
``count()`` reads only file footers, so the full-scan ratio is the fair one.

A last line shows the ceiling of any Python data source here: a source whose tasks yield the
same number of rows as ready-made Arrow batches (no I/O, no decoding) scanned the same way.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_broker(data_dir: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    log = open(data_dir.parent / "broker.log", "wb")  # noqa: SIM115 - owned by the child
    proc = subprocess.Popen(
        [sys.executable, "-m", "odradek", "server", "--log-level", "WARNING",
         "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
         "--override", f"log.dir={data_dir}"],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"broker exited: {(data_dir.parent / 'broker.log').read_text()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return proc, f"127.0.0.1:{port}"
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("broker did not start within 30 s")


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    import asyncio

    from odradek.client.admin import Admin, NewTopic

    async def create() -> None:
        async with Admin(bootstrap) as admin:
            await admin.create_topics([NewTopic(topic, partitions, 1)])
            await admin.client.wait_for_topics([topic])

    asyncio.run(create())


class StandaloneCluster:
    """A Spark standalone master and one worker, started with the pip package's spark-class."""

    def __init__(self, workdir: Path, cores: int) -> None:
        import pyspark

        self.spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
        self.workdir = workdir
        self.cores = cores
        self.procs: list[subprocess.Popen] = []
        self.url = ""

    def _start(self, name: str, *args: str) -> None:
        log = open(self.workdir / f"{name}.log", "wb")  # noqa: SIM115 - owned by the child
        env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", SPARK_LOCAL_HOSTNAME="127.0.0.1")
        proc = subprocess.Popen(
            [str(self.spark_class), *args], stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, env=env, start_new_session=True,
        )  # fmt: skip
        self.procs.append(proc)

    def _wait_for(self, name: str, text: str, seconds: float = 120) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if text in (self.workdir / f"{name}.log").read_text(errors="replace"):
                return
            if any(p.poll() is not None for p in self.procs):
                break
            time.sleep(0.5)
        raise RuntimeError(
            f"Spark {name} did not start: {(self.workdir / f'{name}.log').read_text()[-2000:]}"
        )

    def start(self) -> str:
        port = free_port()
        self._start(
            "master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
            "--port", str(port), "--webui-port", str(free_port()),
        )  # fmt: skip
        self.url = f"spark://127.0.0.1:{port}"
        self._wait_for("master", "I have been elected leader")
        (self.workdir / "worker").mkdir()
        self._start(
            "worker", "org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1",
            "--cores", str(self.cores), "--memory", "2g", "--webui-port", str(free_port()),
            "--work-dir", str(self.workdir / "worker"),
        )  # fmt: skip
        self._wait_for("worker", "Successfully registered with master")
        return self.url

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def ceiling_source(rows: int, partitions: int, value_bytes: int) -> type:
    """A Python data source that yields prebuilt Arrow batches in odradek's row schema."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from odradek.spark.schema import arrow_source_schema, source_schema

    class CeilingReader(DataSourceReader):
        def partitions(self) -> list[InputPartition]:
            return [InputPartition(i) for i in range(partitions)]

        def read(self, partition: InputPartition):  # type: ignore[override]
            import numpy as np
            import pyarrow as pa

            chunk = 10_000
            keys = pa.array([b"12345678"] * chunk, pa.binary())
            values = pa.array([b"x" * value_bytes] * chunk, pa.binary())
            for start in range(0, rows // partitions, chunk):
                yield pa.RecordBatch.from_arrays(
                    [
                        keys,
                        values,
                        pa.repeat(pa.scalar("t"), chunk),
                        pa.repeat(pa.scalar(partition.value, pa.int32()), chunk),
                        pa.array(np.arange(start, start + chunk, dtype=np.int64)),
                        pa.array(np.zeros(chunk, dtype=np.int64), pa.timestamp("us", tz="UTC")),
                        pa.repeat(pa.scalar(0, pa.int32()), chunk),
                    ],
                    schema=arrow_source_schema(False),
                )

    class CeilingSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "arrow_ceiling"

        def schema(self):  # type: ignore[override]
            return source_schema(False)

        def reader(self, schema):  # type: ignore[override]
            return CeilingReader()

    return CeilingSource


def tree_cpu_seconds(root: int | None = None) -> float:
    """CPU time of this process and every descendant (Spark's JVMs and Python workers, the
    broker), from /proc: on a machine shared with other work, CPU per row moves far less
    between runs than wall time does."""
    root = os.getpid() if root is None else root
    children: dict[int, list[int]] = {}
    times: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited meanwhile
        pid, ppid = int(entry), int(fields[1])
        children.setdefault(ppid, []).append(pid)
        # utime, stime and the reaped children's cutime, cstime
        times[pid] = sum(int(x) for x in fields[11:15]) / tick
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += times.get(pid, 0.0)
        todo.extend(children.get(pid, ()))
    return total


class Measured:
    """Best wall time of several runs of one action, and its CPU (whole process tree) per run."""

    def __init__(self) -> None:
        self.best = float("inf")
        self.cpu: list[float] = []

    def run(self, action: Callable[[], object]) -> None:
        cpu = tree_cpu_seconds()
        started = time.perf_counter()
        action()
        self.best = min(self.best, time.perf_counter() - started)
        self.cpu.append(tree_cpu_seconds() - cpu)

    @property
    def cpu_s(self) -> float:
        return min(self.cpu)


def interleaved(repeat: int, *actions: Callable[[], object]) -> list[Measured]:
    """Each action ``repeat`` times, taking turns, so a change of machine load hits all alike."""
    results = [Measured() for _ in actions]
    for _ in range(repeat):
        for measured, action in zip(results, actions, strict=True):
            measured.run(action)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--compression", default="none")
    parser.add_argument("--bootstrap-server", default=None)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--standalone", action="store_true",
        help="start a standalone master and worker on 127.0.0.1 and run on them",
    )  # fmt: skip
    parser.add_argument("--cores", type=int, default=2, help="the standalone worker's cores")
    args = parser.parse_args()

    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from odradek.spark import register

    workdir = Path(tempfile.mkdtemp(prefix="bench-spark-"))
    broker = None
    cluster = None
    try:
        bootstrap = args.bootstrap_server
        if bootstrap is None:
            (workdir / "data").mkdir()
            broker, bootstrap = start_broker(workdir / "data")
        master = args.master
        if args.standalone:
            cluster = StandaloneCluster(workdir, args.cores)
            master = cluster.start()
        spark = (
            SparkSession.builder.master(master)
            .appName("odradek-bench")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.executor.memory", "1g")
            .config("spark.pyspark.python", sys.executable)
            .config("spark.executorEnv.PYTHONPATH", os.environ.get("PYTHONPATH", ""))
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", str(args.partitions))
            .config("spark.driver.memory", "2g")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)

        n = args.records
        rows = (
            spark.range(n, numPartitions=args.partitions)
            .select(
                F.col("id").cast("string").cast("binary").alias("key"),
                F.expr(
                    f"substring(repeat(sha2(CAST(id AS STRING), 256), 8), 1, {args.value_bytes})"
                )
                .cast("binary")
                .alias("value"),
            )
            .cache()
        )
        rows.count()

        parquet_dir = workdir / "parquet"
        topic_counter = iter(range(10**6))

        def write_parquet() -> None:
            rows.write.mode("overwrite").parquet(str(parquet_dir))

        def write_odradek() -> None:
            topic = f"bench-{uuid.uuid4().hex[:6]}-{next(topic_counter)}"
            create_topic(bootstrap, topic, args.partitions)
            (
                rows.write.format("odradek")
                .option("kafka.bootstrap.servers", bootstrap)
                .option("topic", topic)
                .option("kafka.compression.type", args.compression)
                .mode("append")
                .save()
            )
            last_topic[0] = topic

        last_topic = [""]
        print(f"{n:,} rows, {args.value_bytes}-byte values, {args.partitions} partitions, "
              f"master {master}, best of {args.repeat}")  # fmt: skip
        w_parquet, w_odradek = interleaved(args.repeat, write_parquet, write_odradek)

        def odradek_frame():
            return (
                spark.read.format("odradek")
                .option("kafka.bootstrap.servers", bootstrap)
                .option("subscribe", last_topic[0])
                .load()
            )

        assert odradek_frame().count() == n, "the topic does not hold every row written"
        parquet_frame = spark.read.parquet(str(parquet_dir))
        c_parquet, c_odradek = interleaved(
            args.repeat, parquet_frame.count, lambda: odradek_frame().count()
        )

        def scan(frame) -> None:
            frame.write.format("noop").mode("overwrite").save()

        spark.dataSource.register(ceiling_source(n, args.partitions, args.value_bytes))
        s_parquet, s_odradek, s_ceiling = interleaved(
            args.repeat,
            lambda: scan(spark.read.parquet(str(parquet_dir))),
            lambda: scan(odradek_frame()),
            lambda: scan(spark.read.format("arrow_ceiling").load()),
        )

        def line(what: str, parquet: Measured, other: Measured, name: str = "odradek") -> None:
            print(
                f"{what:<28} parquet {n / parquet.best:>10,.0f} rows/s   {name} "
                f"{n / other.best:>10,.0f} rows/s   ratio {parquet.best / other.best:5.2f}"
                f"   | CPU us/row {1e6 * parquet.cpu_s / n:5.1f} vs {1e6 * other.cpu_s / n:5.1f}"
                f", ratio {parquet.cpu_s / other.cpu_s:5.2f}"
            )

        line("write", w_parquet, w_odradek)
        line("read: count()", c_parquet, c_odradek)
        line("read: full scan (noop sink)", s_parquet, s_odradek)
        line("ceiling: no I/O, no decoding", s_parquet, s_ceiling, "arrow  ")
        print(
            f"full scan / ceiling: {s_ceiling.best / s_odradek.best:.2f} (wall), "
            f"{s_ceiling.cpu_s / s_odradek.cpu_s:.2f} (CPU); goals: read >= 0.5, write >= 0.4 "
            "of Parquet"
        )
        spark.stop()
    finally:
        if cluster is not None:
            cluster.stop()
        if broker is not None:
            broker.terminate()
            try:
                broker.wait(30)
            except subprocess.TimeoutExpired:
                broker.kill()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
