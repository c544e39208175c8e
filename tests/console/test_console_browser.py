"""The web console in a real browser: headless Chromium (Selenium) against ``odradek console``
subprocesses over a real broker, with data produced and groups committed by confluent-kafka.

Numbers on the pages are checked against independent sources: partition offsets against
confluent-kafka's watermarks, sizes against ``odradek log-dirs describe``, lag against
``odradek groups describe``. Every page visited is saved as a screenshot under tmp_path.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cli.helpers import odradek
from tests.console.helpers import ConsoleProcess, chromium, http
from tests.helpers.broker import BrokerProcess, free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

T0 = 1_700_000_000_000  # timestamps of the payments records: T0, T0 + 1 min, ...
BILLING = {("orders", 0): 4, ("orders", 1): 10, ("orders", 2): 2}  # committed offsets


def _wait(condition: Any, timeout: float = 15.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    broker = BrokerProcess(tmp_path_factory.mktemp("console") / "data").start()
    bootstrap = broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [
            NewTopic("orders", 3, 1, config={"retention.ms": "3600000"}),
            NewTopic("payments", 1, 1),
        ]
    )
    for future in futures.values():
        future.result(15)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(30):
        producer.produce(
            "orders",
            key=f"order-{i}",
            value=json.dumps({"id": i, "item": "widget"}),
            partition=i % 3,
            headers=[("source", b"test")],
        )
    for i in range(5):
        producer.produce("payments", value=f"payment-{i}", timestamp=T0 + i * 60_000)
    producer.produce("payments", value=b"\x00\x01\xfe\xff", timestamp=T0 + 5 * 60_000)
    assert producer.flush(15) == 0

    def commit(group: str, offsets: dict[tuple[str, int], int]) -> None:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
        consumer.commit(
            offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False
        )
        consumer.close()

    commit("billing", BILLING)
    commit("reset-me", {("orders", 0): 7})
    # A live member: subscribed to payments, committed at 3 of 6.
    live = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "live",
            "client.id": "live-client",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    live.subscribe(["payments"])
    _wait(lambda: live.poll(0.2) is not None and live.assignment(), what="live assignment")
    live.commit(offsets=[TopicPartition("payments", 0, 3)], asynchronous=False)
    try:
        yield {"broker": broker, "bootstrap": bootstrap, "admin": admin, "producer": producer}
    finally:
        live.close()
        broker.stop()


@pytest.fixture(scope="module")
def console(cluster: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    proc = ConsoleProcess(cluster["bootstrap"], tmp_path_factory.mktemp("logs") / "console.log")
    try:
        yield proc.url
    finally:
        proc.stop()
        assert "Traceback" not in proc.log_text(), proc.log_text()


@pytest.fixture(scope="module")
def console_rw(cluster: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    proc = ConsoleProcess(
        cluster["bootstrap"], tmp_path_factory.mktemp("logs") / "console-rw.log", "--allow-writes"
    )
    try:
        yield proc.url
    finally:
        proc.stop()
        assert "Traceback" not in proc.log_text(), proc.log_text()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as driver:
        yield driver


def _open(browser: Any, url: str, shot: Path) -> Any:
    from selenium.webdriver.common.by import By

    browser.get(url)
    browser.find_element(By.TAG_NAME, "main")
    browser.save_screenshot(str(shot))
    return browser


def _cells(browser: Any, selector: str) -> list[str]:
    from selenium.webdriver.common.by import By

    return [e.text for e in browser.find_elements(By.CSS_SELECTOR, selector)]


def _log_dir_sizes(bootstrap: str) -> dict[tuple[str, int], int]:
    output = odradek("log-dirs", "describe", "--bootstrap-server", bootstrap).check().lines[-1]
    sizes = {}
    for broker in json.loads(output)["brokers"]:
        for log_dir in broker["logDirs"]:
            for item in log_dir["partitions"]:
                topic, _, partition = item["partition"].rpartition("-")
                sizes[(topic, int(partition))] = item["size"]
    return sizes


def _cli_describe(bootstrap: str, group: str) -> dict[tuple[str, int], list[str]]:
    """``odradek groups describe`` rows: (topic, partition) -> [current, log end, lag, member]."""
    lines = odradek("groups", "describe", "--bootstrap-server", bootstrap, "--group", group)
    rows = {}
    for line in lines.check().lines[1:]:
        fields = line.split()
        rows[(fields[1], int(fields[2]))] = fields[3:7]
    return rows


# -- pages -----------------------------------------------------------------------------------


def test_brokers_page(browser: Any, console: str, cluster: dict[str, Any], tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    _open(browser, console + "/", tmp_path / "brokers.png")
    metadata = cluster["admin"].list_topics(timeout=10)
    assert browser.find_element(By.ID, "controller").text == str(metadata.controller_id)
    rows = _cells(browser, "#brokers tbody tr")
    assert len(rows) == 1
    assert str(cluster["broker"].port) in rows[0] and "controller" in rows[0]
    assert browser.find_element(By.ID, "mode").text == "read-only"


def test_topics_list(browser: Any, console: str, cluster: dict[str, Any], tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    _open(browser, console + "/topics", tmp_path / "topics.png")
    sizes = _log_dir_sizes(cluster["bootstrap"])
    shown = {}
    for row in browser.find_elements(By.CSS_SELECTOR, "#topics tbody tr"):
        name = row.get_attribute("data-topic")
        shown[name] = (
            row.find_element(By.CSS_SELECTOR, ".partitions").text,
            row.find_element(By.CSS_SELECTOR, ".records").text,
            int(row.find_element(By.CSS_SELECTOR, ".size").get_attribute("data-bytes")),
        )
    assert "__consumer_offsets" not in shown  # internal topics are hidden by default
    orders_size = sum(sizes[("orders", p)] for p in range(3))
    assert orders_size > 0
    assert shown["orders"] == ("3", "30", orders_size)
    assert shown["payments"] == ("1", "6", sizes[("payments", 0)])
    _open(browser, console + "/topics?internal=1", tmp_path / "topics-internal.png")
    assert "__consumer_offsets" in browser.find_element(By.ID, "topics").text
    assert browser.find_elements(By.ID, "create-topic") == []  # read-only: no write forms


def test_topic_page(browser: Any, console: str, cluster: dict[str, Any], tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    _open(browser, console + "/topics/orders", tmp_path / "topic.png")
    sizes = _log_dir_sizes(cluster["bootstrap"])
    watermarks = Consumer({"bootstrap.servers": cluster["bootstrap"], "group.id": "probe"})
    try:
        for partition in range(3):
            row = browser.find_element(By.CSS_SELECTOR, f'tr[data-partition="{partition}"]')
            low, high = watermarks.get_watermark_offsets(
                TopicPartition("orders", partition), timeout=10
            )
            assert row.find_element(By.CSS_SELECTOR, ".log-start").text == str(low)
            assert row.find_element(By.CSS_SELECTOR, ".log-end").text == str(high) == "10"
            size = row.find_element(By.CSS_SELECTOR, ".size").get_attribute("data-bytes")
            assert int(size) == sizes[("orders", partition)]
            cells = [c.text for c in row.find_elements(By.TAG_NAME, "td")]
            assert cells[1:4] == ["0", "0", "0"]  # leader, replicas, ISR: broker 0
    finally:
        watermarks.close()
    retention = browser.find_element(By.CSS_SELECTOR, 'tr[data-config="retention.ms"]')
    assert "3600000" in retention.text and "DYNAMIC_TOPIC_CONFIG" in retention.text
    assert "override" in retention.get_attribute("class")
    policy = browser.find_element(By.CSS_SELECTOR, 'tr[data-config="cleanup.policy"]')
    assert "delete" in policy.text and "DEFAULT_CONFIG" in policy.text


def test_message_browser(browser: Any, console: str, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    url = console + "/topics/orders/messages?partition=1&mode=offset&offset=3&count=4"
    _open(browser, url + "&value_format=json", tmp_path / "messages-json.png")
    rows = browser.find_elements(By.CSS_SELECTOR, "#messages tbody tr")
    assert [r.get_attribute("data-offset") for r in rows] == ["3", "4", "5", "6"]
    # Partition 1 holds orders 1, 4, 7, 10, ...: offset 3 is order 10.
    first = rows[0]
    assert first.find_element(By.CSS_SELECTOR, ".key").text == "order-10"
    value = first.find_element(By.CSS_SELECTOR, ".value pre").text
    assert json.loads(value) == {"id": 10, "item": "widget"}
    assert "\n  " in value  # pretty-printed
    assert first.find_element(By.CSS_SELECTOR, ".headers").text == "source: test"

    # The form: choose hex for values and submit it like a user.
    Select(browser.find_element(By.NAME, "value_format")).select_by_value("hex")
    browser.find_element(By.CSS_SELECTOR, "#browse-form button").click()
    _wait(lambda: "value_format=hex" in browser.current_url, what="the form to submit")
    browser.save_screenshot(str(tmp_path / "messages-hex.png"))
    hex_value = browser.find_element(By.CSS_SELECTOR, "#messages tbody tr .value").text
    assert hex_value == json.dumps({"id": 10, "item": "widget"}).encode().hex(" ")

    # By timestamp: one millisecond before the third payment finds offset 2.
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime((T0 + 2 * 60_000) // 1000 - 1))
    url = console + f"/topics/payments/messages?mode=timestamp&timestamp={stamp}&count=10"
    _open(browser, url + "&value_format=hex", tmp_path / "messages-timestamp.png")
    rows = browser.find_elements(By.CSS_SELECTOR, "#messages tbody tr")
    assert [r.get_attribute("data-offset") for r in rows] == ["2", "3", "4", "5"]
    assert rows[-1].find_element(By.CSS_SELECTOR, ".value").text == "00 01 fe ff"
    assert rows[0].find_element(By.CSS_SELECTOR, ".ts").text == "2023-11-14T22:15:20.000Z"

    # Newest N, as text.
    _open(browser, console + "/topics/payments/messages?mode=newest&count=2", tmp_path / "new.png")
    values = _cells(browser, "#messages tbody tr .value")
    assert values[0] == "payment-4"
    assert "not valid UTF-8" in values[1]


def test_group_pages_match_cli(
    browser: Any, console: str, cluster: dict[str, Any], tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    _open(browser, console + "/groups", tmp_path / "groups.png")
    states = {
        row.get_attribute("data-group"): row.find_element(By.CSS_SELECTOR, ".state").text
        for row in browser.find_elements(By.CSS_SELECTOR, "#groups tbody tr")
    }
    assert states == {"billing": "Empty", "live": "Stable", "reset-me": "Empty"}

    for group in ("billing", "live"):
        _open(browser, console + f"/groups/{group}", tmp_path / f"group-{group}.png")
        cli = _cli_describe(cluster["bootstrap"], group)
        page = {}
        for row in browser.find_elements(By.CSS_SELECTOR, "#offsets tbody tr"):
            cells = [c.text for c in row.find_elements(By.TAG_NAME, "td")]
            page[(cells[0], int(cells[1]))] = cells[2:6]
        assert page == cli
        total = sum(int(lag) for _, _, lag, _ in cli.values())
        assert browser.find_element(By.ID, "total-lag").text == str(total)
    assert total == 3  # live: committed 3 of payments' 6
    member = cli[("payments", 0)][3]
    members = browser.find_element(By.ID, "members").text
    assert member in members and "live-client" in members and "payments-0" in members
    assert _cli_describe(cluster["bootstrap"], "billing") == {
        tp: [str(offset), "10", str(10 - offset), "-"] for tp, offset in BILLING.items()
    }

    # The lag chart: the console samples every 0.5 s; Plotly draws the series it serves.
    chart = browser.find_element(By.ID, "lag-chart")
    _wait(lambda: int(chart.get_attribute("data-points") or 0) >= 2, what="lag samples")
    assert chart.find_elements(By.CSS_SELECTOR, "svg.main-svg")
    assert "payments" in chart.text
    status, body = http(console + "/api/groups/live/lag")
    assert status == 200 and set(json.loads(body)["series"]["payments"]["lag"]) == {3}
    browser.save_screenshot(str(tmp_path / "group-live-chart.png"))


def test_throughput_chart(
    browser: Any, console: str, cluster: dict[str, Any], tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    _open(browser, console + "/throughput", tmp_path / "throughput-empty.png")
    producer = cluster["producer"]
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        for i in range(20):
            producer.produce("payments", value=f"burst-{i}")
        producer.flush(5)
        time.sleep(0.1)

    def rate_seen() -> bool:
        series = json.loads(http(console + "/api/throughput")[1])["series"]
        return max(series.get("payments", {}).get("rate", [0])) > 0

    _wait(rate_seen, what="a positive records/s for payments")
    chart = browser.find_element(By.ID, "throughput-chart")
    # What Plotly drew (the div's figure data): the burst shows as a positive rate.
    drawn = """return Math.max(0, ...(document.getElementById('throughput-chart').data || [])
        .filter(t => t.name === 'payments').flatMap(t => t.y));"""
    _wait(lambda: browser.execute_script(drawn) > 0, what="the chart to show the burst")
    assert "payments" in chart.text
    assert chart.find_elements(By.CSS_SELECTOR, "svg.main-svg .scatterlayer .trace")
    browser.save_screenshot(str(tmp_path / "throughput.png"))


# -- errors and writes -----------------------------------------------------------------------


def test_error_pages(browser: Any, console: str, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    cases = [
        ("/topics/missing", 404, "topic 'missing' does not exist"),
        ("/topics/orders/messages?mode=offset&offset=abc", 400, "offset must be a whole number"),
        ("/topics/orders/messages?mode=offset&offset=99", 400, "past the log end offset 10"),
        ("/topics/orders/messages?partition=9", 404, "has no partition 9"),
        ("/topics/orders/messages?value_format=yaml", 400, "value format must be one of"),
        ("/topics/payments/messages?mode=timestamp&timestamp=yesterday", 400, "timestamp must"),
        ("/groups/nobody", 404, "consumer group 'nobody' does not exist"),
        ("/no/such/page", 404, "no such page"),
    ]
    for index, (path, status, text) in enumerate(cases):
        assert http(console + path)[0] == status, path
        _open(browser, console + path, tmp_path / f"error-{index}.png")
        assert text in browser.find_element(By.ID, "error").text, path


def test_broker_down(browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    proc = ConsoleProcess(f"127.0.0.1:{free_port()}", tmp_path / "console.log")
    try:
        for path in ("/", "/topics", "/groups/g"):
            assert http(proc.url + path)[0] == 503, path
        _open(browser, proc.url + "/topics", tmp_path / "broker-down.png")
        assert "cannot reach the cluster" in browser.find_element(By.ID, "error").text
    finally:
        proc.stop()
    assert "Traceback" not in proc.log_text()


def test_read_only_refuses_writes(console: str, cluster: dict[str, Any]) -> None:
    origin = {"Origin": console}
    status, body = http(console + "/topics", data={"name": "sneaky"}, headers=origin)
    assert status == 403 and "--allow-writes" in body
    assert http(console + "/groups/reset-me/reset", data={"strategy": "earliest"})[0] == 403
    assert "sneaky" not in cluster["admin"].list_topics(timeout=10).topics


def test_writes(browser: Any, console_rw: str, cluster: dict[str, Any], tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    admin = cluster["admin"]
    _open(browser, console_rw + "/topics", tmp_path / "rw-topics.png")
    assert browser.find_element(By.ID, "mode").text == "writes enabled"
    browser.find_element(By.NAME, "name").send_keys("made-here")
    browser.find_element(By.NAME, "partitions").send_keys("2")
    browser.find_element(By.CSS_SELECTOR, "#create-topic button").click()
    _wait(lambda: browser.current_url.startswith(console_rw + "/topics/made-here"), what="redirect")
    browser.save_screenshot(str(tmp_path / "rw-created.png"))
    assert "created topic made-here" in browser.find_element(By.ID, "message").text
    assert len(browser.find_elements(By.CSS_SELECTOR, "#partitions tbody tr")) == 2
    assert len(admin.list_topics(timeout=10).topics["made-here"].partitions) == 2

    # Creating it again: the broker's TOPIC_ALREADY_EXISTS, as a 409 page.
    status, body = http(
        console_rw + "/topics", data={"name": "made-here"}, headers={"Origin": console_rw}
    )
    assert status == 409 and "TOPIC_ALREADY_EXISTS" in body
    # Posts from elsewhere, or that do not say where they come from, are refused.
    for headers in ({"Origin": "http://evil.example"}, {}):
        status, _ = http(console_rw + "/topics/made-here/delete", data={}, headers=headers)
        assert status == 403
    assert "made-here" in admin.list_topics(timeout=10).topics

    # Reset an empty group's offsets to earliest with the form.
    _open(browser, console_rw + "/groups/reset-me", tmp_path / "rw-group.png")
    assert browser.find_element(By.CSS_SELECTOR, "td.committed").text == "7"
    Select(browser.find_element(By.NAME, "strategy")).select_by_value("earliest")
    browser.find_element(By.CSS_SELECTOR, "#reset-offsets button").click()
    browser.switch_to.alert.accept()
    _wait(lambda: "done=reset" in browser.current_url, what="the reset")
    browser.save_screenshot(str(tmp_path / "rw-reset.png"))
    assert browser.find_element(By.CSS_SELECTOR, "td.committed").text == "0"
    assert (
        browser.find_element(By.ID, "message").text
        == "reset the committed offsets of group reset-me"
    )
    assert _cli_describe(cluster["bootstrap"], "reset-me")[("orders", 0)][0] == "0"
    # A group with members has no reset form, and a forged post is refused (409).
    _open(browser, console_rw + "/groups/live", tmp_path / "rw-live.png")
    assert browser.find_elements(By.ID, "reset-offsets") == []
    status, body = http(
        console_rw + "/groups/live/reset",
        data={"strategy": "earliest"},
        headers={"Origin": console_rw},
    )
    assert status == 409 and "inactive" in body

    # A group id full of markup and quotes is shown as text, and the confirmation asks about
    # exactly that id; dismissing it changes nothing.
    odd = 'o\'neil "<i>x</i>"/7'
    committer = Consumer({"bootstrap.servers": cluster["bootstrap"], "group.id": odd})
    committer.commit(offsets=[TopicPartition("orders", 1, 5)], asynchronous=False)
    committer.close()
    _open(browser, console_rw + "/groups/" + quote(odd, safe=""), tmp_path / "rw-odd.png")
    assert browser.find_element(By.ID, "group-id").text == odd
    browser.find_element(By.CSS_SELECTOR, "#reset-offsets button").click()
    alert = browser.switch_to.alert
    assert alert.text == f"Reset every committed offset of group {odd}?"
    alert.dismiss()
    browser.refresh()
    assert browser.find_element(By.CSS_SELECTOR, "td.committed").text == "5"
    assert "done=" not in browser.current_url

    # Delete the topic with the form (and its confirmation dialog).
    _open(browser, console_rw + "/topics/made-here", tmp_path / "rw-topic.png")
    browser.find_element(By.CSS_SELECTOR, "#delete-topic button").click()
    browser.switch_to.alert.accept()
    _wait(lambda: "done=deleted" in browser.current_url, what="the deletion")
    browser.save_screenshot(str(tmp_path / "rw-deleted.png"))
    assert "made-here" not in browser.find_element(By.ID, "topics").text
    assert browser.find_element(By.ID, "message").text == "deleted topic made-here"
    _wait(lambda: "made-here" not in admin.list_topics(timeout=10).topics, what="topic gone")


def test_survives_a_broker_restart(console: str, cluster: dict[str, Any], tmp_path: Path) -> None:
    broker = cluster["broker"]
    broker.stop()
    status, body = http(console + "/topics/orders")
    assert status == 503 and "cannot reach the cluster" in body
    broker.start()
    _wait(lambda: http(console + "/topics/orders")[0] == 200, timeout=30, what="recovery")
    assert 'class="num log-end">10<' in http(console + "/topics/orders")[1]
