"""``odradek configs``: kafka-configs.sh for topics and brokers (users and clients, the
client quotas, are in :mod:`odradek.cli.configs_quotas`).

Kafka's flags, with the action either as kafka-configs' ``--describe`` / ``--alter`` or as
a verb (``odradek configs describe ...``)::

    odradek configs -b HOST:PORT --entity-type topics --entity-name orders --describe [--all]
    odradek configs -b HOST:PORT --entity-type brokers --entity-default --alter \\
        --add-config log.retention.ms=3600000,log.cleaner.enable=true --delete-config k

(``--topic T``, ``--broker B`` and ``--broker-defaults`` are kafka-configs' shorthands.)

Describe prints what ConfigCommand prints: per entity a header (``Dynamic configs for
topic orders are:``, ``All configs for broker 1 are:`` with ``--all``, ``Default configs for
brokers in the cluster are:``) and one line per config, sorted by name::

      retention.ms=3600000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=3600000, \
    DEFAULT_CONFIG:log.retention.hours=168}

(one line: the synonyms are where the value could come from, highest precedence first).

Without ``--all`` only the entity's own dynamic configs are listed (DYNAMIC_TOPIC_CONFIG,
DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG); without an entity name every topic
(internal ones too) or every broker and then the cluster default. Alter sends one
IncrementalAlterConfigs (SET for ``--add-config``, DELETE for ``--delete-config``) after
checking that each deleted key is set (``Invalid config(s): k``), then prints
``Completed updating config for topic orders.`` (or ``... for broker 1.``, or
``Completed updating default config for brokers in the cluster.``). ``--add-config``
splits on commas outside square brackets, so ``cleanup.policy=[compact,delete]`` keeps its
comma (the brackets are dropped), as kafka-configs does.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import click

from odradek.cli.command_config import client_security
from odradek.cli.configs_quotas import QUOTA_TYPES
from odradek.cli.errors import CliError
from odradek.cli.output import bootstrap_option, check_bootstrap, run

if TYPE_CHECKING:
    from odradek.client.admin import Admin, ConfigEntry

ENTITY_TYPES = {"topics": "topic", "brokers": "broker"}
# Which config source each entity's own dynamic configs carry (kafka-configs' filter).
DYNAMIC_SOURCE = {
    "topic": "DYNAMIC_TOPIC_CONFIG",
    "broker": "DYNAMIC_BROKER_CONFIG",
    "default": "DYNAMIC_DEFAULT_BROKER_CONFIG",
}
# A comma followed by text with no ']' before the next '[' (or the end): outside brackets.
_SPLIT = re.compile(r",(?=[^\]]*(?:\[|$))")


def parse_add_config(text: str) -> dict[str, str]:
    """``k=v,k2=[a,b]`` -> {"k": "v", "k2": "a,b"} (kafka-configs' --add-config)."""
    configs: dict[str, str] = {}
    for item in _SPLIT.split(text):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CliError(
                f"--add-config: {item!r} is not key=value (separate entries with ',' and put "
                "values containing ',' in [brackets])"
            )
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        configs[key.strip()] = value
    return configs


def _text(value: str | None, sensitive: bool) -> str:
    return "null" if sensitive or value is None else value  # Java prints null as "null"


def _line(name: str, entry: ConfigEntry) -> str:
    value = _text(entry.value, entry.sensitive)
    synonyms = ", ".join(
        f"{source}:{syn_name}={_text(syn_value, entry.sensitive)}"
        for syn_name, syn_value, source in entry.synonyms
    )
    return f"  {name}={value} sensitive={str(entry.sensitive).lower()} synonyms={{{synonyms}}}"


def _resource(entity: str, name: str) -> Any:
    from odradek.client.admin import ConfigResource

    if entity == "broker" and name:
        try:
            int(name)
        except ValueError:
            raise CliError(
                "The entity name for brokers must be a valid integer broker id, "
                f"found: {name}"
            ) from None
    return ConfigResource(entity, name)


async def _describe(admin: Admin, entity: str, names: list[str], describe_all: bool) -> list[str]:
    from odradek.client.admin import ConfigResource

    if not names:
        if entity == "topic":
            names = sorted((await admin.list_topics()).topics)
        else:
            cluster = await admin.describe_cluster()
            names = [str(b) for b in sorted(cluster.brokers)] + [""]
    out: list[str] = []
    for name in names:
        resource: ConfigResource = _resource(entity, name)
        found = await admin.describe_configs([resource], include_synonyms=True)
        if entity == "broker" and not name:
            out.append("Default configs for brokers in the cluster are:")
            wanted = DYNAMIC_SOURCE["default"]
        else:
            out.append(f"{'All' if describe_all else 'Dynamic'} configs for {entity} {name} are:")
            wanted = DYNAMIC_SOURCE[entity]
        for key, entry in sorted(found[resource].items()):
            if describe_all or entry.source == wanted:
                out.append(_line(key, entry))
    return out


async def _alter(
    admin: Admin, entity: str, name: str, added: dict[str, str], deleted: list[str]
) -> None:
    resource = _resource(entity, name)
    current = (await admin.describe_configs([resource]))[resource]
    wanted = DYNAMIC_SOURCE["default" if entity == "broker" and not name else entity]
    dynamic = {key for key, entry in current.items() if entry.source == wanted}
    invalid = [key for key in deleted if key not in dynamic]
    if invalid:
        raise CliError(f"Invalid config(s): {','.join(invalid)}")
    changes: list[tuple[str, str, str | None]] = [(k, "set", v) for k, v in added.items()]
    changes += [(k, "delete", None) for k in deleted]
    await admin.incremental_alter_configs({resource: changes})


@click.command("configs")
@click.argument("action", required=False, type=click.Choice(["describe", "alter"]))
@bootstrap_option
@click.option(
    "--entity-type",
    type=click.Choice(sorted([*ENTITY_TYPES, *QUOTA_TYPES])),
    help="topics, brokers, users or clients.",
)
@click.option("--topic", help="Same as --entity-type topics --entity-name TOPIC.")
@click.option("--user", help="A user principal's quotas (with --client: that pair's).")
@click.option("--user-defaults", is_flag=True, help="The default user's quotas.")
@click.option("--client", help="A client id's quotas (with --user: that pair's).")
@click.option("--client-defaults", is_flag=True, help="The default client id's quotas.")
@click.option("--broker", help="Same as --entity-type brokers --entity-name BROKER.")
@click.option(
    "--broker-defaults",
    is_flag=True,
    help="Same as --entity-type brokers --entity-default.",
)
@click.option("--entity-name", help="The topic name or broker id.")
@click.option("--entity-default", is_flag=True, help="The cluster-wide broker default.")
@click.option("--describe", "describe_flag", is_flag=True, help="List configs (kafka-configs).")
@click.option("--alter", "alter_flag", is_flag=True, help="Change configs (kafka-configs).")
@click.option("--all", "describe_all", is_flag=True, help="With --describe: every config.")
@click.option(
    "--add-config",
    "add_configs",
    multiple=True,
    metavar="K=V,K2=V2",
    help="Configs to set; values with commas in [brackets]. Repeatable.",
)
@click.option(
    "--delete-config",
    "delete_configs",
    multiple=True,
    metavar="K,K2",
    help="Configs to remove (back to their defaults). Repeatable.",
)
def configs(
    action: str | None,
    bootstrap_server: str,
    entity_type: str | None,
    topic: str | None,
    user: str | None,
    user_defaults: bool,
    client: str | None,
    client_defaults: bool,
    broker: str | None,
    broker_defaults: bool,
    entity_name: str | None,
    entity_default: bool,
    describe_flag: bool,
    alter_flag: bool,
    describe_all: bool,
    add_configs: tuple[str, ...],
    delete_configs: tuple[str, ...],
) -> None:
    """Describe or alter topic, broker, user and client configs, as kafka-configs.sh."""
    from odradek.client.admin import Admin

    actions = {a for a, on in (("describe", describe_flag), ("alter", alter_flag)) if on}
    if action:
        actions.add(action)
    if len(actions) != 1:
        raise CliError("Command must include exactly one action: --describe, --alter")
    quota_entity = _quota_entity(
        entity_type, entity_name, entity_default, user, user_defaults, client, client_defaults
    )
    if quota_entity is not None:
        if topic is not None or broker is not None or broker_defaults:
            raise CliError("topics or brokers cannot be combined with users or clients")
        _run_quotas(actions.pop(), bootstrap_server, quota_entity, add_configs, delete_configs)
        return
    # kafka-configs' shorthands (--topic, --broker, --broker-defaults).
    shorthands = [
        (kind, name, default)
        for kind, name, default in (
            ("topics", topic, False),
            ("brokers", broker, False),
            ("brokers", None, broker_defaults),
        )
        if name is not None or default
    ]
    if len(shorthands) + (entity_type is not None) != 1:
        raise CliError(
            "give the entity once: --entity-type topics|brokers, or --topic, --broker, "
            "--broker-defaults"
        )
    if shorthands:
        entity_type, shorthand_name, shorthand_default = shorthands[0]
        if entity_name is not None or entity_default:
            raise CliError("--entity-name and --entity-default go with --entity-type only")
        entity_name, entity_default = shorthand_name, shorthand_default
    assert entity_type is not None
    entity = ENTITY_TYPES[entity_type]
    if entity_default and entity != "broker":
        raise CliError("--entity-default is only for --entity-type brokers here")
    if entity_default and entity_name is not None:
        raise CliError("--entity-name and --entity-default cannot be used together")
    name = "" if entity_default else entity_name
    if entity == "topic" and name == "":
        raise CliError("--entity-name must not be empty")
    (chosen,) = actions
    if chosen == "describe" and (add_configs or delete_configs):
        raise CliError("--add-config and --delete-config need --alter")
    if chosen == "alter":
        if name is None:
            raise CliError("an entity name must be specified with --alter (or --entity-default)")
        if not add_configs and not delete_configs:
            raise CliError("--alter needs --add-config or --delete-config")
    if chosen == "describe" and describe_all and entity_default:
        raise CliError("--all is not supported with --entity-default")
    added: dict[str, str] = {}
    for text in add_configs:
        added.update(parse_add_config(text))
    deleted = [k.strip() for text in delete_configs for k in text.split(",") if k.strip()]
    check_bootstrap(bootstrap_server)

    async def work() -> list[str]:
        admin = Admin(bootstrap_server, security=client_security())
        await admin.start()
        try:
            if chosen == "describe":
                return await _describe(admin, entity, [] if name is None else [name], describe_all)
            assert name is not None
            await _alter(admin, entity, name, added, deleted)
        except (ValueError, TypeError) as exc:
            raise CliError(str(exc)) from None
        finally:
            await admin.close()
        if name:
            return [f"Completed updating config for {entity} {name}."]
        return ["Completed updating default config for brokers in the cluster."]

    for line in run(work()):
        click.echo(line)


def _quota_entity(
    entity_type: str | None,
    entity_name: str | None,
    entity_default: bool,
    user: str | None,
    user_defaults: bool,
    client: str | None,
    client_defaults: bool,
) -> dict[str, str | None] | None:
    """The user / client-id quota entity the flags name ("" = any name, for --describe;
    None = <default>), or None when they name a topic or broker."""
    entity: dict[str, str | None] = {}
    flags = (("user", user, user_defaults), ("client-id", client, client_defaults))
    for kind, name, default in flags:
        if name is not None and default:
            raise CliError(f"--{kind.split('-')[0]} and its --*-defaults cannot be combined")
        if name is not None or default:
            entity[kind] = None if default else name
    if entity_type in QUOTA_TYPES:
        kind = QUOTA_TYPES[entity_type]
        if kind in entity:
            raise CliError(f"the {kind} is given twice")
        if entity_default and entity_name is not None:
            raise CliError("--entity-name and --entity-default cannot be used together")
        entity[kind] = None if entity_default else entity_name or ""
    elif entity and entity_type is not None:
        raise CliError("topics or brokers cannot be combined with users or clients")
    if not entity:
        return None
    return dict(sorted(entity.items(), key=lambda item: item[0] != "user"))


def _run_quotas(
    chosen: str,
    bootstrap_server: str,
    entity: dict[str, str | None],
    add_configs: tuple[str, ...],
    delete_configs: tuple[str, ...],
) -> None:
    from odradek.cli import configs_quotas
    from odradek.client.admin import Admin

    if chosen == "describe" and (add_configs or delete_configs):
        raise CliError("--add-config and --delete-config need --alter")
    if chosen == "alter" and not add_configs and not delete_configs:
        raise CliError("--alter needs --add-config or --delete-config")
    added: dict[str, str] = {}
    for text in add_configs:
        added.update(parse_add_config(text))
    deleted = [k.strip() for text in delete_configs for k in text.split(",") if k.strip()]
    check_bootstrap(bootstrap_server)

    async def work() -> list[str]:
        admin = Admin(bootstrap_server, security=client_security())
        await admin.start()
        try:
            if chosen == "describe":
                return await configs_quotas.describe(admin, entity)
            return await configs_quotas.alter(admin, entity, added, deleted)
        finally:
            await admin.close()

    for line in run(work()):
        click.echo(line)


def register(cli: click.Group) -> None:
    cli.add_command(configs)
