"""All partition logs of one log directory, and the directory-level files.

Layout of the data directory::

    <data dir>/
      orders-0/ orders-1/ ...              one Log per partition (log.py)
      orders-2.3f5c...-delete/             a deleted partition awaiting removal
      recovery-point-offset-checkpoint     per partition: everything below is fsynced
      log-start-offset-checkpoint          per partition: the log start offset
      .kafka_cleanshutdown                 present only between a clean shutdown and
                                           the next startup; lists every segment's
                                           base offset and size (checkpoint.py)

Both checkpoints use Kafka's text format (checkpoint.py) and are replaced atomically.

Startup: with the clean-shutdown marker every log whose segment files still have the
sizes the marker lists opens without reading segment data (its recovery point,
checkpointed at shutdown, is its log end offset); a log whose files changed since (a
torn or extended tail, a missing segment) is recovered from the first changed segment,
and without the marker each log is recovered from its recovery point. The marker is
removed once every log is loaded, so a crash from then on is treated as unclean.
Shutdown: flush every log, close it (producer snapshots), write the checkpoints, then
the marker with every log's segment sizes.

``run_retention``, ``run_flush`` and ``checkpoint`` are meant to be called periodically
from a thread by the broker; each Log serialises them with its own appends.

``dir_failure`` says whether the directory is online (log_dir_failure.py): an I/O error
in any of the directory-level writes here takes it offline, and while it is offline
those writes are skipped (a shutdown then leaves no clean-shutdown marker, so the next
start recovers every log from its recovery point).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from odradek.storage.checkpoint import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    OffsetCheckpointFile,
    SegmentSizes,
    atomic_write,
    decode_segment_sizes,
    encode_segment_sizes,
    fsync_dir,
)
from odradek.storage.config import LogConfig
from odradek.storage.errors import CorruptCheckpointError, StorageError
from odradek.storage.log import Log
from odradek.storage.log_dir_failure import LogDirFailureChannel, is_io_failure
from odradek.storage.log_loader import parse_partition_dir_name
from odradek.storage.producer_state import DEFAULT_PRODUCER_ID_EXPIRATION_MS

logger = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
DELETE_DIR_SUFFIX = "-delete"
SHUTDOWN_FLUSH_THREADS = 8
# At most this often, start-up logs how many of the directory's logs are loaded.
PROGRESS_INTERVAL_S = 10.0
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")

TopicPartition = tuple[str, int]
# (topic, partition, config or None for the topic's, topic id or None)
LogSpec = tuple[str, int, "LogConfig | None", "uuid.UUID | None"]


def validate_topic_name(topic: str) -> None:
    """Kafka's rule: 1-249 characters of ``[a-zA-Z0-9._-]``, and not ``.`` or ``..``."""
    if topic in (".", "..") or not _LEGAL_TOPIC.fullmatch(topic):
        raise ValueError(
            f"illegal topic name {topic!r}: use 1-249 characters of [a-zA-Z0-9._-], not '.' or '..'"
        )


