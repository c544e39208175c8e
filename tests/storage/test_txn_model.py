"""Model check: interleaved transactional and plain appends, commits and aborts against the
LSO and aborted-transaction rules (what a read_committed fetch relies on), also after the
log is reopened."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.storage.config import LogConfig
from odradek.storage.log import Log
from tests.storage.conftest import ATTR_TRANSACTIONAL, FakeClock, make_batch, make_control_batch

PRODUCERS = (11, 12, 13)
# ("plain",) | ("txn", producer) | ("end", producer, commit)
OPS = st.lists(
    st.one_of(
        st.just(("plain", 0, False)),
        st.tuples(st.just("txn"), st.sampled_from(PRODUCERS), st.just(False)),
        st.tuples(st.just("end"), st.sampled_from(PRODUCERS), st.booleans()),
    ),
    max_size=40,
)


def _check(log: Log, open_first: dict[int, int], aborted: list[tuple[int, int, int]]) -> None:
    expected_lso = min(open_first.values()) if open_first else None
    assert log.first_unstable_offset() == expected_lso
    got = [
        (t.producer_id, t.first_offset, t.last_offset)
        for t in log.collect_aborted_transactions(0, log.log_end_offset)
    ]
    assert sorted(got, key=lambda t: t[2]) == sorted(aborted, key=lambda t: t[2])
    # A fetch from offset f up to the end sees exactly the aborted transactions that
    # overlap [f, end): those whose marker is at or after f.
    for start in range(0, log.log_end_offset + 1, 3):
        window = log.collect_aborted_transactions(start, log.log_end_offset)
        want = [a for a in aborted if a[2] >= start]
        assert sorted((t.producer_id, t.first_offset) for t in window) == sorted(
            (p, f) for p, f, _ in want
        )


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=OPS)
def test_lso_and_aborted_index_follow_the_model(tmp_path_factory, ops) -> None:  # type: ignore[no-untyped-def]
    directory: Path = tmp_path_factory.mktemp("m") / "topic-0"
    config = LogConfig(segment_bytes=600)
    clock = FakeClock()
    log = Log.open(directory, config, clock=clock)
    try:
        sequences = dict.fromkeys(PRODUCERS, 0)
        open_first: dict[int, int] = {}
        aborted: list[tuple[int, int, int]] = []
        for kind, producer, commit in ops:
            if kind == "plain":
                log.append_as_leader(make_batch([b"p"]))
            elif kind == "txn":
                info = log.append_as_leader(
                    make_batch(
                        [b"t"],
                        producer_id=producer,
                        producer_epoch=0,
                        base_sequence=sequences[producer],
                        attributes=ATTR_TRANSACTIONAL,
                    )
                )
                sequences[producer] += 1
                open_first.setdefault(producer, info.first_offset)
            elif producer in open_first:
                info = log.append_as_leader(
                    make_control_batch(commit=commit, producer_id=producer),
                    origin="coordinator",
                )
                first = open_first.pop(producer)
                if not commit:
                    aborted.append((producer, first, info.first_offset))
            _check(log, open_first, aborted)
        log.close()
        log = Log.open(directory, config, clock=clock)
        _check(log, open_first, aborted)
    finally:
        log.close()
