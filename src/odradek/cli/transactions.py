"""``odradek transactions list|describe|describe-producers|abort``: kafka-transactions.sh.

Output columns are Kafka's (``kafka-transactions.sh``), two spaces apart:

* ``list`` — TransactionalId  Coordinator  ProducerId  TransactionState
* ``describe --transactional-id ID`` — CoordinatorId  TransactionalId  ProducerId
  ProducerEpoch  TransactionState  TransactionTimeoutMs  CurrentTransactionStartTimeMs
  TransactionDurationMs  TopicPartitions (``None`` when no transaction is open)
* ``describe-producers --topic T --partition P`` — ProducerId  ProducerEpoch
  LatestCoordinatorEpoch  LastSequence  LastTimestamp  CurrentTransactionStartOffset
* ``abort --topic T --partition P --start-offset O`` aborts the open transaction that
  began at offset O there (found with DescribeProducers); or name it with
  ``--producer-id --producer-epoch --coordinator-epoch``.

Every failure is one ``error: ...`` line on stderr with exit code 1.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

import click

from odradek.cli.command_config import client_security
from odradek.cli.errors import CliError
from odradek.cli.output import bootstrap_option, check_bootstrap, run, table

if TYPE_CHECKING:
    from odradek.client.txn_admin import TxnAdmin

T = TypeVar("T")


async def _with_admin(bootstrap_server: str, action: Callable[[TxnAdmin], Awaitable[T]]) -> T:
    from odradek.client.txn_admin import TxnAdmin

    check_bootstrap(bootstrap_server)
    admin = TxnAdmin(bootstrap_server, security=client_security())
    await admin.start()
    try:
        return await action(admin)
    finally:
        await admin.close()


@click.group()
def transactions() -> None:
    """List, describe and abort transactions (like kafka-transactions.sh)."""


@transactions.command("list")
@bootstrap_option
def list_(bootstrap_server: str) -> None:
    """Every transactional id the coordinators know."""
    listings = run(_with_admin(bootstrap_server, lambda a: a.list_transactions()))
    click.echo(
        table(
            ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"],
            [[t.transactional_id, t.coordinator, t.producer_id, t.state] for t in listings],
        )
    )


@transactions.command()
@bootstrap_option
@click.option("--transactional-id", required=True, help="The transactional id to describe.")
def describe(bootstrap_server: str, transactional_id: str) -> None:
    """The state of one transactional id at its coordinator."""
    d = run(_with_admin(bootstrap_server, lambda a: a.describe_transaction(transactional_id)))
    open_ = d.start_time_ms >= 0
    duration = int(time.time() * 1000) - d.start_time_ms if open_ else "None"
    partitions = ",".join(f"{t}-{p}" for t, p in sorted(d.partitions))
    click.echo(
        table(
            [
                "CoordinatorId",
                "TransactionalId",
                "ProducerId",
                "ProducerEpoch",
                "TransactionState",
                "TransactionTimeoutMs",
                "CurrentTransactionStartTimeMs",
                "TransactionDurationMs",
                "TopicPartitions",
            ],
            [
                [
                    d.coordinator,
                    d.transactional_id,
                    d.producer_id,
                    d.producer_epoch,
                    d.state,
                    d.timeout_ms,
                    d.start_time_ms if open_ else "None",
                    duration,
                    partitions,
                ]
            ],
        )
    )


@transactions.command("describe-producers")
@bootstrap_option
@click.option("--topic", required=True)
@click.option("--partition", required=True, type=int)
def describe_producers(bootstrap_server: str, topic: str, partition: int) -> None:
    """The producers a partition remembers (idempotent and transactional)."""
    producers = run(_with_admin(bootstrap_server, lambda a: a.describe_producers(topic, partition)))
    click.echo(
        table(
            [
                "ProducerId",
                "ProducerEpoch",
                "LatestCoordinatorEpoch",
                "LastSequence",
                "LastTimestamp",
                "CurrentTransactionStartOffset",
            ],
            [
                [
                    p.producer_id,
                    p.producer_epoch,
                    p.coordinator_epoch,
                    p.last_sequence,
                    p.last_timestamp,
                    p.current_txn_start_offset if p.current_txn_start_offset >= 0 else "None",
                ]
                for p in producers
            ],
        )
    )


@transactions.command()
@bootstrap_option
@click.option("--topic", required=True)
@click.option("--partition", required=True, type=int)
@click.option("--start-offset", type=int, help="Where the hanging transaction began.")
@click.option("--producer-id", type=int)
@click.option("--producer-epoch", type=int)
@click.option("--coordinator-epoch", type=int)
def abort(
    bootstrap_server: str,
    topic: str,
    partition: int,
    start_offset: int | None,
    producer_id: int | None,
    producer_epoch: int | None,
    coordinator_epoch: int | None,
) -> None:
    """Abort a hanging transaction in one partition (writes an ABORT marker there)."""
    named = (producer_id, producer_epoch, coordinator_epoch)
    if (start_offset is not None) == all(v is not None for v in named):
        raise CliError(
            "give either --start-offset or all of --producer-id, --producer-epoch and "
            "--coordinator-epoch"
        )

    async def action(admin: TxnAdmin) -> None:
        pid, epoch, coord = named
        if start_offset is not None:
            producers = await admin.describe_producers(topic, partition)
            match = [p for p in producers if p.current_txn_start_offset == start_offset]
            if not match:
                raise CliError(
                    f"no open transaction starts at offset {start_offset} of {topic}-{partition}"
                )
            pid, epoch, coord = (
                match[0].producer_id,
                match[0].producer_epoch,
                max(match[0].coordinator_epoch, 0),
            )
        assert pid is not None and epoch is not None and coord is not None
        await admin.abort_transaction(
            topic, partition, producer_id=pid, producer_epoch=epoch, coordinator_epoch=coord
        )

    run(_with_admin(bootstrap_server, action))


def register(cli: click.Group) -> None:
    cli.add_command(transactions)