class LogManager:
    """Owns the Log of every partition in ``data_dir``."""

    def __init__(
        self,
        data_dir: Path,
        default_config: LogConfig,
        *,
        clock: Callable[[], float] = time.time,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        recovery_threads: int = 1,
        topic_config: Callable[[str], LogConfig | None] | None = None,
        progress_interval_s: float = PROGRESS_INTERVAL_S,
    ) -> None:
        self.data_dir = Path(data_dir)
        self._progress_interval_s = progress_interval_s
        self.default_config = default_config
        self._clock = clock
        self._producer_id_expiration_ms = producer_id_expiration_ms
        self._recovery_threads = max(1, recovery_threads)
        # Per-topic configs known at startup (else the default until get_or_create_log
        # or Log.update_config sets the real one).
        self._topic_config = topic_config
        self._logs: dict[TopicPartition, Log] = {}
        self._lock = threading.RLock()
        self._checkpoint_lock = threading.Lock()
        self._recovery_points = OffsetCheckpointFile(self.data_dir / RECOVERY_POINT_CHECKPOINT)
        self._log_start_offsets = OffsetCheckpointFile(self.data_dir / LOG_START_OFFSET_CHECKPOINT)
        self._pending_dir_deletes: list[tuple[int, Path]] = []  # (due ms, renamed dir)
        # New logs whose partition.metadata is still to be written (run_flush does it).
        self._metadata_pending: list[Log] = []
        self.had_clean_shutdown = False
        # Above this many logs, run_flush closes the descriptors of idle ones (None:
        # never); the broker sets it from its open-file limit.
        self.release_idle_above: int | None = None
        # A probe write of one maximal batch: "a full-size batch fits again".
        self.dir_failure = LogDirFailureChannel(
            self.data_dir, probe_bytes=default_config.max_message_bytes
        )

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def _config_for(self, topic: str) -> LogConfig:
        if self._topic_config is not None:
            config = self._topic_config(topic)
            if config is not None:
                return config
        return self.default_config

    # -- lifecycle ---------------------------------------------------------------------

    def startup(self) -> None:
        """Load every partition directory; see the module docstring."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        marker = self.data_dir / CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        segment_sizes: SegmentSizes | None = None
        # Topic ids recorded at the clean shutdown: no partition.metadata read per log.
        topic_ids: dict[TopicPartition, uuid.UUID] = {}
        try:
            recovery_points = self._recovery_points.read()
            log_start_offsets = self._log_start_offsets.read()
        except CorruptCheckpointError as exc:
            # Without trustworthy checkpoints every log is recovered from its start.
            logger.warning("%s; recovering every log from its first segment", exc)
            recovery_points, log_start_offsets, clean = {}, {}, False
        if clean:
            try:
                segment_sizes = decode_segment_sizes(marker.read_bytes(), marker, topic_ids)
            except CorruptCheckpointError as exc:
                logger.warning("%s; recovering every log from its recovery point", exc)
                clean = False
        to_load: list[tuple[TopicPartition, Path]] = []
        for entry in sorted(os.scandir(self.data_dir), key=lambda e: e.name):
            if not entry.is_dir():
                continue
            if entry.name.endswith(DELETE_DIR_SUFFIX):
                shutil.rmtree(entry.path, ignore_errors=True)  # deletion interrupted by a stop
                continue
            try:
                topic, partition = parse_partition_dir_name(entry.name)
                validate_topic_name(topic)
            except ValueError:
                continue  # not a partition directory
            to_load.append(((topic, partition), self.data_dir / entry.name))

        configs: dict[str, LogConfig] = {}  # per topic: building one is not free
        progress = _LoadProgress(self.data_dir, len(to_load), self._progress_interval_s)
        if clean:
            logger.info(
                "Skipping recovery of %d logs from %s since clean shutdown file was found",
                len(to_load), self.data_dir,
            )  # fmt: skip
        else:
            logger.info(
                "Attempting recovery of %d logs from %s since no clean shutdown file was found",
                len(to_load), self.data_dir,
            )  # fmt: skip

        def load(item: tuple[TopicPartition, Path]) -> Log:
            started = time.monotonic()
            log = open_log(item)
            progress.loaded(log, time.monotonic() - started)
            return log

        def open_log(item: tuple[TopicPartition, Path]) -> Log:
            tp, path = item
            config = configs.get(tp[0])
            if config is None:
                config = configs[tp[0]] = self._config_for(tp[0])
            try:
                return Log.open(
                    path,
                    config,
                    recovery_point=recovery_points.get(tp, 0),
                    log_start_offset=log_start_offsets.get(tp, 0),
                    clean_shutdown=clean and tp in recovery_points,
                    segment_sizes=None if segment_sizes is None else segment_sizes.get(tp),
                    topic_id=topic_ids.get(tp) if clean else None,
                    clock=self._clock,
                    producer_id_expiration_ms=self._producer_id_expiration_ms,
                )
            except (OSError, StorageError, ValueError) as exc:
                raise StorageError(f"cannot load the log in {path}: {exc}") from exc

        if self._recovery_threads > 1 and len(to_load) > 1:
            with ThreadPoolExecutor(self._recovery_threads, "log-recovery") as pool:
                loaded = list(pool.map(load, to_load))
        else:
            loaded = [load(item) for item in to_load]
        with self._lock:
            for (tp, _), log in zip(to_load, loaded, strict=True):
                self._logs[tp] = log
        if clean:
            marker.unlink()
            fsync_dir(self.data_dir)
        self.had_clean_shutdown = clean
        logger.info(
            "loaded %d logs from %s in %d ms after %s shutdown (%d recovery threads)",
            len(loaded), self.data_dir, progress.elapsed_ms(), "a clean" if clean else "an unclean",
            self._recovery_threads,
        )  # fmt: skip

    def shutdown(self) -> None:
        """Flush and close every log, checkpoint, then write the clean-shutdown marker."""
        with self._lock:
            logs = list(self._logs.values())

        def flush_and_close(log: Log) -> None:
            try:
                log.flush()
            except Exception as exc:
                if not is_io_failure(exc):
                    raise
                self.dir_failure.mark_offline(exc)
            log.close()

        # fsyncs from several threads share the file system's journal commits, so many
        # partitions flush in about the time of a few (the work is disk waits, not CPU).
        if len(logs) > 1:
            with ThreadPoolExecutor(SHUTDOWN_FLUSH_THREADS, "log-shutdown") as pool:
                list(pool.map(flush_and_close, logs))
        else:
            for log in logs:
                flush_and_close(log)
        self.checkpoint()
        self._remove_deleted_dirs(force=True)
        if self.dir_failure.offline:
            return  # what reached the disk is unknown: the next start recovers every log
        sizes = {(log.topic, log.partition): log.segment_sizes() for log in logs}
        ids = {
            (log.topic, log.partition): log.known_topic_id
            for log in logs
            if log.known_topic_id is not None
        }
        try:
            atomic_write(self.data_dir / CLEAN_SHUTDOWN_FILE, encode_segment_sizes(sizes, ids))
        except OSError as exc:
            self.dir_failure.mark_offline(exc)

    # -- logs --------------------------------------------------------------------------

    def get_log(self, topic: str, partition: int) -> Log | None:
        with self._lock:
            return self._logs.get((topic, partition))

    def get_or_create_log(self, topic: str, partition: int, config: LogConfig | None = None) -> Log:
        """The partition's log, created empty if absent. A given config replaces the
        log's current one."""
        return self.create_logs([(topic, partition, config, None)])[0]

    def create_logs(self, specs: Sequence[LogSpec]) -> list[Log]:
        """The logs of ``(topic, partition, config, topic id)``, created empty where absent.

        For many partitions at once (a new topic, a LeaderAndIsr): each new log costs a
        directory and an empty ``.log`` (Log.create_new), and the whole batch one fsync
        of the data directory, which makes the new directories durable. The
        ``partition.metadata`` files follow on the flush thread (run_flush), as Kafka
        writes them from its scheduler. The work runs outside the manager's lock, so a
        caller on another thread does not hold up appends and reads of other partitions.
        Existing logs get the given config; the topic id is left to the caller
        (``Log.assign_topic_id``)."""
        for topic, partition, _, _ in specs:
            validate_topic_name(topic)
            if partition < 0:
                raise ValueError(f"partition {partition} of {topic} is negative")
        found: dict[TopicPartition, Log] = {}
        with self._lock:
            for topic, partition, config, _ in specs:
                log = self._logs.get((topic, partition))
                if log is not None:
                    # Identity, not equality: comparing every field costs more than
                    # setting the config again.
                    if config is not None and config is not log.config:
                        log.update_config(config)
                    found[(topic, partition)] = log
        missing = [spec for spec in specs if (spec[0], spec[1]) not in found]
        if missing:
            created = self._create_missing(missing)
            with self._lock:
                for tp, log in created.items():
                    found[tp] = self._logs.setdefault(tp, log)
        return [found[(topic, partition)] for topic, partition, _, _ in specs]

    def _create_missing(self, specs: Sequence[LogSpec]) -> dict[TopicPartition, Log]:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        data_dir = str(self.data_dir)
        created: dict[TopicPartition, Log] = {}
        for topic, partition, config, topic_id in specs:
            if (topic, partition) in created:
                continue
            directory = Path(f"{data_dir}{os.sep}{topic}-{partition}")
            config = config or self._config_for(topic)
            try:
                log = Log.create_new(
                    directory,
                    config,
                    topic_id=topic_id,
                    clock=self._clock,
                    producer_id_expiration_ms=self._producer_id_expiration_ms,
                )
            except FileExistsError:
                # A directory nobody loaded (left by an interrupted create): open it
                # with whatever it holds, as a restart would.
                log = Log.open(
                    directory,
                    config,
                    clock=self._clock,
                    producer_id_expiration_ms=self._producer_id_expiration_ms,
                )
            created[(topic, partition)] = log
        fsync_dir(self.data_dir)
        pending = [log for log in created.values() if log.metadata_pending]
        if pending:
            with self._lock:
                self._metadata_pending.extend(pending)
        return created

    def write_pending_metadata(self) -> None:
        """Write the partition.metadata files new logs left for later (Log.create_new)."""
        with self._lock:
            pending, self._metadata_pending = self._metadata_pending, []
        for log in pending:
            log.write_pending_metadata()

    def delete_log(self, topic: str, partition: int) -> None:
        """Forget the partition and remove its directory (after file.delete.delay.ms).

        The directory is renamed ``<name>.<uuid>-delete`` at once, so a new partition of
        the same name can be created immediately; readers holding file regions keep
        reading their open files."""
        with self._lock:
            log = self._logs.pop((topic, partition), None)
        if log is None:
            return
        log.drop_pending_metadata()
        log.close()
        target = self.data_dir / f"{log.directory.name}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
        try:
            os.replace(log.directory, target)
            fsync_dir(self.data_dir)
        except FileNotFoundError:
            return
        with self._lock:
            self._pending_dir_deletes.append(
                (self._now_ms() + log.config.file_delete_delay_ms, target)
            )

    def all_logs(self) -> list[Log]:
        with self._lock:
            return list(self._logs.values())

    # -- periodic work -----------------------------------------------------------------

    def checkpoint(self) -> None:
        """Write the recovery points and log start offsets of every log, atomically."""
        if self.dir_failure.offline:
            return  # the last good checkpoints stay; recovery starts from them
        with self._lock:
            logs = dict(self._logs)
        with self._checkpoint_lock:
            try:
                self._recovery_points.write({tp: log.recovery_point for tp, log in logs.items()})
                # As Kafka: only logs that start past their first segment's base (on
                # load, a missing entry means that base anyway).
                self._log_start_offsets.write(
                    {
                        tp: log.log_start_offset
                        for tp, log in logs.items()
                        if log.segments and log.log_start_offset > log.segments[0].base_offset
                    }
                )
            except OSError as exc:
                self.dir_failure.mark_offline(exc)

    def run_retention(self) -> None:
        """Apply retention to every log, expire idle producers, remove deleted logs."""
        now_ms = self._now_ms()
        for log in self.all_logs():
            try:
                log.delete_retained_segments()
                log.producer_state.remove_expired_producers(now_ms)
            except Exception:  # one bad partition must not stop retention of the others
                logger.exception("retention of %s failed", log.directory.name)
        self._remove_deleted_dirs()

    def run_flush(self) -> None:
        """Flush the logs whose flush.messages / flush.ms (or a roll) calls for it; with
        more logs than ``release_idle_above``, also release the descriptors of the logs
        unused since the previous run (Log.release_idle_handles)."""
        if self.dir_failure.offline:
            return
        try:
            self.write_pending_metadata()
        except Exception as exc:
            if is_io_failure(exc):
                self.dir_failure.mark_offline(exc)
                return
            logger.exception("writing partition.metadata files failed")
        logs = self.all_logs()
        release = self.release_idle_above is not None and len(logs) > self.release_idle_above
        for log in logs:
            try:
                log.maybe_flush()
                if release:
                    log.release_idle_handles()
            except Exception as exc:
                if is_io_failure(exc):
                    self.dir_failure.mark_offline(exc)
                    return
                logger.exception("flush of %s failed", log.directory.name)

    def disk_usage(self) -> tuple[int, int]:
        """(total, usable) bytes of the volume holding the directory (-1, -1 if unknown)."""
        try:
            st = os.statvfs(self.data_dir)
        except OSError:
            return -1, -1
        return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize

    def _remove_deleted_dirs(self, *, force: bool = False) -> None:
        now_ms = self._now_ms()
        with self._lock:
            due = [p for t, p in self._pending_dir_deletes if force or t <= now_ms]
            self._pending_dir_deletes = [
                (t, p) for t, p in self._pending_dir_deletes if not (force or t <= now_ms)
            ]
        for path in due:
            shutil.rmtree(path, ignore_errors=True)

    def __repr__(self) -> str:
        return f"LogManager({self.data_dir}, logs={len(self._logs)})"


