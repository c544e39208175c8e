"""``odradek configs`` for users and clients (client quotas) as a subprocess against a
real broker: kafka-configs' flags, ConfigCommand's output lines, one-line errors.

Names are unique per run and entities are removed at the end: the broker is shared, and
a quota left behind would throttle other tests' clients.
"""

from __future__ import annotations

import uuid

import pytest

from tests.cli.helpers import odradek
from tests.helpers.broker import BrokerProcess

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def bootstrap(shared_broker: BrokerProcess) -> str:
    return shared_broker.bootstrap


def configs(bootstrap: str, *args: str):  # type: ignore[no-untyped-def]
    return odradek("configs", "--bootstrap-server", bootstrap, *args)


def test_client_quota_alter_describe_delete(bootstrap: str) -> None:
    client = f"app-{uuid.uuid4().hex[:8]}"
    entity = ("--entity-type", "clients", "--entity-name", client)
    done = configs(
        bootstrap, *entity, "--alter",
        "--add-config", "producer_byte_rate=1048576,consumer_byte_rate=2097152",
    ).check()  # fmt: skip
    assert done.lines == [f"Completed updating config for client {client}."]
    described = configs(bootstrap, *entity, "--describe").check()
    assert described.lines == [
        f"Quota configs for client-id '{client}' are consumer_byte_rate=2097152.0, "
        "producer_byte_rate=1048576.0"
    ]
    # Every client id (not the default): the new one is among them.
    listed = configs(bootstrap, "--entity-type", "clients", "--describe").check()
    assert described.lines[0] in listed.lines
    configs(
        bootstrap, *entity, "--alter", "--delete-config", "producer_byte_rate,consumer_byte_rate"
    ).check()
    assert configs(bootstrap, *entity, "--describe").check().lines == []


def test_user_and_client_pair_and_defaults(bootstrap: str) -> None:
    user = f"user-{uuid.uuid4().hex[:8]}"
    client = f"app-{uuid.uuid4().hex[:8]}"
    pair = ("--user", user, "--client", client)
    configs(bootstrap, *pair, "--alter", "--add-config", "request_percentage=25.5").check()
    shown = configs(bootstrap, *pair, "--describe").check().lines
    assert shown == [
        f"Quota configs for user-principal '{user}', client-id '{client}' are "
        "request_percentage=25.5"
    ]
    # The default user with this client id: a separate entity.
    default_pair = ("--user-defaults", "--client", client)
    done = configs(bootstrap, *default_pair, "--alter", "--add-config", "producer_byte_rate=9")
    assert done.check().lines == [
        f"Completed updating config for the default user-principal, client-id '{client}'."
    ]
    assert configs(bootstrap, *default_pair, "--describe").check().lines == [
        f"Quota configs for the default user-principal, client-id '{client}' are "
        "producer_byte_rate=9.0"
    ]
    configs(bootstrap, *default_pair, "--alter", "--delete-config", "producer_byte_rate").check()
    configs(bootstrap, *pair, "--alter", "--delete-config", "request_percentage").check()
    assert configs(bootstrap, *pair, "--describe").check().lines == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--client", "c", "--alter", "--add-config", "producer_byte_rate=fast"), "not a number"),
        (("--client", "c", "--alter", "--add-config", "producer_byte_rate=1.5"), "INVALID_REQUEST"),
        (("--client", "c", "--alter", "--add-config", "retention.ms=1"), "INVALID_REQUEST"),
        (("--entity-type", "users", "--alter", "--add-config", "producer_byte_rate=1"), "name"),
        (("--client", "c", "--client-defaults", "--describe"), "cannot be combined"),
        (("--client", "c", "--topic", "t", "--describe"), "cannot be combined"),
        (("--client", "c", "--alter"), "--add-config"),
    ],
)
def test_bad_quota_input_is_one_error_line(
    bootstrap: str, args: tuple[str, ...], message: str
) -> None:
    configs(bootstrap, *args).check_error(message)
