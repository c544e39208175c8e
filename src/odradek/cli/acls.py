"""``odradek acls``: kafka-acls.sh, with its flags and its output.

    odradek acls --bootstrap-server HOST:PORT --add --allow-principal User:alice \\
        --operation Read --operation Describe --topic orders
    odradek acls --bootstrap-server HOST:PORT --list --topic orders
    odradek acls --bootstrap-server HOST:PORT --remove --force --topic orders
    odradek acls ... --add --allow-principal User:bob --producer --topic orders

It talks to the brokers with CreateAcls / DescribeAcls / DeleteAcls through librdkafka's
admin client (confluent-kafka), which speaks every security protocol a broker listener
may require. ``--command-config`` is a Java client properties file, as Kafka's tools
take: ``security.protocol``, ``sasl.mechanism`` and ``sasl.jaas.config`` (PLAIN or SCRAM
login module with ``username``/``password``) are translated; PEM ``ssl.truststore.*`` /
``ssl.keystore.*`` files become librdkafka's ``ssl.ca.location`` and friends; any other
key is passed to librdkafka as is.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import click

from odradek.broker.security.acl import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclError,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
    check_principal,
)
from odradek.cli.command_config import command_config_path, command_properties, connection_hint
from odradek.cli.errors import CliError
from odradek.cli.output import bootstrap_option, check_bootstrap
from odradek.client.security import SECURITY_KEYS

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
TXN = ResourceType.TRANSACTIONAL_ID
REQUEST_TIMEOUT_S = 30  # librdkafka's request timeout, and how long the command waits
TOKEN = ResourceType.DELEGATION_TOKEN

# AclEntry.supportedOperations: what an ACL on each resource type may name (plus All).
SUPPORTED_OPERATIONS: dict[ResourceType, frozenset[Operation]] = {
    TOPIC: frozenset(
        {
            Operation.READ,
            Operation.WRITE,
            Operation.CREATE,
            Operation.DESCRIBE,
            Operation.DELETE,
            Operation.ALTER,
            Operation.DESCRIBE_CONFIGS,
            Operation.ALTER_CONFIGS,
        }
    ),
    GROUP: frozenset({Operation.READ, Operation.DESCRIBE, Operation.DELETE}),
    CLUSTER: frozenset(
        {
            Operation.CREATE,
            Operation.CLUSTER_ACTION,
            Operation.DESCRIBE_CONFIGS,
            Operation.ALTER_CONFIGS,
            Operation.IDEMPOTENT_WRITE,
            Operation.ALTER,
            Operation.DESCRIBE,
        }
    ),
    TXN: frozenset({Operation.DESCRIBE, Operation.WRITE}),
    TOKEN: frozenset({Operation.DESCRIBE}),
}

ResourceFilter = tuple[ResourceType, str, PatternType]


# --- building ACLs from the flags (no I/O) ----------------------------------------------


def resource_filters(
    topics: Iterable[str],
    groups: Iterable[str],
    transactional_ids: Iterable[str],
    cluster: bool,
    pattern: PatternType,
    delegation_tokens: Iterable[str] = (),
) -> list[ResourceFilter]:
    out: list[ResourceFilter] = [(TOPIC, t.strip(), pattern) for t in topics]
    if cluster and pattern is PatternType.LITERAL:
        out.append((CLUSTER, CLUSTER_NAME, PatternType.LITERAL))
    out += [(GROUP, g.strip(), pattern) for g in groups]
    out += [(TXN, t, pattern) for t in transactional_ids]
    out += [(TOKEN, t.strip(), pattern) for t in delegation_tokens]
    return out


def entries(
    allow: Iterable[str],
    deny: Iterable[str],
    allow_hosts: Iterable[str],
    deny_hosts: Iterable[str],
    operations: Iterable[Operation],
) -> list[AccessControlEntry]:
    """Every principal x operation x host, as AclCommand.getAcl (hosts default to *)."""
    allow, deny, operations = list(allow), list(deny), list(operations)
    allow_hosts = [h.strip() for h in allow_hosts] or (["*"] if allow else [])
    deny_hosts = [h.strip() for h in deny_hosts] or (["*"] if deny else [])
    out = []
    for principals, hosts, permission in (
        (allow, allow_hosts, Permission.ALLOW),
        (deny, deny_hosts, Permission.DENY),
    ):
        for principal in principals:
            try:
                check_principal(principal.strip())
            except AclError as exc:
                raise CliError(str(exc)) from None
            for operation in operations:
                for host in hosts:
                    out.append(AccessControlEntry(principal.strip(), host, operation, permission))
    return sorted(set(out))


def acls_by_resource(
    filters: list[ResourceFilter],
    make_entries: Any,
    producer: bool,
    consumer: bool,
    idempotent: bool,
    operations: list[Operation],
) -> dict[ResourceFilter, list[AccessControlEntry]]:
    """AclCommand.getResourceFilterToAcls: the flags' operations, or the --producer /
    --consumer conveniences (Write, Describe, Create on topics and Write, Describe on
    transactional ids; Read, Describe on topics and Read on groups)."""
    out: dict[ResourceFilter, list[AccessControlEntry]] = {}
    if not producer and not consumer:
        out = {f: make_entries(operations) for f in filters}
    if producer:
        for f in filters:
            if f[0] is TOPIC:
                out[f] = make_entries([Operation.WRITE, Operation.DESCRIBE, Operation.CREATE])
            elif f[0] is TXN:
                out[f] = make_entries([Operation.WRITE, Operation.DESCRIBE])
        if idempotent:
            out[(CLUSTER, CLUSTER_NAME, PatternType.LITERAL)] = make_entries(
                [Operation.IDEMPOTENT_WRITE]
            )
    if consumer:
        for f in filters:
            if f[0] is TOPIC:
                more = make_entries([Operation.READ, Operation.DESCRIBE])
            elif f[0] is GROUP:
                more = make_entries([Operation.READ])
            else:
                continue
            out[f] = sorted(set(out.get(f, [])) | set(more))
    for (kind, _name, _pattern), acls in out.items():
        valid = SUPPORTED_OPERATIONS[kind] | {Operation.ALL}
        if any(acl.operation not in valid for acl in acls):
            names = ", ".join(sorted(op.zk_name for op in valid))
            raise CliError(f"ResourceType {kind.name} only supports operations {names}")
    return out


def pattern_str(kind: ResourceType, name: str, pattern: PatternType) -> str:
    return str(ResourcePattern(kind, name, pattern))


def filter_str(kind: ResourceType, name: str, pattern: PatternType) -> str:
    return str(AclBindingFilter(kind, name, pattern))


def block(acls: Iterable[AccessControlEntry]) -> str:
    """Kafka's ``\\n \\t(acl)\\n\\t(acl) \\n`` listing (AclCommand prints it so)."""
    return "\n " + "\n".join(f"\t{acl}" for acl in acls) + " \n"


