"""Unit tests of the follower's side of a fetch session (what each request names)."""

from __future__ import annotations

from odradek.broker.fetch_session_handler import FetchSessionHandler


def test_first_request_is_full_then_only_changes_and_forgotten() -> None:
    handler = FetchSessionHandler()
    wanted = {("a", 0): 10, ("a", 1): 20, ("b", 0): 30}
    assert handler.build(wanted) == (0, 0, [("a", 0), ("a", 1), ("b", 0)], [])
    handler.handle_response(0, 77)
    assert (handler.session_id, handler.epoch) == (77, 1)

    # Partition a-1 got records (its fetch offset moved) and b-0 is no longer fetched.
    assert handler.build({("a", 0): 10, ("a", 1): 25}) == (77, 1, [("a", 1)], [("b", 0)])
    handler.handle_response(0, 77)
    assert handler.build({("a", 0): 10, ("a", 1): 25}) == (77, 2, [], [])
    handler.handle_response(0, 77)
    assert handler.epoch == 3


def test_session_error_or_lost_request_goes_back_to_a_full_request_naming_the_id() -> None:
    handler = FetchSessionHandler()
    handler.build({("a", 0): 1})
    handler.handle_response(0, 5)
    handler.build({("a", 0): 1})
    handler.handle_response(71, 0)  # INVALID_FETCH_SESSION_EPOCH
    # A full request naming the old id closes it on the leader and opens a new one.
    assert handler.build({("a", 0): 1}) == (5, 0, [("a", 0)], [])
    handler.handle_response(0, 6)
    assert (handler.session_id, handler.epoch) == (6, 1)
    handler.reset()  # the connection was lost with a request in flight
    assert handler.build({("a", 0): 2}) == (6, 0, [("a", 0)], [])


def test_declined_session_keeps_sending_full_requests() -> None:
    handler = FetchSessionHandler()
    handler.build({("a", 0): 1})
    handler.handle_response(0, 0)  # the leader's cache had no room
    assert handler.build({("a", 0): 1}) == (0, 0, [("a", 0)], [])
