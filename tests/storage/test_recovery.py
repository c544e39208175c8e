"""Crash recovery and clean-shutdown loading of a Log.

A "crash" is simulated by opening the directory again without closing the first Log
(everything written is in the page cache, nothing was snapshotted at close), optionally
after damaging files the way a torn write or bit rot would.
"""

from __future__ import annotations

import builtins
import os
import shutil
from pathlib import Path

import pytest

from odradek.records.header import iter_headers, parse_header
from odradek.storage.config import LogConfig
from odradek.storage.log import Log
from tests.storage.conftest import ATTR_TRANSACTIONAL, FakeClock, make_batch, make_control_batch

CONFIG = LogConfig(segment_bytes=1200, index_interval_bytes=150, retention_ms=-1)


def build(directory: Path, batches: int = 40, **batch_kwargs: object) -> tuple[Log, list]:
    log = Log.open(directory, CONFIG, clock=FakeClock())
    for i in range(batches):
        log.append_as_leader(make_batch([b"record-%d" % i] * (1 + i % 3), **batch_kwargs))
    return log, [h for _, h in iter_headers(log.read(0, 10**8).read_bytes())]


def log_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.log"))


def last_batch_span(directory: Path) -> tuple[Path, int, int]:
    """(path, start, end) of the last batch of the last segment."""
    path = log_files(directory)[-1]
    data = path.read_bytes()
    start = 0
    for pos, _ in iter_headers(data):
        start = pos
    return path, start, len(data)


def reopen(directory: Path, recovery_point: int = 0, **kwargs: object) -> Log:
    return Log.open(directory, CONFIG, recovery_point=recovery_point, clock=FakeClock(), **kwargs)


def test_torn_last_batch_at_every_byte(tmp_path: Path) -> None:
    pristine = tmp_path / "pristine" / "t-0"
    log, stored = build(pristine)
    log.close()
    path, start, end = last_batch_span(pristine)
    prefix = path.read_bytes()[:start]
    before_last = stored[-1].base_offset
    work = tmp_path / "work" / "t-0"
    for cut in range(start, end):
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(pristine, work)
        with open(work / path.name, "r+b") as f:
            f.truncate(cut)
        # Recover from the last segment's start most times, from 0 now and then.
        rp = 0 if cut % 25 == 0 else stored[-1].base_offset - 1
        recovered = reopen(work, recovery_point=rp)
        assert recovered.log_end_offset == before_last, cut
        assert (work / path.name).read_bytes() == prefix, cut  # nothing before it lost
        data = recovered.read(0, 10**8).read_bytes()
        assert [h for _, h in iter_headers(data)] == stored[:-1]
        # The log is usable at once: the next append takes the freed offsets.
        assert recovered.append_as_leader(make_batch([b"again"])).first_offset == before_last
        recovered.close()


@pytest.mark.parametrize("region", ["length", "magic_crc_and_body"])
def test_flipped_byte_in_the_last_batch(tmp_path: Path, region: str) -> None:
    pristine = tmp_path / "pristine" / "t-0"
    log, stored = build(pristine)
    log.close()
    path, start, end = last_batch_span(pristine)
    original = path.read_bytes()
    # Bytes 0-7 (base offset) and 12-15 (leader epoch) are not CRC-covered in Kafka's
    # format; everything else is protected by the length check or the CRC32C.
    positions = range(start + 8, start + 12) if region == "length" else range(start + 16, end)
    work = tmp_path / "work" / "t-0"
    for position in positions:
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(pristine, work)
        damaged = bytearray(original)
        damaged[position] ^= 0x5A
        (work / path.name).write_bytes(damaged)
        recovered = reopen(work, recovery_point=stored[-1].base_offset - 1)
        assert recovered.log_end_offset == stored[-1].base_offset, position
        assert (work / path.name).read_bytes() == original[:start], position
        recovered.close()


