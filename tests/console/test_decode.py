"""The message browser's formats, and the sampler's arithmetic (no cluster needed)."""

from __future__ import annotations

import pytest

from odradek.console.decode import Formats, Shown, show
from odradek.console.gateway import ConsoleError, parse_datetime, parse_int
from odradek.console.sampler import Sample, Sampler


def test_text_json_hex() -> None:
    assert show(None, "json") == Shown(None)
    assert show(b"caf\xc3\xa9", "text") == Shown("café")
    assert show(b'{"a":[1,2]}', "json") == Shown('{\n  "a": [\n    1,\n    2\n  ]\n}')
    assert show(b"\x00\xff", "hex") == Shown("00 ff")
    assert show(b"", "hex") == Shown("")


def test_what_does_not_fit_says_so() -> None:
    assert show(b"plain", "json") == Shown("plain", "not JSON")
    assert show(b"\xff\xfe", "text") == Shown("\ufffd\ufffd", "not valid UTF-8")
    assert show(b"\xff", "json").note == "not valid UTF-8"
    with pytest.raises(ValueError, match="value format must be one of text, json, hex"):
        Formats(value="yaml")


def test_form_fields() -> None:
    assert parse_int(" 12 ", "offset") == 12
    assert parse_int("", "offset") is None
    with pytest.raises(ConsoleError, match="offset must be >= 0") as bad:
        parse_int("-1", "offset")
    assert bad.value.status == 400
    with pytest.raises(ConsoleError, match="whole number"):
        parse_int("1.5", "offset")
    assert parse_datetime("2023-11-14T22:13:20") == 1_700_000_000_000  # UTC when no zone
    assert parse_datetime("2023-11-14T23:13:20+01:00") == 1_700_000_000_000
    with pytest.raises(ConsoleError, match="before 1970"):
        parse_datetime("1969-12-31T23:00:00")


def test_throughput_and_lag_series() -> None:
    sampler = Sampler(gateway=None, interval_s=1)  # type: ignore[arg-type]
    sampler.samples.extend(
        [
            Sample(100.0, {"a": 10, "b": 50}, {"g": {"a": 4}}),
            Sample(102.0, {"a": 30, "b": 50}, {"g": {"a": 2}}),
            Sample(104.0, {"a": 31, "b": 5}, {}),  # b deleted and recreated: no rate for it
        ]
    )
    assert sampler.throughput() == {
        "a": {"t": [102.0, 104.0], "rate": [10.0, 0.5]},
        "b": {"t": [102.0], "rate": [0.0]},
    }
    assert sampler.current_rate("a") == 0.5
    assert sampler.current_rate("missing") is None
    assert sampler.lag("g") == {"a": {"t": [100.0, 102.0], "lag": [4, 2]}}


def test_console_uses_only_the_client() -> None:
    """The console reaches brokers only through odradek's client, never their code."""
    import subprocess
    import sys

    code = (
        "import sys, odradek.console.app, odradek.cli.console; "
        "bad = sorted(m for m in sys.modules "
        "if m.startswith(('odradek.broker', 'odradek.storage')));"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
