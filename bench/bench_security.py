"""Throughput over SSL and SASL_SSL as a ratio to PLAINTEXT, and authentications per second.

Run from the repository root: ``.venv/bin/python bench/bench_security.py`` (``--help`` for
the knobs). It generates throw-away certificates (``cryptography``), starts one broker
subprocess with PLAINTEXT, SSL and SASL_SSL (SCRAM-SHA-256 and PLAIN) listeners, and in
the same run:

1. produces ``--messages`` records of ``--size`` bytes with confluent-kafka (acks=all,
   linger 5 ms) through each listener into its own topic, then consumes them back from the
   beginning; prints MB/s and the ratio to PLAINTEXT. Fetches over TLS copy file regions
   through the TLS transport (sendfile cannot encrypt), PLAINTEXT uses sendfile;
2. opens connections in a loop for ``--seconds`` each and authenticates them with raw
   requests: TLS handshake alone, TLS + SASL PLAIN, and SASL SCRAM-SHA-256 without TLS
   (the client's PBKDF2 with 4096 iterations is part of each SCRAM login); prints
   authentications per second.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import os
import ssl
import sys
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.helpers.broker import BrokerProcess, free_port, wait_for_port  # noqa: E402
from tests.helpers.certs import make_pki  # noqa: E402
from tests.helpers.raw import RawClient  # noqa: E402

PLAIN_JAAS = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required user_bench="bench-pw";'
)


def _client_config(listener: str, port: int, ca: Path) -> dict:
    config = {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": listener}
    if listener != "PLAINTEXT":
        config["ssl.ca.location"] = str(ca)
    if listener == "SASL_SSL":
        config.update(
            {
                "sasl.mechanism": "SCRAM-SHA-256",
                "sasl.username": "bench",
                "sasl.password": "bench-pw",
            }
        )
    return config


def _produce(config: dict, topic: str, messages: int, size: int) -> float:
    producer = Producer({**config, "acks": "all", "linger.ms": 5, "batch.size": 1_000_000})
    payload = os.urandom(size)
    started = time.perf_counter()
    for _ in range(messages):
        while True:
            try:
                producer.produce(topic, payload)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0
    return time.perf_counter() - started


def _consume(config: dict, topic: str, messages: int) -> float:
    consumer = Consumer(
        {
            **config,
            "group.id": f"bench-{uuid.uuid4().hex[:6]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "fetch.max.bytes": 52_428_800,
        }
    )
    consumer.subscribe([topic])
    got = 0
    started = None
    deadline = time.monotonic() + 120
    while got < messages and time.monotonic() < deadline:
        batch = consumer.consume(1000, 0.5)
        if batch and started is None:
            started = time.perf_counter()
        got += sum(1 for m in batch if m.error() is None)
    elapsed = time.perf_counter() - (started or time.perf_counter())
    consumer.close()
    assert got >= messages, f"consumed {got} of {messages}"
    return elapsed


def _plain(raw: RawClient) -> None:
    assert raw.call(17, 1, {"mechanism": "PLAIN"}).error_code == 0
    assert raw.call(36, 2, {"auth_bytes": b"\x00bench\x00bench-pw"}).error_code == 0


def _scram(raw: RawClient) -> None:
    assert raw.call(17, 1, {"mechanism": "SCRAM-SHA-256"}).error_code == 0
    nonce = base64.b64encode(os.urandom(18)).decode()
    first_bare = f"n=bench,r={nonce}"
    reply = raw.call(36, 2, {"auth_bytes": f"n,,{first_bare}".encode()})
    server_first = bytes(reply.auth_bytes).decode()
    fields = dict(part.split("=", 1) for part in server_first.split(","))
    salted = hashlib.pbkdf2_hmac(
        "sha256", b"bench-pw", base64.b64decode(fields["s"]), int(fields["i"])
    )
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    stored = hashlib.sha256(client_key).digest()
    without_proof = f"c=biws,r={fields['r']}"
    auth_message = f"{first_bare},{server_first},{without_proof}".encode()
    signature = hmac.new(stored, auth_message, "sha256").digest()
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature, strict=True)))
    final = raw.call(36, 2, {"auth_bytes": f"{without_proof},p={proof.decode()}".encode()})
    assert final.error_code == 0


def _logins_per_second(port: int, context: ssl.SSLContext | None, login, seconds: float) -> float:
    count = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        raw = RawClient(port, context=context)
        if login is not None:
            login(raw)
        else:
            raw.call(18, 0, {})
        raw.sock.close()
        count += 1
    return count / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=1000, help="record value bytes")
    parser.add_argument("--seconds", type=float, default=3.0, help="per login measurement")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="odradek-bench-security-") as tmp:
        root = Path(tmp)
        pki = make_pki(root / "pki")
        ports = {name: free_port() for name in ("PLAINTEXT", "SSL", "SASL_SSL", "SASL_PLAINTEXT")}
        broker = BrokerProcess(
            root / "data",
            port=ports["PLAINTEXT"],
            overrides={
                "listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
                "ssl.keystore.type": "PEM",
                "ssl.keystore.location": str(pki.server),
                "sasl.enabled.mechanisms": "SCRAM-SHA-256,PLAIN",
                "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
                "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
                "num.partitions": "1",
            },
            log_path=root / "broker.log",
        ).start()
        try:
            for port in ports.values():
                wait_for_port(port, 30, broker.proc)
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            upsert = UserScramCredentialUpsertion(
                "bench", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"bench-pw"
            )
            for future in admin.alter_user_scram_credentials([upsert]).values():
                future.result(10)
            megabytes = args.messages * args.size / 1e6
            # Warm up (first topic creation, the broker's code paths), then two rounds in
            # turn; the better of the two counts, so no listener benefits from going last.
            warm = _client_config("PLAINTEXT", ports["PLAINTEXT"], pki.ca)
            _produce(warm, "bench-warmup", args.messages // 4, args.size)
            results: dict[str, tuple[float, float]] = {}
            for round_ in range(2):
                for listener in ("PLAINTEXT", "SSL", "SASL_SSL"):
                    config = _client_config(listener, ports[listener], pki.ca)
                    topic = f"bench-{listener.lower()}-{round_}"
                    produce_s = _produce(config, topic, args.messages, args.size)
                    consume_s = _consume(config, topic, args.messages)
                    best = results.get(listener, (0.0, 0.0))
                    results[listener] = (
                        max(best[0], megabytes / produce_s),
                        max(best[1], megabytes / consume_s),
                    )
            base_produce, base_consume = results["PLAINTEXT"]
            print(
                f"{args.messages} records of {args.size} B ({megabytes:.1f} MB), "
                "one broker, best of 2 rounds"
            )
            for listener, (produce, consume) in results.items():
                print(
                    f"{listener:<10} produce {produce:7.1f} MB/s ({produce / base_produce:.2f}x)"
                    f"   consume {consume:7.1f} MB/s ({consume / base_consume:.2f}x)"
                )
            context = ssl.create_default_context(cafile=str(pki.ca))
            rows = [
                ("TCP connect + ApiVersions (PLAINTEXT)", ports["PLAINTEXT"], None, None),
                ("TLS handshake + ApiVersions (SSL)", ports["SSL"], context, None),
                ("TLS + SASL PLAIN (SASL_SSL)", ports["SASL_SSL"], context, _plain),
                ("SASL SCRAM-SHA-256 (SASL_PLAINTEXT)", ports["SASL_PLAINTEXT"], None, _scram),
            ]
            for label, port, ctx, login in rows:
                rate = _logins_per_second(port, ctx, login, args.seconds)
                print(f"{label:<40} {rate:8.0f} connections/s")
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
