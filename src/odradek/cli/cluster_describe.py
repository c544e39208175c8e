"""``odradek cluster describe``: the cluster's id, controller and live brokers.

From DescribeCluster (Metadata on brokers without it), as Kafka's Admin.describeCluster:
one line each for the cluster id and the controller, then one line per live broker::

    Cluster ID: lN0c1B9dQiq3z2gfQ0UMzQ
    Controller: 1
    Broker: 1\tEndpoint: 127.0.0.1:9092\tRack: r1

The controller epoch is not carried by any client API; with ``--zookeeper CONNECT`` it is
read from ``/controller_epoch`` and printed as ``Controller epoch: N`` after the
controller line. The embedded single broker reports itself (id 0) as controller.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from odradek.cli.command_config import client_security
from odradek.cli.errors import CliError
from odradek.cli.output import bootstrap_option, check_bootstrap, run
from odradek.cli.zookeeper import connect_zookeeper

if TYPE_CHECKING:
    from odradek.client.metadata import ClusterMetadata

async def _describe(bootstrap_server: str) -> ClusterMetadata:
    from odradek.client.admin import Admin

    admin = Admin(check_bootstrap(bootstrap_server), security=client_security())
    await admin.start()
    try:
        return await admin.describe_cluster()
    finally:
        await admin.close()


def _controller_epoch(connect: str) -> int | None:
    from odradek.cluster.zk.errors import ZooKeeperError

    zk = connect_zookeeper(connect)
    try:
        found = zk.get_controller_epoch()
    except ZooKeeperError as exc:
        raise CliError(f"reading /controller_epoch from {connect} failed: {exc}") from None
    finally:
        zk.close()
    return None if found is None else found.epoch


def describe_lines(cluster: ClusterMetadata, controller_epoch: int | None) -> list[str]:
    lines = [
        f"Cluster ID: {cluster.cluster_id or 'none'}",
        f"Controller: {cluster.controller_id if cluster.controller_id >= 0 else 'none'}",
    ]
    if controller_epoch is not None:
        lines.append(f"Controller epoch: {controller_epoch}")
    for broker in sorted(cluster.brokers.values(), key=lambda b: b.node_id):
        lines.append(
            f"Broker: {broker.node_id}\tEndpoint: {broker.host}:{broker.port}"
            f"\tRack: {broker.rack or 'none'}"
        )
    return lines


@click.command("describe")
@bootstrap_option
@click.option(
    "--zookeeper",
    "zookeeper",
    metavar="HOST:PORT[/CHROOT]",
    help="Also read the controller epoch from this ZooKeeper (the cluster's zookeeper.connect).",
)
def describe(bootstrap_server: str, zookeeper: str | None) -> None:
    """Show the cluster id, the controller and the live brokers."""
    cluster = run(_describe(bootstrap_server))
    epoch = _controller_epoch(zookeeper) if zookeeper else None
    for line in describe_lines(cluster, epoch):
        click.echo(line)