# --- talking to the brokers (librdkafka's admin client) --------------------------------


# The --command-config keys librdkafka is given: the security keys odradek's own client reads
# (translated to librdkafka's names), and client.id, which means the same to both.
LIBRDKAFKA_KEYS = SECURITY_KEYS | {"client.id"}


def client_config(
    bootstrap: str, props: Mapping[str, str] | None, source: Path | None = None
) -> dict[str, str]:
    """librdkafka's settings from ``--command-config``'s Java ones (``source``: the file)."""
    config = {"bootstrap.servers": bootstrap}
    for key, value in (props or {}).items():
        if key not in LIBRDKAFKA_KEYS:
            continue  # warned about by command_properties
        if key == "sasl.jaas.config":
            from odradek.broker.security.jaas import JaasError, parse_jaas

            try:
                options = parse_jaas(value).options
            except JaasError as exc:
                raise CliError(f"{source}: sasl.jaas.config: {exc}") from None
            config["sasl.username"] = options.get("username", "")
            config["sasl.password"] = options.get("password", "")
        elif key == "ssl.truststore.location":
            config["ssl.ca.location"] = value
        elif key == "ssl.keystore.location":
            config["ssl.certificate.location"] = value
            config.setdefault("ssl.key.location", value)
        elif key == "ssl.key.password":
            config["ssl.key.password"] = value
        elif key == "ssl.endpoint.identification.algorithm":
            # Java turns host name checks off with an empty value, librdkafka with "none".
            config[key] = value.strip().lower() or "none"
        elif key.startswith(("ssl.truststore.", "ssl.keystore.")):
            continue  # type=PEM: librdkafka reads PEM files as they are
        else:
            config[key] = value
    return config


