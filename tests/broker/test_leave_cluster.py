"""``leave_cluster``: a broker stops following before it asks for its controlled
shutdown, so a partition it led and now follows cannot take it back into the ISR."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from odradek.broker import cluster_mode
from odradek.broker.config import BrokerConfig


class _Fetchers:
    def __init__(self) -> None:
        self.closed = False

    async def close(self) -> None:
        self.closed = True


def test_fetchers_are_closed_before_the_controller_is_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fetchers = _Fetchers()
    seen: dict[str, Any] = {}

    async def fake_controlled_shutdown(*_args: Any, **_kwargs: Any) -> bool:
        seen["fetchers closed when asked"] = fetchers.closed
        return True

    monkeypatch.setattr(cluster_mode, "controlled_shutdown", fake_controlled_shutdown)
    zk = SimpleNamespace(connected=True, interrupt=lambda: None)
    membership = SimpleNamespace(zk=zk, broker_id=1, broker_epoch=5)
    parts = SimpleNamespace(
        fetchers=fetchers,
        metadata_cache=None,
        address_of=lambda _b: None,
        connector=None,
        configs=SimpleNamespace(configs=SimpleNamespace(stop=lambda: None)),
    )
    config = BrokerConfig({})
    asyncio.run(cluster_mode.leave_cluster(membership, config, parts, None))  # type: ignore[arg-type]
    assert seen == {"fetchers closed when asked": True}
