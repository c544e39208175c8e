"""What the ACL authorizer costs: produce and consume throughput with and without it, and
authorisation decisions per second.

Run from the repository root: ``.venv/bin/python bench/bench_acls.py`` (``--help`` for the
knobs). In the same run it:

1. starts two brokers with the same SASL_PLAINTEXT (PLAIN) listener, one without an
   authorizer (the baseline) and one with ``AclAuthorizer`` holding ``--acls`` ACLs
   (literal and prefixed, other principals) besides the user's own Write/Read grants
   (topic and group);
   produces ``--messages`` records of ``--size`` bytes with confluent-kafka (acks=all) and
   consumes them back; prints MB/s and the ratio to the baseline;
2. times ``AclAuthorizer.authorize`` over the same number of ACLs, for a literal hit, a
   prefixed hit and a refusal, against a plain dict lookup as the baseline.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.helpers.broker import BrokerProcess, free_port, wait_for_port  # noqa: E402

from odradek.broker.security import acl  # noqa: E402
from odradek.broker.security.authorizer import AclAuthorizer, AuthorizerSettings  # noqa: E402
from odradek.cluster.acl_store import LocalAclStore  # noqa: E402

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'user_admin="admin-pw" user_bench="bench-pw";'
)


def sasl(port: int, user: str) -> dict:
    return {
        "bootstrap.servers": f"127.0.0.1:{port}",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": f"{user}-pw",
    }


def start(root: Path, authorizer: bool) -> tuple[BrokerProcess, int]:
    port, plain = free_port(), free_port()
    overrides = {
        "listeners": f"SASL_PLAINTEXT://127.0.0.1:{port},PLAINTEXT://127.0.0.1:{plain}",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
    }
    if authorizer:
        overrides["authorizer.class.name"] = "kafka.security.authorizer.AclAuthorizer"
        overrides["super.users"] = "User:admin"
    broker = BrokerProcess(root, port=port, overrides=overrides).start()
    wait_for_port(plain, 30, broker.proc)
    return broker, port


def grant(port: int, topic: str, extra: int) -> None:
    admin = AdminClient(sasl(port, "admin"))
    bindings = [
        AclBinding(
            ResourceType.TOPIC,
            topic,
            ResourcePatternType.LITERAL,
            "User:bench",
            "*",
            op,
            AclPermissionType.ALLOW,
        )
        for op in (AclOperation.WRITE, AclOperation.READ)
    ]
    # The consumer's group too (kafka-acls --consumer): librdkafka slows its fetching
    # down while its group's coordinator lookup is refused.
    bindings.append(
        AclBinding(
            ResourceType.GROUP,
            "unused",
            ResourcePatternType.LITERAL,
            "User:bench",
            "*",
            AclOperation.READ,
            AclPermissionType.ALLOW,
        )
    )
    bindings += [
        AclBinding(
            ResourceType.TOPIC,
            f"other-{i}" + ("-" if i % 10 == 0 else ""),
            ResourcePatternType.PREFIXED if i % 10 == 0 else ResourcePatternType.LITERAL,
            f"User:u{i}",
            "*",
            AclOperation.READ,
            AclPermissionType.ALLOW,
        )
        for i in range(extra)
    ]
    for future in admin.create_acls(bindings).values():
        future.result(60)


def run_clients(port: int, topic: str, messages: int, size: int) -> tuple[float, float]:
    admin = AdminClient(sasl(port, "admin"))  # alive until its futures are done
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(30)
    value = b"x" * size
    producer = Producer({**sasl(port, "bench"), "linger.ms": 5, "acks": "all"})
    started = time.perf_counter()
    for _ in range(messages):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(120)
    produced = messages * size / (time.perf_counter() - started) / 1e6
    consumer = Consumer(
        {**sasl(port, "bench"), "group.id": "unused", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = 0
    started = 0.0  # from the first record: the connection and metadata are not timed
    deadline = time.monotonic() + 120
    while got < messages and time.monotonic() < deadline:
        for message in consumer.consume(1000, 1):
            if message.error() is None:
                started = started or time.perf_counter()
                got += 1
    consumed = got * size / (time.perf_counter() - started) / 1e6
    consumer.close()
    return produced, consumed


def micro(acls: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        authorizer = AclAuthorizer(LocalAclStore(Path(tmp)), AuthorizerSettings(frozenset()))
        authorizer.start()
        bindings = []
        for i in range(acls):
            prefixed = i % 10 == 0
            bindings.append(
                acl.AclBinding(
                    acl.ResourcePattern(
                        acl.ResourceType.TOPIC,
                        f"t-{i}" + ("-" if prefixed else ""),
                        acl.PatternType.PREFIXED if prefixed else acl.PatternType.LITERAL,
                    ),
                    acl.AccessControlEntry(
                        f"User:u{i % 50}", "*", acl.Operation.READ, acl.Permission.ALLOW
                    ),
                )
            )
        authorizer.create(bindings)
        baseline = {f"t-{i}": i for i in range(acls)}
        read, topic = acl.Operation.READ, acl.ResourceType.TOPIC

        def timed(call) -> float:  # type: ignore[no-untyped-def]
            started = time.perf_counter()
            for _ in range(rounds):
                call()
            return rounds / (time.perf_counter() - started)

        base = timed(lambda: baseline.get("t-7"))
        print(f"authorize() over {acls} ACLs ({acls // 10} prefixed), decisions/s:")
        print(f"  dict lookup (baseline)   {base:12,.0f}")
        for label, principal, name in [
            ("literal allow", "User:u7", "t-7"),
            ("prefixed allow", "User:u10", "t-10-x"),
            ("refused", "User:nobody", "t-7"),
        ]:
            rate = timed(lambda p=principal, n=name: authorizer.authorize(p, "h", read, topic, n))
            print(f"  {label:<24} {rate:12,.0f}  ({rate / base:.3f}x baseline)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--acls", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=100_000)
    args = parser.parse_args()

    micro(args.acls, args.rounds)
    with tempfile.TemporaryDirectory() as tmp:
        results = {}
        for name, authorizer in (("no authorizer", False), ("AclAuthorizer", True)):
            broker, port = start(Path(tmp) / name.replace(" ", "-"), authorizer)
            try:
                topic = f"bench-{uuid.uuid4().hex[:6]}"
                if authorizer:
                    grant(port, topic, args.acls)
                results[name] = run_clients(port, topic, args.messages, args.size)
            finally:
                try:
                    broker.stop()
                except RuntimeError:
                    print(broker.log_text()[-3000:], file=sys.stderr)
                    raise
        base_produce, base_consume = results["no authorizer"]
        print(f"\n{args.messages} records of {args.size} B over SASL_PLAINTEXT, MB/s:")
        for name, (produced, consumed) in results.items():
            print(
                f"  {name:<14} produce {produced:7.1f} ({produced / base_produce:.2f}x)"
                f"   consume {consumed:7.1f} ({consumed / base_consume:.2f}x)"
            )


if __name__ == "__main__":
    main()