class _Admin:
    def __init__(self, config: dict[str, str]) -> None:
        try:
            from confluent_kafka import KafkaException
            from confluent_kafka import admin as ck
        except ImportError:
            raise CliError(
                "odradek acls needs confluent-kafka (pip install 'odradek[admin]')"
            ) from None
        self.ck = ck
        self.error = KafkaException
        self.bootstrap = config["bootstrap.servers"]
        # librdkafka retries a broker that hangs up until the request times out, reporting
        # why through error_cb (served by poll): kept to say why there was no answer.
        self.client_errors: list[str] = []
        try:
            # librdkafka's own log lines would follow our one-line errors: errors only.
            self.client = ck.AdminClient(
                {
                    **config,
                    "socket.timeout.ms": "15000",
                    "log_level": 0,
                    "error_cb": lambda error: self.client_errors.append(error.str()),
                }
            )
        except (KafkaException, ValueError, TypeError) as exc:
            raise CliError(f"--command-config: {_message(exc)}") from None

    def _kind(self, kind: ResourceType) -> Any:
        # librdkafka names resource type 4 BROKER; on the wire it is Kafka's CLUSTER.
        return self.ck.ResourceType(int(kind))

    def binding(self, resource: ResourceFilter, acl: AccessControlEntry) -> Any:
        kind, name, pattern = resource
        return self.ck.AclBinding(
            self._kind(kind),
            name,
            self.ck.ResourcePatternType(int(pattern)),
            acl.principal,
            acl.host,
            self.ck.AclOperation(int(acl.operation)),
            self.ck.AclPermissionType(int(acl.permission)),
        )

    def filter(self, resource: ResourceFilter | None, acl: AccessControlEntry | None) -> Any:
        kind, name, pattern = resource or (ResourceType.ANY, None, PatternType.ANY)
        return self.ck.AclBindingFilter(
            self._kind(kind),
            name,
            self.ck.ResourcePatternType(int(pattern)),
            acl.principal if acl else None,
            acl.host if acl else None,
            self.ck.AclOperation(int(acl.operation) if acl else 1),
            self.ck.AclPermissionType(int(acl.permission) if acl else 1),
        )

    def wait(self, futures: Iterable[Any]) -> list[Any]:
        pending = list(futures)
        # librdkafka fails the request after REQUEST_TIMEOUT_S; a little more as a backstop.
        deadline = time.monotonic() + REQUEST_TIMEOUT_S + 5
        while not all(f.done() for f in pending) and time.monotonic() < deadline:
            self.client.poll(0.1)
        try:
            return [future.result(0) for future in pending]
        except self.error as exc:
            message = f"Error while executing ACL command: {_message(exc)}"
            code = getattr(exc.args[0], "code", lambda: None)() if exc.args else None
            if code == self.ck.KafkaError._TIMED_OUT:
                message = f"{message}: {no_answer(self.bootstrap, self.client_errors)}"
            raise CliError(message) from None
        except TimeoutError:
            raise CliError(no_answer(self.bootstrap, self.client_errors)) from None

    def create(self, bindings: list[Any]) -> None:
        self.wait(self.client.create_acls(bindings, request_timeout=REQUEST_TIMEOUT_S).values())

    def describe(self, flt: Any) -> list[AclBinding]:
        [found] = self.wait([self.client.describe_acls(flt, request_timeout=REQUEST_TIMEOUT_S)])
        return [_binding_of(b) for b in found]

    def delete(self, filters: list[Any]) -> None:
        self.wait(self.client.delete_acls(filters, request_timeout=REQUEST_TIMEOUT_S).values())


