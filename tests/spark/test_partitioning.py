"""The vectorised murmur2 partitioner agrees with the client's (Java-compatible) one."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.client.partitioner import partition_for_key
from odradek.spark.partitioning import partitions_for_keys


@settings(max_examples=300)
@given(
    st.lists(st.one_of(st.none(), st.binary(max_size=23)), max_size=60),
    st.integers(1, 100),
    st.integers(0, 5),
)
def test_matches_the_client_partitioner(keys: list[bytes | None], partitions: int, cut: int):
    array = pa.array(keys, type=pa.binary())
    sliced = array.slice(min(cut, len(keys)))  # a non-zero array offset, as Arrow slices have
    got = partitions_for_keys(sliced, partitions).tolist()
    want = [
        -1 if k is None else partition_for_key(k, partitions) for k in keys[min(cut, len(keys)) :]
    ]
    assert got == want


def test_string_keys_hash_as_their_utf8_bytes() -> None:
    keys = ["user-1", "ключ", ""]
    got = partitions_for_keys(pa.array(keys), 7).tolist()
    assert got == [partition_for_key(k.encode(), 7) for k in keys]


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        partitions_for_keys(pa.array([b"a"]), 0)
    with pytest.raises(TypeError):
        partitions_for_keys(pa.array([1]), 3)
