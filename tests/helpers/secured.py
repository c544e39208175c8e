"""A broker subprocess with secured listeners, and the client files that reach them.

``start_secured_broker(root, ["PLAINTEXT", "SASL_PLAINTEXT", "SSL"], plain_users=...)``
starts one broker with one listener per security protocol (each named after it, as Kafka's
default listener map does), PLAIN users from a JAAS line on every SASL listener and, when
an SSL listener is asked for, a throw-away PKI (tests/helpers/certs.py) as key and trust
store. ``client_properties`` writes the Java client properties file Kafka's tools read
(``--command-config``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from tests.helpers.broker import BrokerProcess, free_port, wait_for_port
from tests.helpers.certs import Pki, make_pki

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"


def plain_jaas(users: Mapping[str, str]) -> str:
    """The broker's PLAIN login line: ``user_<name>="<password>"`` for each user."""
    entries = " ".join(f'user_{name}="{password}"' for name, password in users.items())
    return f"{PLAIN_MODULE} required {entries};"


@dataclass
class SecuredBroker:
    broker: BrokerProcess
    ports: dict[str, int]
    pki: Pki | None

    def bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    def stop(self) -> None:
        self.broker.stop()


def start_secured_broker(
    root: Path,
    listeners: Iterable[str],
    *,
    plain_users: Mapping[str, str] | None = None,
    mechanisms: str = "PLAIN",
    overrides: Mapping[str, str] | None = None,
) -> SecuredBroker:
    names = list(listeners)
    ports = {name: free_port() for name in names}
    settings = {
        "listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items()),
        "num.partitions": "1",
    }
    if any(name.startswith("SASL_") for name in names):
        settings["sasl.enabled.mechanisms"] = mechanisms
        jaas = plain_jaas(plain_users or {})
        for name in names:
            if name.startswith("SASL_"):
                settings[f"listener.name.{name.lower()}.plain.sasl.jaas.config"] = jaas
    pki = None
    if any(name in ("SSL", "SASL_SSL") for name in names):
        pki = make_pki(root / "pki")
        settings.update(
            {
                "ssl.keystore.type": "PEM",
                "ssl.keystore.location": str(pki.server),
                "ssl.truststore.type": "PEM",
                "ssl.truststore.location": str(pki.ca),
            }
        )
    settings.update(overrides or {})
    broker = BrokerProcess(root / "data", port=ports[names[0]], overrides=settings).start()
    try:
        for port in ports.values():
            wait_for_port(port, 30, broker.proc)
    except BaseException:
        broker.kill()
        raise
    return SecuredBroker(broker, ports, pki)


def client_properties(
    path: Path,
    protocol: str,
    *,
    user: str | None = None,
    password: str | None = None,
    mechanism: str = "PLAIN",
    ca: Path | None = None,
) -> Path:
    """Write a Java client properties file (what ``--command-config`` names) and return it."""
    lines = [f"security.protocol={protocol}"]
    if user is not None:
        module = PLAIN_MODULE if mechanism == "PLAIN" else SCRAM_MODULE
        lines += [
            f"sasl.mechanism={mechanism}",
            f'sasl.jaas.config={module} required username="{user}" password="{password}";',
        ]
    if ca is not None:
        lines += [f"ssl.truststore.location={ca}", "ssl.truststore.type=PEM"]
    path.write_text("\n".join(lines) + "\n")
    return path
