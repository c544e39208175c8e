"""Synthetic website activity: page views and clicks as JSON, the demo pipeline's input.

One event per record, keyed by user id (so one user's events stay in order on one partition)::

    {"event_id": "3f2c...", "type": "page_view", "user_id": "u0042", "page": "/pricing",
     "ts": 1763848732123}
    {"event_id": "9a01...", "type": "click", "user_id": "u0042", "page": "/pricing",
     "element": "signup-button", "ts": 1763848733870}

``ts`` is the event time in milliseconds since the epoch. A small share of events arrives a few
seconds late (their ``ts`` lies in the past), which is what the pipeline's watermark is for.
A ``heartbeat`` event carries no activity; the generator sends one at the end with a
timestamp past the last window, so that the watermark moves on and the last windows close.
"""

from __future__ import annotations

import json
import random
import uuid
from dataclasses import dataclass

PAGES = ("/", "/pricing", "/docs", "/blog", "/signup", "/checkout")
# Pages are not equally popular: the weights make the results table worth reading.
PAGE_WEIGHTS = (30, 15, 25, 12, 10, 8)
ELEMENTS = ("nav-link", "signup-button", "buy-button", "search", "video")
CLICK_SHARE = 0.35
LATE_SHARE = 0.05
MAX_LATENESS_MS = 8_000

EVENT_TYPES = ("page_view", "click")
HEARTBEAT = "heartbeat"


@dataclass(frozen=True)
class Event:
    key: bytes
    value: bytes
    type: str
    page: str
    ts: int


class ActivityGenerator:
    """Deterministic for a given seed: the same seed and clock give the same events."""

    def __init__(self, *, seed: int | None = None, users: int = 500) -> None:
        self._rng = random.Random(seed)
        self._users = users

    def event(self, now_ms: int) -> Event:
        rng = self._rng
        user = f"u{rng.randrange(self._users):04d}"
        page = rng.choices(PAGES, PAGE_WEIGHTS)[0]
        ts = now_ms
        if rng.random() < LATE_SHARE:
            ts -= rng.randrange(1, MAX_LATENESS_MS)
        body: dict[str, object] = {
            "event_id": str(uuid.UUID(int=rng.getrandbits(128))),
            "type": "click" if rng.random() < CLICK_SHARE else "page_view",
            "user_id": user,
            "page": page,
            "ts": ts,
        }
        if body["type"] == "click":
            body["element"] = rng.choice(ELEMENTS)
        value = json.dumps(body, separators=(",", ":")).encode()
        return Event(user.encode(), value, str(body["type"]), page, ts)


def heartbeat(ts_ms: int) -> bytes:
    """A record that only advances event time (ignored by the counts)."""
    return json.dumps({"type": HEARTBEAT, "ts": ts_ms}, separators=(",", ":")).encode()


def event_time(value: bytes | None) -> int | None:
    """The ``ts`` of an event or heartbeat record, None for anything else."""
    try:
        ts = json.loads(value or b"").get("ts")
    except (ValueError, AttributeError):
        return None
    return ts if isinstance(ts, int) else None


def closing_time(last_event_ms: int, window_ms: int, watermark_delay_ms: int) -> int:
    """The earliest event time that closes the window of ``last_event_ms``: its end plus the
    watermark delay (Spark closes a window once the watermark reaches its end)."""
    window_end = (last_event_ms // window_ms + 1) * window_ms
    return window_end + watermark_delay_ms
