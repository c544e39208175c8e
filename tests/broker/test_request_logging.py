"""Log lines of requests: a failing request names its client id, listener and API (in
text and in JSON), lines logged while a request runs carry its fields, and the
slow-request log (kafka.request.logger) reports API, client, listener, queue and total
time. The network layer runs in-process; the formatters are the broker's own."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from odradek.broker.metrics import BrokerStats, RequestObserver
from odradek.broker.requests import DeferredResponse, RequestContext
from odradek.logformat import JsonFormatter, RequestContextFilter, TextFormatter
from odradek.protocol.versions import HEARTBEAT
from tests.broker.test_network import Client, EchoHandler, heartbeat, run, started


@pytest.fixture
def captured() -> Iterator[dict[str, io.StringIO]]:
    """The root logger writes JSON to one buffer and text to another, as the broker's
    handler would."""
    buffers = {"json": io.StringIO(), "text": io.StringIO()}
    handlers = []
    for kind, formatter in (("json", JsonFormatter()), ("text", TextFormatter())):
        handler = logging.StreamHandler(buffers[kind])
        handler.setFormatter(formatter)
        handler.addFilter(RequestContextFilter())
        handlers.append(handler)
    root = logging.getLogger()
    old_level = root.level
    root.setLevel(logging.INFO)
    for handler in handlers:
        root.addHandler(handler)
    try:
        yield buffers
    finally:
        for handler in handlers:
            root.removeHandler(handler)
        root.setLevel(old_level)


def _json_lines(buffer: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in buffer.getvalue().splitlines() if line.strip()]


class LoggingHandler(EchoHandler):
    """Logs a warning while handling, and again inside its deferred response."""

    async def handle(self, ctx: RequestContext, request: Any) -> Any:
        logging.getLogger("odradek.test.inside").warning("handling it")
        response = await super().handle(ctx, request)

        async def later() -> Any:
            await asyncio.sleep(0.01)
            logging.getLogger("odradek.test.deferred").warning("finishing it")
            return response

        return DeferredResponse(later())


def test_a_failed_request_names_client_listener_and_api(captured) -> None:
    async def main() -> None:
        handler = EchoHandler()
        handler.fail_on = {5}
        server = await started(handler, listener_name="INTERNAL")
        client = await Client.connect(server.port)
        client.send(heartbeat(4), 5, client_id="billing-app")
        await client.read(HEARTBEAT, 4)
        client.close()
        await server.shutdown(timeout=5)

    run("asyncio", main)
    errors = [e for e in _json_lines(captured["json"]) if e["level"] == "ERROR"]
    assert len(errors) == 1
    entry = errors[0]
    assert entry["logger"] == "odradek.broker.network"
    assert entry["client_id"] == "billing-app"
    assert entry["listener"] == "INTERNAL"
    assert (entry["api"], entry["api_version"], entry["correlation_id"]) == ("Heartbeat", 4, 5)
    assert "RuntimeError: boom 5" in entry["exception"]
    assert {"time", "message"} <= set(entry)
    # The text line says the same in words.
    text = captured["text"].getvalue()
    assert "handler failed for Heartbeat v4 (correlation id 5) from client billing-app" in text
    assert "on listener INTERNAL" in text
    assert "[client_id=billing-app listener=INTERNAL api=Heartbeat v4]" in text


def test_lines_logged_while_a_request_runs_carry_its_fields(captured) -> None:
    async def main() -> None:
        server = await started(LoggingHandler(), listener_name="EXTERNAL")
        client = await Client.connect(server.port)
        client.send(heartbeat(4), 9, client_id="reporter")
        await client.read(HEARTBEAT, 4)
        client.close()
        await server.shutdown(timeout=5)
        # Outside any request: no request fields.
        logging.getLogger("odradek.test.after").warning("after it")

    run("asyncio", main)
    entries = {e["logger"]: e for e in _json_lines(captured["json"])}
    for name in ("odradek.test.inside", "odradek.test.deferred"):
        entry = entries[name]
        assert entry["client_id"] == "reporter", entry
        assert entry["listener"] == "EXTERNAL"
        assert (entry["api"], entry["api_version"], entry["correlation_id"]) == (
            "Heartbeat",
            4,
            9,
        )
    assert "api" not in entries["odradek.test.after"]


def test_json_lines_are_one_object_per_line(captured) -> None:
    log = logging.getLogger("odradek.test.json")
    log.info("two\nlines", extra={"partition": "orders-0"})
    try:
        raise ValueError("bad")
    except ValueError:
        log.exception("with a traceback")
    lines = captured["json"].getvalue().splitlines()
    assert len(lines) == 2
    first, second = (json.loads(line) for line in lines)
    assert first["message"] == "two\nlines" and first["partition"] == "orders-0"
    assert first["level"] == "INFO" and first["logger"] == "odradek.test.json"
    assert first["time"].endswith("Z") and "T" in first["time"]
    assert "ValueError: bad" in second["exception"]


@pytest.mark.parametrize("threshold_ms", [0, 60_000, -1])
def test_slow_request_log(captured, threshold_ms: int) -> None:
    stats = BrokerStats()

    async def main() -> None:
        handler = EchoHandler()
        handler.delay = lambda _cid: 0.05
        server = await started(
            handler,
            listener_name="PLAINTEXT",
            request_observer=RequestObserver(stats, threshold_ms),
        )
        client = await Client.connect(server.port)
        client.send(heartbeat(4), 3, client_id="sluggish")
        await client.read(HEARTBEAT, 4)
        client.close()
        await server.shutdown(timeout=5)

    run("asyncio", main)
    slow = [e for e in _json_lines(captured["json"]) if e["logger"] == "kafka.request.logger"]
    # The request counts in the metrics whatever the threshold.
    assert stats.requests["Heartbeat"].by_version == {4: 1}
    assert stats.requests["Heartbeat"].total.total >= 50
    if threshold_ms != 0:
        assert slow == []
        return
    assert len(slow) == 1
    entry = slow[0]
    assert entry["level"] == "INFO"
    assert (entry["api"], entry["api_version"]) == ("Heartbeat", 4)
    assert (entry["client_id"], entry["listener"]) == ("sluggish", "PLAINTEXT")
    assert entry["total_time_ms"] >= 50
    assert 0 <= entry["queue_time_ms"] <= entry["total_time_ms"]
    assert "Slow request: Heartbeat v4 (correlation id 3) from client sluggish" in (
        entry["message"]
    )
    assert "on listener PLAINTEXT" in entry["message"] and "total time" in entry["message"]
