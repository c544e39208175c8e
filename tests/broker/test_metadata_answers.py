"""The kept encoded Metadata answers: one generation at a time, bounded."""

from __future__ import annotations

from odradek.broker.metadata_answers import EncodedAnswers


def test_answers_last_one_generation() -> None:
    answers = EncodedAnswers()
    assert answers.get(1, "k") is None
    answers.put(1, "k", b"body")
    assert answers.get(1, "k") == b"body"
    assert answers.get(2, "k") is None  # the metadata changed: everything is dropped
    assert answers.get(1, "k") is None
    # Built from generation 2 but stored after the metadata moved to 3: not kept.
    answers.get(2, "k")
    answers.get(3, "other")
    answers.put(2, "k", b"stale")
    assert answers.get(3, "k") is None


def test_answers_are_bounded_in_count_and_bytes() -> None:
    answers = EncodedAnswers(max_entries=2, max_bytes=100)
    answers.get(1, "a")
    answers.put(1, "a", b"a" * 10)
    answers.put(1, "b", b"b" * 10)
    assert answers.get(1, "a") is not None  # now the most recently used
    answers.put(1, "c", b"c" * 10)
    assert answers.get(1, "b") is None and answers.get(1, "a") is not None
    answers.put(1, "huge", b"h" * 26)  # over a quarter of the byte budget: not kept
    assert answers.get(1, "huge") is None
    answers.put(1, "d", b"d" * 25)
    answers.put(1, "e", b"e" * 25)
    assert answers.get(1, "e") is not None
