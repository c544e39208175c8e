"""meta.properties: written at first start, checked at every later one."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.storage import meta_properties as mp


def test_first_start_writes_kafka_layout(tmp_path: Path) -> None:
    mp.check_and_write(tmp_path, 4, "abcCLUSTER")
    text = (tmp_path / "meta.properties").read_text()
    lines = text.splitlines()
    assert lines[0] == "#" and lines[1].startswith("#")
    assert {"version=0", "broker.id=4", "cluster.id=abcCLUSTER"} <= set(lines[2:])
    assert mp.read(tmp_path) == mp.MetaProperties(4, "abcCLUSTER")


def test_same_identity_starts_again(tmp_path: Path) -> None:
    mp.check_and_write(tmp_path, 1, "c1")
    mp.check_and_write(tmp_path, 1, "c1")
    mp.check_and_write(tmp_path, 1)  # cluster id not known yet: nothing to compare


def test_broker_id_mismatch_is_refused(tmp_path: Path) -> None:
    mp.check_and_write(tmp_path, 0)
    expected = r"Configured broker\.id 2 doesn't match stored broker\.id 0"
    with pytest.raises(mp.InconsistentBrokerIdError, match=expected):
        mp.check_and_write(tmp_path, 2)
    assert mp.read(tmp_path) == mp.MetaProperties(0)  # untouched


def test_cluster_id_mismatch_is_refused(tmp_path: Path) -> None:
    mp.check_and_write(tmp_path, 0, "first")
    with pytest.raises(mp.InconsistentClusterIdError, match="The Cluster ID second doesn't match"):
        mp.check_and_write(tmp_path, 0, "second")


def test_missing_cluster_id_is_added_when_known(tmp_path: Path) -> None:
    mp.check_and_write(tmp_path, 0)
    assert mp.read(tmp_path) == mp.MetaProperties(0, None)
    mp.check_and_write(tmp_path, 0, "late")
    assert mp.read(tmp_path) == mp.MetaProperties(0, "late")


def test_kafka_written_file_is_read(tmp_path: Path) -> None:
    (tmp_path / "meta.properties").write_text(
        "#\n#Tue Nov 24 01:00:00 UTC 2026\ncluster.id=Kq9\nversion=0\nbroker.id=7\n"
    )
    assert mp.read(tmp_path) == mp.MetaProperties(7, "Kq9")


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("broker.id=1\n", "missing or invalid version"),
        ("version=1\nnode.id=1\n", "version 1 is not supported"),
        ("version=0\nbroker.id=x\n", "invalid broker.id"),
    ],
)
def test_bad_file_is_refused(tmp_path: Path, text: str, fragment: str) -> None:
    (tmp_path / "meta.properties").write_text(text)
    with pytest.raises(mp.MetaPropertiesError, match=fragment):
        mp.check_and_write(tmp_path, 1)