class _LoadProgress:
    """Start-up progress of one directory, as Kafka's LogManager logs it.

    A log whose segments were read (recovered) gets Kafka's ``Completed load of ...
    (k/n completed in DIR)`` line; clean opens are counted silently (a clean start of
    10,000 logs would otherwise log 10,000 lines). Every ``interval_s`` a line says how
    far the directory is, so a long recovery is never silent. Logs load on several
    threads (``num.recovery.threads.per.data.dir``): the counts are under a lock.
    """

    def __init__(self, data_dir: Path, total: int, interval_s: float) -> None:
        self._data_dir = data_dir
        self._total = total
        self._interval_s = interval_s
        self._lock = threading.Lock()
        self._done = 0
        self._segments = 0
        self._started = time.monotonic()
        self._last_report = self._started

    def elapsed_ms(self) -> int:
        return int((time.monotonic() - self._started) * 1000)

    def loaded(self, log: Log, seconds: float) -> None:
        with self._lock:
            self._done += 1
            self._segments += log.segments_recovered
            done, segments = self._done, self._segments
            now = time.monotonic()
            report = now - self._last_report >= self._interval_s and done < self._total
            if report:
                self._last_report = now
        if log.segments_recovered:
            logger.info(
                "Completed load of log %s with %d segments, log start offset %d and log end "
                "offset %d in %d ms (%d/%d completed in %s)",
                log.directory.name, len(log.segment_sizes()), log.log_start_offset,
                log.log_end_offset, int(seconds * 1000), done, self._total, self._data_dir,
            )  # fmt: skip
        if report:
            logger.info(
                "Loaded %d/%d logs (%d%%) from %s in %d ms; %d segments recovered so far",
                done, self._total, done * 100 // self._total, self._data_dir,
                self.elapsed_ms(), segments,
            )  # fmt: skip