def test_offsets_going_backwards_are_cut(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log, stored = build(directory)
    log.close()
    path, start, _ = last_batch_span(directory)
    data = bytearray(path.read_bytes())
    data[start] = 0x80  # base offset becomes negative: below the previous batch's end
    path.write_bytes(data)
    assert reopen(directory).log_end_offset == stored[-1].base_offset


def test_corruption_mid_log_drops_everything_after(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log, stored = build(directory)
    log.close()
    files = log_files(directory)
    assert len(files) >= 4
    victim = files[1]
    data = bytearray(victim.read_bytes())
    positions = [pos for pos, _ in iter_headers(data)]
    bad = positions[2]
    data[bad + 40] ^= 1
    victim.write_bytes(data)
    recovered = reopen(directory, recovery_point=0)
    first_bad = parse_header(data, bad).base_offset
    assert recovered.log_end_offset == first_bad
    assert log_files(directory) == files[:2]  # later segments are gone
    assert victim.stat().st_size == bad
    got = [h for _, h in iter_headers(recovered.read(0, 10**8).read_bytes())]
    assert got == [h for h in stored if h.base_offset < first_bad]


def test_recovery_scans_only_from_the_recovery_point(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log, stored = build(directory)
    log.close()
    first = log_files(directory)[0]
    data = bytearray(first.read_bytes())
    data[100] ^= 1  # damage below the recovery point: trusted, never re-read
    first.write_bytes(data)
    leo = stored[-1].next_offset
    recovered = reopen(directory, recovery_point=leo)
    assert recovered.log_end_offset == leo
    assert first.read_bytes() == data


def test_recovery_point_inside_a_segment_keeps_trusted_indexes(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log, stored = build(directory, batches=12)
    assert len(log.segments) == 1
    log.close()
    path = log_files(directory)[0]
    middle = stored[6]
    data = bytearray(path.read_bytes())
    positions = [pos for pos, _ in iter_headers(data)]
    data[positions[3] + 30] ^= 1  # below the recovery point: not scanned
    data[positions[9] + 30] ^= 1  # above it: found and cut
    path.write_bytes(data)
    recovered = reopen(directory, recovery_point=middle.base_offset)
    assert recovered.log_end_offset == stored[9].base_offset
    assert path.stat().st_size == positions[9]
    # Reads through the kept index still land on the right batches.
    fetch = recovered.read(stored[7].base_offset, 1)
    assert fetch.first_offset == stored[7].base_offset


def test_missing_and_torn_indexes_are_rebuilt(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log, stored = build(directory)
    expected = log.read(0, 10**8).read_bytes()
    leo = log.log_end_offset
    log.flush()
    log.close()
    indexes = sorted(directory.glob("*.index"))
    saved = {p: p.read_bytes() for p in indexes}
    indexes[0].unlink()
    with open(indexes[1], "ab") as f:
        f.write(b"\x01\x02\x03")  # not a whole entry
    recovered = reopen(directory, recovery_point=leo, clean_shutdown=True)
    assert recovered.log_end_offset == leo
    assert recovered.read(0, 10**8).read_bytes() == expected
    for batch in stored[::5]:
        assert recovered.read(batch.base_offset, 1).first_offset == batch.base_offset
    recovered.close()
    assert indexes[0].read_bytes() == saved[indexes[0]]
    assert indexes[1].read_bytes() == saved[indexes[1]]


def _watch_log_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    touched: list[str] = []
    real_pread, real_read, real_open = os.pread, os.read, builtins.open

    def name(fd: int) -> str:
        try:
            return os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return ""

    def pread(fd: int, n: int, offset: int) -> bytes:
        if ".log" in name(fd):
            touched.append(name(fd))
        return real_pread(fd, n, offset)

    def read(fd: int, n: int) -> bytes:
        if ".log" in name(fd):
            touched.append(name(fd))
        return real_read(fd, n)

    def opener(file, *args, **kwargs):  # type: ignore[no-untyped-def]
        if ".log" in str(file):
            touched.append(str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(os, "pread", pread)
    monkeypatch.setattr(os, "read", read)
    monkeypatch.setattr(builtins, "open", opener)
    return touched


def test_clean_shutdown_open_reads_no_log_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tmp_path / "t-0"
    log, _ = build(directory, batches=60)
    log.flush()
    leo = log.log_end_offset
    log.close()
    recorded = log.segment_sizes()
    # Corrupt every .log file completely (same sizes): any scan would find garbage and cut.
    for path in log_files(directory):
        path.write_bytes(b"\xee" * path.stat().st_size)
    sizes = {p: p.stat().st_size for p in log_files(directory)}
    touched = _watch_log_reads(monkeypatch)
    opened = reopen(directory, recovery_point=leo, clean_shutdown=True, segment_sizes=recorded)
    monkeypatch.undo()
    assert touched == []
    assert opened.log_end_offset == leo
    assert {p: p.stat().st_size for p in log_files(directory)} == sizes
    opened.close()
    # The same damage without the clean-shutdown marker is found and cut away.
    recovered = reopen(directory, recovery_point=0)
    assert recovered.log_end_offset == 0


def test_clean_shutdown_without_a_usable_recovery_point_scans_one_interval(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "t-0"
    log, _ = build(directory)
    leo = log.log_end_offset
    log.close()
    sizes = log.segment_sizes()
    opened = reopen(directory, recovery_point=0, clean_shutdown=True, segment_sizes=sizes)
    assert opened.log_end_offset == leo


def test_producer_state_survives_a_crash(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = Log.open(directory, CONFIG, clock=FakeClock())
    batches = [
        make_batch([b"p%d" % i] * 3, producer_id=11, producer_epoch=2, base_sequence=3 * i)
        for i in range(30)
    ]
    infos = [log.append_as_leader(bytes(b)) for b in batches]
    assert len(log.segments) > 2
    # crash: no close, so no snapshot at the end; the replay rebuilds the state
    recovered = reopen(directory, recovery_point=infos[10].first_offset)
    again = recovered.append_as_leader(bytes(batches[-1]))
    assert again.duplicate and again.first_offset == infos[-1].first_offset
    nxt = make_batch([b"n"], producer_id=11, producer_epoch=2, base_sequence=90)
    assert recovered.append_as_leader(nxt).first_offset == infos[-1].last_offset + 1


def test_aborted_transactions_and_epochs_are_rebuilt(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = Log.open(directory, CONFIG, clock=FakeClock())
    txn = dict(producer_id=5, producer_epoch=0, attributes=ATTR_TRANSACTIONAL)
    first = log.append_as_leader(make_batch([b"a"], base_sequence=0, **txn), leader_epoch=1)
    for _ in range(10):
        log.append_as_leader(make_batch([b"x" * 50]), leader_epoch=1)
    log.append_as_leader(make_batch([b"b"], base_sequence=1, **txn), leader_epoch=3)
    marker = log.append_as_leader(
        make_control_batch(commit=False, producer_id=5), leader_epoch=3, origin="coordinator"
    )
    expected = log.collect_aborted_transactions(0, 10**6)
    assert [(t.first_offset, t.last_offset) for t in expected] == [
        (first.first_offset, marker.first_offset)
    ]
    for path in directory.glob("*.txnindex"):
        path.unlink()
    (directory / "leader-epoch-checkpoint").unlink(missing_ok=True)  # (not flushed yet)
    for path in directory.glob("*.snapshot"):
        path.unlink()
    recovered = reopen(directory, recovery_point=0)
    assert recovered.collect_aborted_transactions(0, 10**6) == expected
    assert recovered.leader_epoch_cache.entries == [(1, 0), (3, 11)]
    assert recovered.first_unstable_offset() is None


def test_open_finishes_or_discards_interrupted_operations(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log, stored = build(directory)
    leo = log.log_end_offset
    log.close()
    files = log_files(directory)
    # A compaction result ready to swap in for the first two segments (here: the same
    # data as the first two segments, concatenated).
    swapped = files[0].read_bytes() + files[1].read_bytes()
    (directory / (files[0].name + ".swap")).write_bytes(swapped)
    # Leftovers of a pending deletion and of an unfinished compaction.
    (directory / "00000000000000099999.log.deleted").write_bytes(b"x")
    (directory / "00000000000000099998.log.cleaned").write_bytes(b"x")
    (directory / "00000000000000099997.index").write_bytes(b"")  # orphan index
    recovered = reopen(directory, recovery_point=leo, clean_shutdown=True)
    names = sorted(p.name for p in directory.iterdir())
    assert not any(n.endswith((".deleted", ".cleaned", ".swap")) for n in names)
    assert "00000000000000099997.index" not in names
    assert files[1].name not in names  # covered by the swapped-in segment
    assert recovered.log_end_offset == leo
    got = [h for _, h in iter_headers(recovered.read(0, 10**8).read_bytes())]
    assert got == stored


def test_torn_batch_below_the_recovery_point_is_cut_at_every_byte(tmp_path: Path) -> None:
    """Damage after the fsync: the kept index entries must not outlive the cut batch."""
    pristine = tmp_path / "pristine" / "t-0"
    log, stored = build(pristine)
    leo = log.log_end_offset
    log.close()
    path, start, end = last_batch_span(pristine)
    work = tmp_path / "work" / "t-0"
    for cut in range(start, end, 7):
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(pristine, work)
        with open(work / path.name, "r+b") as f:
            f.truncate(cut)
        recovered = reopen(work, recovery_point=leo)
        assert recovered.log_end_offset == stored[-1].base_offset, cut
        data = recovered.read(0, 10**8).read_bytes()
        assert [h for _, h in iter_headers(data)] == stored[:-1], cut
        assert recovered.append_as_leader(make_batch([b"x"])).first_offset == stored[-1].base_offset
        recovered.close()
