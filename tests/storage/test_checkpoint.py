from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.storage import checkpoint
from odradek.storage.checkpoint import OffsetCheckpointFile, atomic_write
from odradek.storage.errors import CorruptCheckpointError
from odradek.storage.partition_metadata import (
    PartitionMetadataFile,
    decode_topic_id,
    encode_topic_id,
)


def test_kafka_text_format(tmp_path: Path) -> None:
    cp = OffsetCheckpointFile(tmp_path / "recovery-point-offset-checkpoint")
    cp.write({("orders", 1): 1210, ("orders", 0): 1500, ("a.b_c-d", 7): 0})
    assert cp.path.read_text() == "0\n3\na.b_c-d 7 0\norders 0 1500\norders 1 1210\n"
    assert cp.read() == {("orders", 1): 1210, ("orders", 0): 1500, ("a.b_c-d", 7): 0}


def test_absent_file_is_empty(tmp_path: Path) -> None:
    assert OffsetCheckpointFile(tmp_path / "nope").read() == {}


@pytest.mark.parametrize(
    "content",
    [
        "",
        "0\n",
        "1\n0\n",
        "0\nx\n",
        "0\n2\nt 0 1\n",
        "0\n1\nt 0\n",
        "0\n1\nt zero 1\n",
        "0\n1\nt 0 1 2\n",
        "\xff\xfe",
    ],
)
def test_malformed_files_are_rejected(tmp_path: Path, content: str) -> None:
    path = tmp_path / "cp"
    path.write_bytes(content.encode("latin-1"))
    with pytest.raises(CorruptCheckpointError):
        OffsetCheckpointFile(path).read()


def test_topic_names_with_spaces_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        OffsetCheckpointFile(tmp_path / "cp").write({("bad topic", 0): 1})


def test_a_crash_before_the_rename_keeps_the_old_content(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cp = OffsetCheckpointFile(tmp_path / "cp")
    cp.write({("t", 0): 5})
    before = cp.path.read_bytes()

    def crash(*_args: object) -> None:
        raise OSError("power loss")

    monkeypatch.setattr(checkpoint.os, "replace", crash)
    with pytest.raises(OSError):
        cp.write({("t", 0): 6})
    assert cp.path.read_bytes() == before  # the old checkpoint is intact
    assert cp.read() == {("t", 0): 5}
    monkeypatch.undo()
    cp.write({("t", 0): 7})  # the stray .tmp is simply overwritten
    assert cp.read() == {("t", 0): 7}


def test_atomic_write_fsyncs_file_and_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(checkpoint.os, "fsync", spy)
    atomic_write(tmp_path / "x", b"data")
    assert synced == [str(tmp_path / "x.tmp"), str(tmp_path)]
    assert (tmp_path / "x").read_bytes() == b"data"


@settings(max_examples=30, deadline=None)
@given(
    st.dictionaries(
        st.tuples(st.from_regex(r"[a-zA-Z0-9._-]{1,20}", fullmatch=True), st.integers(0, 1000)),
        st.integers(-1, 2**63 - 1),
        max_size=20,
    )
)
def test_round_trip(tmp_path_factory: pytest.TempPathFactory, offsets: dict) -> None:
    cp = OffsetCheckpointFile(tmp_path_factory.mktemp("cp") / "cp")
    cp.write(offsets)
    assert cp.read() == offsets


def test_partition_metadata(tmp_path: Path) -> None:
    topic_id = uuid.UUID("de7e6f5c-1b9a-4a3f-9d8e-0123456789ab")
    encoded = encode_topic_id(topic_id)
    assert len(encoded) == 22 and "=" not in encoded
    assert decode_topic_id(encoded) == topic_id
    meta = PartitionMetadataFile(tmp_path)
    assert meta.read() is None
    meta.write(topic_id)
    assert meta.path.read_text() == f"version: 0\ntopic_id: {encoded}\n"
    assert meta.read() == topic_id
    meta.path.write_text("version: 0\ntopic_id: !!\n")
    with pytest.raises(CorruptCheckpointError):
        meta.read()
    meta.path.write_text("version: 1\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA\n")
    with pytest.raises(CorruptCheckpointError):
        meta.read()
