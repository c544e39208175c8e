"""``odradek broker-api-versions``: kafka-broker-api-versions.sh (BrokerApiVersionsCommand).

Learns the cluster's brokers from Metadata, connects to each and prints what its ApiVersions
answer advertised, the way Kafka's NodeApiVersions prints it::

    127.0.0.1:9092 (id: 0 rack: null) -> (
        Produce(0): 3 to 11 [usable: 11],
        Fetch(1): 4 to 12 [usable: 12],
        ...
        ElectLeaders(43): UNSUPPORTED,
        ...
    )

one block per broker, by id (each API line starts with a tab). ``[usable: N]`` is the
highest version both the broker and this tool's client speak
(:func:`odradek.client.versions.client_range`; for the ZooKeeper-era inter-broker RPCs, which
the client package does not send, the range odradek's protocol layer encodes);
``[unusable: node too new]`` / ``[unusable: node too old]`` when the ranges do not meet. A
key whose name the tool does not know prints ``UNKNOWN(N): 0 to 2``; ``UNSUPPORTED`` marks
the APIs odradek speaks that the broker does not advertise (Kafka's tool does the same for
its client's APIs). A broker that cannot be reached prints ``host:port (id: N rack: null) ->
ERROR: <reason>`` and the command then exits 1 with ``error: N broker(s) did not answer``;
an unreachable bootstrap server is one error line.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping

import click
from kio.schema.index import api_key_map

from odradek.cli.command_config import client_security
from odradek.cli.errors import CliError
from odradek.cli.output import bootstrap_option, check_bootstrap, run
from odradek.protocol.interbroker import INTERBROKER_VERSIONS
from odradek.protocol.versions import SUPPORTED, api_name

VersionRange = tuple[int, int]


def known_name(api_key: int) -> str | None:
    """Kafka's name of ``api_key`` if this tool knows the API, else None."""
    if api_key in api_key_map or api_key in INTERBROKER_VERSIONS:
        return api_name(api_key)
    return None


def tool_range(api_key: int) -> VersionRange | None:
    """The versions of ``api_key`` this tool's software can speak."""
    from odradek.client.versions import client_range

    return client_range(api_key) or INTERBROKER_VERSIONS.get(api_key)


def _versions_text(low: int, high: int) -> str:
    return str(low) if low == high else f"{low} to {high}"


def api_text(api_key: int, broker: VersionRange, ours: VersionRange | None) -> str:
    """One API of a broker's answer, as Kafka's NodeApiVersions.apiVersionToText."""
    name = known_name(api_key)
    text = f"{name or 'UNKNOWN'}({api_key}): {_versions_text(*broker)}"
    if name is None or ours is None:
        return text
    if ours[1] < broker[0]:
        return f"{text} [unusable: node too new]"
    if broker[1] < ours[0]:
        return f"{text} [unusable: node too old]"
    return f"{text} [usable: {min(ours[1], broker[1])}]"


def node_api_versions_text(
    advertised: Mapping[int, VersionRange], expected: Collection[int] = SUPPORTED.keys()
) -> str:
    """A broker's whole answer, one API per line, by key (NodeApiVersions.toString(true));
    keys of ``expected`` the broker does not advertise print as UNSUPPORTED."""
    texts = {key: api_text(key, advertised[key], tool_range(key)) for key in advertised}
    for key in expected:
        if key not in texts:
            texts[key] = f"{known_name(key) or 'UNKNOWN'}({key}): UNSUPPORTED"
    return "(\n\t" + ",\n\t".join(texts[key] for key in sorted(texts)) + "\n)"


def node_text(node_id: int, host: str, port: int, rack: str | None) -> str:
    """Kafka's Node.toString: ``host:port (id: N rack: null)``."""
    return f"{host}:{port} (id: {node_id} rack: {rack if rack is not None else 'null'})"


@click.command("broker-api-versions")
@bootstrap_option
def broker_api_versions(bootstrap_server: str) -> None:
    """This tool helps to retrieve broker version information
    (kafka-broker-api-versions)."""
    check_bootstrap(bootstrap_server)

    async def action() -> list[tuple[str, dict[int, VersionRange] | BaseException]]:
        from odradek.client.admin import Admin
        from odradek.client.errors import ClientError, KafkaError

        admin = Admin(bootstrap_server, security=client_security())
        await admin.start()  # Metadata from a bootstrap server: the brokers to ask
        try:
            brokers = sorted(admin.client.cluster.brokers.values(), key=lambda b: b.node_id)
            if not brokers:
                raise CliError("the cluster metadata lists no broker")

            async def ask(node_id: int) -> dict[int, VersionRange] | BaseException:
                try:
                    # A connection negotiates with ApiVersions: its answer is kept.
                    return dict((await admin.client.connection(node_id)).api_versions)
                except (ClientError, KafkaError) as exc:
                    return exc

            answers = await asyncio.gather(*(ask(b.node_id) for b in brokers))
            nodes = [node_text(b.node_id, b.host, b.port, b.rack) for b in brokers]
            return list(zip(nodes, answers, strict=True))
        finally:
            await admin.close()

    failed = 0
    for node, answer in run(action()):
        if isinstance(answer, BaseException):
            failed += 1
            click.echo(f"{node} -> ERROR: {answer}")
        else:
            click.echo(f"{node} -> {node_api_versions_text(answer)}")
    if failed:
        raise CliError(f"{failed} broker(s) did not answer")


def register(cli: click.Group) -> None:
    cli.add_command(broker_api_versions)
