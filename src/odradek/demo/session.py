"""The demo's Spark session: on loopback, with the odradek format, and with the JVM kept quiet.

Spark's JVM writes its log (start-up warnings, and on shutdown or Ctrl-C a burst of stack
traces from threads interrupted mid-call) to the stdout and stderr it inherits. The demo wants
its terminal for the progress display, so the JVM, and the Python workers it starts, inherit a
log file instead: fds 1 and 2 point at the file only while PySpark launches the JVM.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

from pyspark.sql import SparkSession

LOOPBACK = "127.0.0.1"


@contextlib.contextmanager
def output_to(path: Path) -> Iterator[None]:
    """Point this process's fds 1 and 2 at ``path`` (appending) for the duration."""
    sys.stdout.flush()
    sys.stderr.flush()
    path.parent.mkdir(parents=True, exist_ok=True)
    log_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    saved = os.dup(1), os.dup(2)
    try:
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, log_fd):
            os.close(fd)


def driver_host(master: str) -> str | None:
    """Loopback unless the master is a standalone cluster elsewhere (its workers must reach
    the driver, so Spark's own choice of address stands)."""
    if not master.startswith("spark://"):
        return LOOPBACK
    hosts = [urlsplit(f"spark://{part}").hostname for part in master[8:].split(",")]
    if all(h is not None and (h == "localhost" or h.startswith("127.")) for h in hosts):
        return LOOPBACK
    return None


def _not_from_py4j(record: logging.LogRecord) -> bool:
    return f"{os.sep}py4j{os.sep}" not in record.pathname


def build_spark(master: str, log_file: Path, app_name: str = "odradek-demo") -> SparkSession:
    """A session with the odradek format registered; workers use this interpreter."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # py4j logs a connection error for each call cut short by Ctrl-C or a stopping JVM.
    logging.getLogger("py4j").setLevel(logging.CRITICAL)
    # ...and a Ctrl-C landing inside a call with logging.exception() on the root logger, not
    # its own: "ERROR:root:KeyboardInterrupt while sending command." and a traceback on the
    # terminal (seen when the interrupt met the progress display's query polling).
    root = logging.getLogger()
    if _not_from_py4j not in root.filters:
        root.addFilter(_not_from_py4j)
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
    )
    host = driver_host(master)
    if host is not None:
        builder = builder.config("spark.driver.host", host).config("spark.driver.bindAddress", host)
    # PySpark installs its own SIGINT handler (cancel all jobs, then KeyboardInterrupt); the
    # demo has one already, which also bounds the time stopping may take.
    sigint = signal.getsignal(signal.SIGINT)
    try:
        with output_to(log_file):
            spark = builder.getOrCreate()
    except BaseException:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # on the way out: no second handler
        raise
    signal.signal(signal.SIGINT, sigint)
    spark.sparkContext.setLogLevel("ERROR")
    from odradek.spark import register

    register(spark)
    return spark
