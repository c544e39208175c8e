"""The producer's parts import only the parts below them (producer -> sender -> idempotence,
accumulator -> config, batch), so each can be read, and changed, without the ones above."""

from __future__ import annotations

import ast
from pathlib import Path

import odradek.client

CLIENT = Path(odradek.client.__file__).parent

# Each part and the parts it may import; a part missing from a list is above it.
ALLOWED = {
    "producer_batch": set(),
    "producer_config": set(),
    "accumulator": {"producer_batch", "producer_config"},
    "idempotence": {"producer_batch", "producer_config"},
    "sender": {"accumulator", "idempotence", "producer_batch", "producer_config"},
    "producer": {"accumulator", "idempotence", "producer_batch", "producer_config", "sender"},
}


def imported_parts(module: str) -> set[str]:
    tree = ast.parse((CLIENT / f"{module}.py").read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    prefix = "odradek.client."
    return {n.removeprefix(prefix) for n in names if n.removeprefix(prefix) in ALLOWED}


def test_producer_parts_import_only_downward() -> None:
    for module, allowed in ALLOWED.items():
        assert imported_parts(module) <= allowed, module


def test_a_setting_changed_on_the_producer_reaches_its_parts() -> None:
    from odradek.client.producer import Producer

    producer = Producer("127.0.0.1:9", linger_ms=5, retries=3)
    producer.linger_ms = 250
    producer.retries = 0
    assert producer._accumulator._config.linger_ms == 250
    assert producer._sender._config.retries == 0
    assert (producer.linger_ms, producer.retries) == (250, 0)
