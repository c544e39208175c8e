"""An append that fails on a full disk leaves nothing behind, index entries included.

The data write can succeed and the index entry after it fail (the data filled the last
free page). Before, the batch stayed in the segment file while the log end offset did
not move, so the next acknowledged batch was appended after it with the same offsets,
and recovery after a restart served the unacknowledged batch in its place.
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from pathlib import Path

import pytest

from odradek.records.header import iter_headers
from odradek.storage.config import LogConfig
from odradek.storage.errors import StorageError
from odradek.storage.index_file import IndexFile
from odradek.storage.log import Log
from odradek.storage.log_dir_failure import is_io_failure
from tests.storage.conftest import make_batch

# An index entry for every batch, so every append writes one.
CONFIG = LogConfig(index_interval_bytes=1)
T0 = 1_700_000_000_000


def values(log: Log) -> list[tuple[int, bytes]]:
    data = log.read(0, 10**7).read_bytes()
    out = []
    for pos, header in iter_headers(data):
        batch = data[pos : pos + header.size]
        out.append((header.base_offset, b"LOST" in batch))
    return out


@pytest.mark.parametrize("failing_index", ["offset", "time"])
def test_failed_index_entry_takes_the_batch_back(
    open_log: Callable[..., Log], log_dir: Path, monkeypatch: pytest.MonkeyPatch,
    failing_index: str,
) -> None:  # fmt: skip
    log = open_log(CONFIG)
    log.append_as_leader(make_batch([b"a" * 100], timestamp=T0 + 1))
    log.append_as_leader(make_batch([b"b" * 100], timestamp=T0 + 2))
    segment_file = log_dir / "00000000000000000000.log"
    size_before = segment_file.stat().st_size
    real_append = IndexFile._append_raw

    def full(self: IndexFile, *entry: int) -> None:
        if self.path.suffix == f".{'index' if failing_index == 'offset' else 'timeindex'}":
            raise OSError(errno.ENOSPC, "No space left on device")
        real_append(self, *entry)

    monkeypatch.setattr(IndexFile, "_append_raw", full)
    with pytest.raises(StorageError) as failed:
        log.append_as_leader(make_batch([b"LOST" * 25], timestamp=T0 + 3))
    assert is_io_failure(failed.value)
    monkeypatch.undo()
    assert segment_file.stat().st_size == size_before
    assert log.log_end_offset == 2
    assert log.append_as_leader(make_batch([b"c" * 100], timestamp=T0 + 4)).first_offset == 2
    assert values(log) == [(0, False), (1, False), (2, False)]
    assert log.offset_for_timestamp(T0 + 3) == (2, T0 + 4)
    log.close()
    # An unclean restart (recovery reads the segment) sees exactly the acknowledged batches.
    reopened = open_log(CONFIG, recovery_point=0)
    assert reopened.log_end_offset == 3
    assert values(reopened) == [(0, False), (1, False), (2, False)]
