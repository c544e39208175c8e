"""CreateAcls (30), DescribeAcls (29) and DeleteAcls (31), as Kafka's AclApis.

Without ``authorizer.class.name`` they answer SECURITY_DISABLED. Who may call them (Alter
or Describe on the Cluster) is checked before they run (``security.api_rules``). A
malformed ACL or filter is INVALID_REQUEST for that element only. Changes are written to
the ACL store (a file, or ZooKeeper) in a thread, off the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from odradek.broker.handlers.common import respond
from odradek.broker.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclError,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)
from odradek.cluster.zk.errors import ZooKeeperError

if TYPE_CHECKING:
    from odradek.broker.requests import RequestContext
    from odradek.broker.server import KafkaServer

_DISABLED = "No Authorizer is configured on the broker"


def _enum(kind: Callable[[int], Any], value: int, what: str) -> Any:
    try:
        return kind(int(value))
    except ValueError:
        raise AclError(f"unknown {what} {value}") from None


def _binding(creation: Any) -> AclBinding:
    return AclBinding(
        ResourcePattern(
            _enum(ResourceType, creation.resource_type, "resource type"),
            str(creation.resource_name),
            _enum(PatternType, getattr(creation, "resource_pattern_type", 3), "pattern type"),
        ),
        AccessControlEntry(
            str(creation.principal),
            str(creation.host),
            _enum(Operation, creation.operation, "operation"),
            _enum(Permission, creation.permission_type, "permission type"),
        ),
    )


def _filter(raw: Any) -> AclBindingFilter:
    flt = AclBindingFilter(
        _enum(ResourceType, raw.resource_type_filter, "resource type"),
        raw.resource_name_filter,
        _enum(PatternType, getattr(raw, "pattern_type_filter", 3), "pattern type"),
        raw.principal_filter,
        raw.host_filter,
        _enum(Operation, raw.operation, "operation"),
        _enum(Permission, raw.permission_type, "permission type"),
    )
    flt.validate()
    return flt


async def handle_create_acls(server: KafkaServer, ctx: RequestContext, request: Any) -> Any:
    authorizer = server.authorizer
    results: list[dict[str, Any]] = []
    if authorizer is None:
        results = [
            {"error_code": ErrorCode.security_disabled, "error_message": _DISABLED}
            for _ in request.creations
        ]
        return respond(ctx, {"throttle_time": 0, "results": results})
    bindings: list[AclBinding | None] = []
    errors: list[str | None] = []
    for creation in request.creations:
        try:
            binding = _binding(creation)
            binding.validate()
        except AclError as exc:
            bindings.append(None)
            errors.append(str(exc))
            continue
        bindings.append(binding)
        errors.append(None)
    valid = [b for b in bindings if b is not None]
    try:
        await asyncio.to_thread(authorizer.create, valid)
        failure = None
    except (ZooKeeperError, OSError) as exc:
        failure = f"storing the ACLs failed: {exc}"
    for error in errors:
        if error is not None:
            results.append({"error_code": ErrorCode.invalid_request, "error_message": error})
        elif failure is not None:
            results.append({"error_code": ErrorCode.unknown_server_error, "error_message": failure})
        else:
            results.append({"error_code": ErrorCode.none, "error_message": None})
    return respond(ctx, {"throttle_time": 0, "results": results})


def _description(entry: AccessControlEntry) -> dict[str, Any]:
    return {
        "principal": entry.principal,
        "host": entry.host,
        "operation": int(entry.operation),
        "permission_type": int(entry.permission),
    }


async def handle_describe_acls(server: KafkaServer, ctx: RequestContext, request: Any) -> Any:
    values: dict[str, Any] = {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "resources": [],
    }
    authorizer = server.authorizer
    if authorizer is None:
        values.update(error_code=ErrorCode.security_disabled, error_message=_DISABLED)
        return respond(ctx, values)
    try:
        flt = _filter(request)
    except AclError as exc:
        values.update(error_code=ErrorCode.invalid_request, error_message=str(exc))
        return respond(ctx, values)
    by_pattern: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for binding in authorizer.describe(flt):
        by_pattern.setdefault(binding.pattern, []).append(binding.entry)
    values["resources"] = [
        {
            "resource_type": int(pattern.resource_type),
            "resource_name": pattern.name,
            "pattern_type": int(pattern.pattern_type),
            "acls": [_description(e) for e in entries],
        }
        for pattern, entries in by_pattern.items()
    ]
    return respond(ctx, values)


def _failed(code: ErrorCode, message: str | None) -> dict[str, Any]:
    return {"error_code": code, "error_message": message, "matching_acls": []}


async def handle_delete_acls(server: KafkaServer, ctx: RequestContext, request: Any) -> Any:
    authorizer = server.authorizer
    if authorizer is None:
        results = [_failed(ErrorCode.security_disabled, _DISABLED) for _ in request.filters]
        return respond(ctx, {"throttle_time": 0, "filter_results": results})
    filters: list[AclBindingFilter | None] = []
    errors: list[str | None] = []
    for raw in request.filters:
        try:
            filters.append(_filter(raw))
            errors.append(None)
        except AclError as exc:
            filters.append(None)
            errors.append(str(exc))
    valid = [f for f in filters if f is not None]
    failure = None
    deleted: list[list[AclBinding]] = [[] for _ in valid]
    try:
        deleted = await asyncio.to_thread(authorizer.delete, valid)
    except (ZooKeeperError, OSError) as exc:
        failure = f"deleting the ACLs failed: {exc}"
    results = []
    found = iter(deleted)
    for flt, error in zip(filters, errors, strict=True):
        if flt is None:
            results.append(_failed(ErrorCode.invalid_request, error))
            continue
        removed = next(found)
        if failure is not None:
            results.append(_failed(ErrorCode.unknown_server_error, failure))
            continue
        results.append(
            {
                "error_code": ErrorCode.none,
                "error_message": None,
                "matching_acls": [
                    {
                        "error_code": ErrorCode.none,
                        "error_message": None,
                        "resource_type": int(b.pattern.resource_type),
                        "resource_name": b.pattern.name,
                        "pattern_type": int(b.pattern.pattern_type),
                        **_description(b.entry),
                    }
                    for b in removed
                ],
            }
        )
    return respond(ctx, {"throttle_time": 0, "filter_results": results})
