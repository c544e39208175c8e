"""The console with security on: it logs in with the operator's credentials
(``--command-config``, as Kafka's tools take them) and the brokers' authorizer decides. An
action the authorizer refuses is shown on the page as Kafka's error and is not performed.

One broker with a SASL_PLAINTEXT listener and the ACL authorizer (``super.users=User:admin``);
the console runs as ``alice``, who may describe the cluster and read one topic and describe
one group, but not create or delete topics nor commit the group's offsets. Driven in headless
Chromium; screenshots go under tmp_path.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from tests.console.helpers import ConsoleProcess, chromium, http
from tests.integration.test_acls import Secured, start_broker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

ALICE_CONFIG = """\
security.protocol=SASL_PLAINTEXT
sasl.mechanism=PLAIN
sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \\
    username="alice" password="alice-pw";
"""


def _grant(secured: Secured, kind: ResourceType, name: str, *operations: AclOperation) -> None:
    bindings = [
        AclBinding(
            kind,
            name,
            ResourcePatternType.LITERAL,
            "User:alice",
            "*",
            op,
            AclPermissionType.ALLOW,
        )
        for op in operations
    ]
    for future in secured.admin().create_acls(bindings).values():
        future.result(15)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    secured = start_broker(tmp_path_factory.mktemp("console-acls"))
    try:
        admin = secured.admin()
        admin.create_topics([NewTopic("guarded", 1, 1)])["guarded"].result(15)
        producer = Producer(secured.config("admin"))
        for i in range(3):
            producer.produce("guarded", f"v{i}".encode())
        assert producer.flush(15) == 0
        committer = Consumer({**secured.config("admin"), "group.id": "alice-group"})
        committer.commit(offsets=[TopicPartition("guarded", 0, 2)], asynchronous=False)
        committer.close()
        _grant(secured, ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE)
        _grant(
            secured, ResourceType.TOPIC, "guarded",
            AclOperation.DESCRIBE, AclOperation.READ, AclOperation.DESCRIBE_CONFIGS,
        )  # fmt: skip
        _grant(secured, ResourceType.GROUP, "alice-group", AclOperation.DESCRIBE)
        yield secured
    finally:
        secured.broker.stop()


@pytest.fixture(scope="module")
def console(secured: Secured, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    logs = tmp_path_factory.mktemp("console-acls-logs")
    config = logs / "alice.properties"
    config.write_text(ALICE_CONFIG)
    proc = ConsoleProcess(
        secured.bootstrap, logs / "console.log", "--allow-writes", "--command-config", str(config)
    )
    try:
        yield proc.url
    finally:
        proc.stop()
        assert "Traceback" not in proc.log_text(), proc.log_text()


def _committed(secured: Secured) -> int:
    consumer = Consumer({**secured.config("admin"), "group.id": "alice-group"})
    try:
        (tp,) = consumer.committed([TopicPartition("guarded", 0)], timeout=15)
        return int(tp.offset)
    finally:
        consumer.close()


def test_refused_actions_show_the_kafka_error(
    secured: Secured, console: str, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import Select, WebDriverWait

    admin = secured.admin()
    with chromium() as browser:

        def page(url: str, shot: str) -> Any:
            browser.get(url)
            browser.find_element(By.TAG_NAME, "main")
            browser.save_screenshot(str(tmp_path / shot))

        def appears(element_id: str) -> Any:
            # A click does not wait for the page the form's POST leads to.
            return WebDriverWait(browser, 15).until(
                expected_conditions.presence_of_element_located((By.ID, element_id))
            )

        def error_after(shot: str) -> str:
            found = appears("error").text
            browser.save_screenshot(str(tmp_path / shot))
            return found

        # Alice may read: the topic list and the topic's page, as she sees them.
        page(console + "/topics", "topics.png")
        assert "guarded" in browser.find_element(By.ID, "topics").text

        # Creating a topic needs CREATE: refused by the broker, shown, not done.
        browser.find_element(By.NAME, "name").send_keys("alice-made")
        browser.find_element(By.NAME, "partitions").send_keys("1")
        browser.find_element(By.CSS_SELECTOR, "#create-topic button").click()
        message = error_after("create-refused.png")
        assert "TOPIC_AUTHORIZATION_FAILED" in message, message
        assert browser.find_element(By.TAG_NAME, "h1").text == "Error 403"
        assert "alice-made" not in admin.list_topics(timeout=10).topics

        # Deleting one needs DELETE.
        page(console + "/topics/guarded", "topic.png")
        browser.find_element(By.CSS_SELECTOR, "#delete-topic button").click()
        browser.switch_to.alert.accept()
        message = error_after("delete-refused.png")
        assert "TOPIC_AUTHORIZATION_FAILED" in message, message
        assert "guarded" in admin.list_topics(timeout=10).topics

        # Resetting a group's offsets commits them: READ on the group, which she lacks.
        page(console + "/groups/alice-group", "group.png")
        assert browser.find_element(By.CSS_SELECTOR, "td.committed").text == "2"
        Select(browser.find_element(By.NAME, "strategy")).select_by_value("earliest")
        browser.find_element(By.CSS_SELECTOR, "#reset-offsets button").click()
        browser.switch_to.alert.accept()
        message = error_after("reset-refused.png")
        assert "GROUP_AUTHORIZATION_FAILED" in message, message
        assert _committed(secured) == 2

        # Granted CREATE on that one name, the same form creates it: the broker decides.
        _grant(secured, ResourceType.TOPIC, "alice-made", AclOperation.CREATE)
        page(console + "/topics", "topics-again.png")
        browser.find_element(By.NAME, "name").send_keys("alice-made")
        browser.find_element(By.NAME, "partitions").send_keys("1")
        browser.find_element(By.CSS_SELECTOR, "#create-topic button").click()
        message = appears("message").text
        browser.save_screenshot(str(tmp_path / "created.png"))
        assert "created topic alice-made" in message
        assert "alice-made" in admin.list_topics(timeout=10).topics


def test_wrong_credentials_are_an_error_page(secured: Secured, tmp_path: Path) -> None:
    config = tmp_path / "wrong.properties"
    config.write_text(ALICE_CONFIG.replace("alice-pw", "not-her-password"))
    proc = ConsoleProcess(
        secured.bootstrap, tmp_path / "console.log", "--command-config", str(config)
    )
    try:
        status, body = http(proc.url + "/")
        assert status == 401, body
        assert "SASL_AUTHENTICATION_FAILED" in body
        assert "not-her-password" not in body and "not-her-password" not in proc.log_text()
    finally:
        proc.stop()
    assert "Traceback" not in proc.log_text(), proc.log_text()