def no_answer(bootstrap: str, client_errors: list[str]) -> str:
    """Why librdkafka got no answer: its last complaint and, unless the broker was simply
    not there, the --command-config hint (a listener of another security protocol hangs up
    on every try, and librdkafka retries until the request times out)."""
    message = f"no answer from {bootstrap} within {REQUEST_TIMEOUT_S} s"
    if not client_errors:
        return message
    message += f" (librdkafka: {client_errors[-1]})"
    if any("Connection refused" in error for error in client_errors):
        return message
    return f"{message}; {connection_hint()}"


def _message(exc: BaseException) -> str:
    arg = exc.args[0] if exc.args else exc
    return str(getattr(arg, "str", lambda: arg)())


def _binding_of(b: Any) -> AclBinding:
    return AclBinding(
        ResourcePattern(
            ResourceType(b.restype.value), b.name, PatternType(b.resource_pattern_type.value)
        ),
        AccessControlEntry(
            b.principal, b.host, Operation(b.operation.value), Permission(b.permission_type.value)
        ),
    )


# --- the command ----------------------------------------------------------------------


def _operation(text: str) -> Operation:
    try:
        operation = Operation.parse(text)
    except AclError as exc:
        raise CliError(str(exc)) from None
    if operation in (Operation.ANY, Operation.UNKNOWN):
        raise CliError(f"unknown operation {text!r}")
    return operation


