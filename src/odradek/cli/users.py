"""``odradek users add|describe|delete``: SCRAM credentials, as ``kafka-configs
--entity-type users`` manages them (AlterUserScramCredentials /
DescribeUserScramCredentials). Passwords are salted and hashed by the client; the
broker stores only the salted keys.

    odradek users add alice --add-config 'SCRAM-SHA-256=[iterations=8192,password=s3cret]'
    odradek users describe alice
    odradek users delete alice --delete-config SCRAM-SHA-256
    odradek users add broker --zookeeper 127.0.0.1:2181/odradek \
        --add-config 'SCRAM-SHA-512=[password=broker-secret]'

``--zookeeper`` writes straight into ``/config/users/<name>``, as ``kafka-configs.sh
--zookeeper`` still may in Kafka 3 (KIP-554): the way to create the brokers' own
inter-broker SCRAM user before any broker runs.
"""

from __future__ import annotations

import re
from typing import Any

import click

from odradek.cli.command_config import client_security
from odradek.cli.errors import CliError
from odradek.cli.output import bootstrap_option, check_bootstrap, run
from odradek.cli.zookeeper import connect_zookeeper

_ENTRY = re.compile(r"\s*(SCRAM-SHA-(?:256|512))=\[([^\]]*)\]\s*(?:,|$)")


def parse_add_config(text: str) -> list[tuple[str, str, int]]:
    """Kafka's ``SCRAM-SHA-256=[iterations=8192,password=x],SCRAM-SHA-512=[password=x]``
    as (mechanism, password, iterations)."""
    out = []
    position = 0
    while position < len(text.strip()):
        match = _ENTRY.match(text, position)
        if match is None:
            raise CliError(
                "--add-config: expected 'SCRAM-SHA-256=[password=...]' or "
                "'SCRAM-SHA-512=[iterations=N,password=...]', comma-separated"
            )
        fields: dict[str, str] = {}
        for part in match.group(2).split(","):
            key, sep, value = part.partition("=")
            if not sep or key.strip() not in ("password", "iterations"):
                raise CliError(
                    f"--add-config: unknown setting {key.strip()!r} (password, iterations)"
                )
            fields[key.strip()] = value
        if not fields.get("password"):
            raise CliError(f"--add-config: {match.group(1)} needs password=...")
        try:
            iterations = int(fields.get("iterations", "4096"))
        except ValueError:
            raise CliError("--add-config: iterations must be a number") from None
        out.append((match.group(1), fields["password"], iterations))
        position = match.end()
    if not out:
        raise CliError("--add-config: nothing to add")
    return out


async def _with_admin(bootstrap: str, action: Any) -> Any:
    from odradek.client.admin import Admin

    admin = Admin(bootstrap, security=client_security())
    await admin.start()
    try:
        return await action(admin._client)
    finally:
        await admin.close()


def _raise_errors(results: dict[str, Any]) -> None:
    for user, error in results.items():
        if error is not None:
            raise CliError(f"user {user}: {error}")


@click.group("users")
def users() -> None:
    """Manage SASL/SCRAM user credentials (kafka-configs --entity-type users)."""


def _add_in_zookeeper(connect: str, name: str, entries: list[tuple[str, str, int]]) -> None:
    """Salt and hash here, then write the user's znode (its quotas stay), as Kafka's
    ``kafka-configs.sh --zookeeper`` does; brokers pick it up from ``/config/changes``."""
    from odradek.broker.security.scram import (
        MAX_ITERATIONS,
        MECHANISMS,
        credential_from_password,
    )
    from odradek.cluster.zk.errors import ZooKeeperError
    from odradek.cluster.zk.user_configs import read_all, write_scram

    for mechanism, _password, iterations in entries:
        if not MECHANISMS[mechanism][1] <= iterations <= MAX_ITERATIONS:  # as the broker's
            raise CliError(
                f"--add-config: {mechanism} iterations must be between "
                f"{MECHANISMS[mechanism][1]} and {MAX_ITERATIONS}"
            )
    zk = connect_zookeeper(connect)
    try:
        kept = read_all(zk)[1].get(name, {})
        kept.update(
            {m: credential_from_password(m, p, i).to_text() for m, p, i in entries}
        )
        write_scram(zk, name, kept)
    except ZooKeeperError as exc:
        raise CliError(f"writing user {name} to {connect} failed: {exc}") from None
    finally:
        zk.close()


@users.command("add")
@bootstrap_option
@click.option(
    "--zookeeper",
    "zookeeper",
    default=None,
    metavar="HOST:PORT[/CHROOT]",
    help="Write the credentials into this ZooKeeper instead (before any broker runs).",
)
@click.argument("name")
@click.option("--add-config", "add_config", required=True, help="SCRAM-SHA-256=[password=...]")
def add(bootstrap_server: str, zookeeper: str | None, name: str, add_config: str) -> None:
    """Add or replace NAME's SCRAM credentials."""
    from odradek.client.scram_users import Upsertion, alter_users

    parsed = parse_add_config(add_config)
    if zookeeper is not None:
        _add_in_zookeeper(zookeeper, name, parsed)
        click.echo(f"Completed updating config for user {name}.")
        return
    check_bootstrap(bootstrap_server)
    entries = [Upsertion(name, m, p, i) for m, p, i in parsed]
    results = run(_with_admin(bootstrap_server, lambda c: alter_users(c, upsertions=entries)))
    _raise_errors(results)
    click.echo(f"Completed updating config for user {name}.")


@users.command("delete")
@bootstrap_option
@click.argument("name")
@click.option(
    "--delete-config",
    "delete_config",
    default="SCRAM-SHA-256,SCRAM-SHA-512",
    show_default=True,
    help="Mechanisms whose credential to delete.",
)
def delete(bootstrap_server: str, name: str, delete_config: str) -> None:
    """Delete NAME's SCRAM credentials (those it has among --delete-config)."""
    from odradek.client.scram_users import MECHANISMS, alter_users, describe_users

    check_bootstrap(bootstrap_server)
    wanted = [m.strip() for m in delete_config.split(",") if m.strip()]
    unknown = [m for m in wanted if m not in MECHANISMS]
    if unknown:
        raise CliError(f"--delete-config: unknown mechanism {', '.join(unknown)}")

    async def action(client: Any) -> dict[str, Any]:
        have = (await describe_users(client, [name])).get(name, {})
        present = [m for m in wanted if m in have]
        if not present:
            raise CliError(f"user {name} has no {' or '.join(wanted)} credential")
        return await alter_users(client, deletions=[(name, m) for m in present])

    _raise_errors(run(_with_admin(bootstrap_server, action)))
    click.echo(f"Completed updating config for user {name}.")


@users.command("describe")
@bootstrap_option
@click.argument("names", nargs=-1)
def describe(bootstrap_server: str, names: tuple[str, ...]) -> None:
    """Show which SCRAM mechanisms (and iterations) each user has; all users by default."""
    from odradek.client.errors import KafkaError
    from odradek.client.scram_users import describe_users

    check_bootstrap(bootstrap_server)
    try:
        found = run(_with_admin(bootstrap_server, lambda c: describe_users(c, list(names) or None)))
    except KafkaError as exc:
        raise CliError(str(exc)) from None
    for user, mechanisms in sorted(found.items()):
        configs = ", ".join(f"{m}=iterations={i}" for m, i in sorted(mechanisms.items()))
        click.echo(f"SCRAM credential configs for user-principal '{user}' are {configs}")


def register(cli: click.Group) -> None:
    cli.add_command(users)
