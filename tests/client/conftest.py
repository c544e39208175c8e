"""Run ``async def`` tests of this package on a fresh asyncio event loop each.

No pytest-asyncio here: this small hook is all the client tests need. Each coroutine test
runs under ``asyncio.run`` (so tasks left behind are cancelled and reported at the end).
"""

from __future__ import annotations

import asyncio
import inspect

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    names = pyfuncitem._fixtureinfo.argnames
    kwargs = {name: pyfuncitem.funcargs[name] for name in names}
    asyncio.run(pyfuncitem.obj(**kwargs))
    return True