@click.command("acls")
@bootstrap_option
@click.option("--add", "action", flag_value="add", help="Add ACLs.")
@click.option("--remove", "action", flag_value="remove", help="Remove ACLs.")
@click.option("--list", "action", flag_value="list", help="List ACLs.")
@click.option("--allow-principal", multiple=True, metavar="Type:name")
@click.option("--deny-principal", multiple=True, metavar="Type:name")
@click.option("--allow-host", multiple=True, metavar="HOST")
@click.option("--deny-host", multiple=True, metavar="HOST")
@click.option("--principal", "list_principals", multiple=True, help="--list: only these.")
@click.option("--operation", multiple=True, help="Read, Write, Describe, ... (default All).")
@click.option("--topic", multiple=True)
@click.option("--group", multiple=True)
@click.option("--transactional-id", multiple=True)
@click.option("--delegation-token", multiple=True, help="A delegation token id.")
@click.option("--cluster", is_flag=True, help="The cluster resource.")
@click.option(
    "--resource-pattern-type",
    default="literal",
    show_default=True,
    type=click.Choice(["literal", "prefixed", "match", "any"], case_sensitive=False),
)
@click.option("--producer", is_flag=True, help="Write, Describe, Create on the topics.")
@click.option("--consumer", is_flag=True, help="Read, Describe on topics, Read on groups.")
@click.option("--idempotent", is_flag=True, help="With --producer: IdempotentWrite.")
@click.option("--force", is_flag=True, help="--remove without asking.")
def acls(
    bootstrap_server: str,
    action: str | None,
    allow_principal: tuple[str, ...],
    deny_principal: tuple[str, ...],
    allow_host: tuple[str, ...],
    deny_host: tuple[str, ...],
    list_principals: tuple[str, ...],
    operation: tuple[str, ...],
    topic: tuple[str, ...],
    group: tuple[str, ...],
    transactional_id: tuple[str, ...],
    delegation_token: tuple[str, ...],
    cluster: bool,
    resource_pattern_type: str,
    producer: bool,
    consumer: bool,
    idempotent: bool,
    force: bool,
) -> None:
    """Add, remove or list ACLs (kafka-acls.sh)."""
    check_bootstrap(bootstrap_server)
    if action is None:
        raise CliError("Command must include exactly one action: --list, --add, --remove.")
    if (producer or consumer) and (operation or deny_principal):
        raise CliError(
            "--producer/--consumer cannot be combined with --operation or --deny-principal"
        )
    if consumer and not group and action == "add":
        raise CliError("With --consumer you must specify a --group")
    pattern = PatternType.parse(resource_pattern_type)
    operations = [_operation(o) for o in operation] or [Operation.ALL]
    filters = resource_filters(
        topic, group, transactional_id, cluster or idempotent, pattern, delegation_token
    )

    def make_entries(ops: list[Operation]) -> list[AccessControlEntry]:
        return entries(allow_principal, deny_principal, allow_host, deny_host, ops)

    # --command-config comes with --bootstrap-server (command_config.py); librdkafka takes
    # the file's keys itself rather than odradek's ClientSecurity.
    config = client_config(
        bootstrap_server, command_properties(LIBRDKAFKA_KEYS), command_config_path()
    )
    if action == "list":
        _list(_Admin(config), filters, list_principals)
        return
    if not filters:
        raise CliError(
            "You must provide at least one resource: --topic <topic> or --cluster or "
            "--group <group> or --transactional-id <id> or --delegation-token <id>"
        )
    resource_acls = acls_by_resource(
        filters, make_entries, producer, consumer, idempotent, operations
    )
    if action == "add":
        if pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise CliError(
                f"A '--resource-pattern-type' value of '{pattern.name}' is not valid when "
                "adding acls."
            )
        if any(not acls for acls in resource_acls.values()):
            raise CliError(
                "You must specify one of: --allow-principal, --deny-principal when trying "
                "to add ACLs."
            )
        admin = _Admin(config)
        for resource, acls in resource_acls.items():
            click.echo(f"Adding ACLs for resource `{pattern_str(*resource)}`: {block(acls)}")
            admin.create([admin.binding(resource, acl) for acl in acls])
        return
    admin = _Admin(config)
    for resource, acls in resource_acls.items():
        if acls:
            question = (
                f"Are you sure you want to remove ACLs: {block(acls)} from resource filter "
                f"`{filter_str(*resource)}`? (y/n)"
            )
        else:
            question = (
                "Are you sure you want to delete all ACLs for resource filter "
                f"`{filter_str(*resource)}`? (y/n)"
            )
        if not force:
            click.echo(question)
            answer = sys.stdin.readline().strip()
            if answer.lower() != "y":
                continue
        if acls:
            admin.delete([admin.filter(resource, acl) for acl in acls])
        else:
            admin.delete([admin.filter(resource, None)])


def _list(admin: _Admin, filters: list[ResourceFilter], principals: tuple[str, ...]) -> None:
    found: list[AclBinding] = []
    for flt in filters or [None]:
        found.extend(admin.describe(admin.filter(flt, None)))
    by_resource: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for binding in sorted(set(found)):
        by_resource.setdefault(binding.pattern, []).append(binding.entry)
    groups: list[tuple[str | None, dict[ResourcePattern, list[AccessControlEntry]]]] = []
    if not principals:
        groups.append((None, by_resource))
    for principal in principals:
        mine = {
            resource: [acl for acl in acls if acl.principal == principal]
            for resource, acls in by_resource.items()
        }
        groups.append((principal, {r: a for r, a in mine.items() if a}))
    for principal, resources in groups:
        if principal is not None:
            click.echo(f"ACLs for principal `{principal}`")
        for resource, acls in resources.items():
            click.echo(f"Current ACLs for resource `{resource}`: {block(acls)}")


def register(cli: click.Group) -> None:
    cli.add_command(acls)
