"""The fetcher's side of a fetch session (Kafka's ``FetchSessionHandler``), for followers.

A follower fetching many partitions from one leader sends them all once (a full request,
epoch 0); the leader answers with a session id. Later requests carry the next epoch and
only the partitions whose fetch parameters changed (a partition that got records has a
new fetch offset), plus the partitions dropped since (``forgotten``); the leader reads the
rest from its session and answers only partitions with news. Any doubt about what the
leader holds (a session error, a lost connection, a request that may or may not have
arrived) goes back to a full request naming the old id, which closes that session.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
_MAX_INT32 = 0x7FFFFFFF


class FetchSessionHandler:
    def __init__(self) -> None:
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        # What the leader's session holds: partition -> the parameters last sent for it.
        self._held: dict[Hashable, Hashable] = {}
        self._pending: dict[Hashable, Hashable] = {}

    def build(
        self, wanted: Mapping[Hashable, Hashable]
    ) -> tuple[int, int, list[Hashable], list[Hashable]]:
        """(session id, epoch, partitions to send, partitions to forget) for a request
        that should fetch exactly ``wanted`` (partition -> fetch parameters)."""
        self._pending = dict(wanted)
        if self.epoch == INITIAL_EPOCH:
            return self.session_id, INITIAL_EPOCH, list(wanted), []
        send = [key for key, params in wanted.items() if self._held.get(key) != params]
        forget = [key for key in self._held if key not in wanted]
        return self.session_id, self.epoch, send, forget

    def handle_response(self, error_code: int, session_id: int) -> None:
        """Note the answer to the request ``build`` last described."""
        if error_code != 0:
            self.reset()
            return
        if session_id == INVALID_SESSION_ID:
            # The leader declined (a full cache) or closed the session: full next time.
            self.session_id, self.epoch, self._held = INVALID_SESSION_ID, INITIAL_EPOCH, {}
            return
        if self.epoch == INITIAL_EPOCH or session_id != self.session_id:
            self.session_id, self.epoch = session_id, 1
        else:
            self.epoch = 1 if self.epoch == _MAX_INT32 else self.epoch + 1
        self._held = self._pending

    def reset(self) -> None:
        """Send a full request next, closing the current session on the leader."""
        self.epoch = INITIAL_EPOCH
        self._held = {}
