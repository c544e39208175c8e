"""Authorising requests before their handlers see them, so handlers stay unaware of ACLs.

Each API's rule (:mod:`odradek.broker.security.api_rules`) looks at the request and gives a
:class:`Decision`:

* ``refuse``: the whole request fails with one error code, answered with Kafka's error
  response for it (every error field set, topics and groups mirrored from the request);
  ``answer`` when the rule builds that response itself;
* ``split``: some elements of a top-level request array (topics, groups, config
  resources) are refused. The handler runs on the request without them and the refused
  ones are added to its answer with their error codes, as Kafka answers a Produce
  naming one forbidden topic. With ``rest`` set the others are not attempted at all
  (AddPartitionsToTxn: ``OPERATION_NOT_ATTEMPTED``);
* ``keep``: the handler runs, then elements of a response array the principal may not
  see are dropped (ListGroups, ListTransactions, OffsetFetch for all topics).

Fetch and Metadata are the exceptions: their answers are pre-encoded (file regions, kept
topic entries), so their handlers ask ``ctx.authz`` (a :class:`Check`) which topics they
may read or describe (Metadata through ``metadata_access``).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.broker.requests import DeferredResponse, RequestContext, ResponseValues
from odradek.broker.security.acl import CLUSTER_NAME, Operation, ResourceType
from odradek.broker.security.authorizer import AclAuthorizer
from odradek.protocol.build import build_response
from odradek.protocol.error_responses import error_response

__all__ = ["Check", "Decision", "Enforcer", "Split"]

log = logging.getLogger(__name__)

Handler = Callable[[RequestContext, Any], Awaitable[Any]]


@dataclass(slots=True)
class Split:
    request_field: str
    response_field: str
    codes: Sequence[int | None]  # per element of the request array: None = allowed
    rest: int | None = None  # when set and something is refused, the rest gets this code


@dataclass(slots=True)
class Decision:
    refuse: int | None = None
    # The refusal goes on every partition only, the request's own error stays NONE (Kafka
    # answers a follower's Fetch without ClusterAction so).
    refuse_partitions_only: bool = False
    answer: dict[str, Any] | None = None  # a refusal whose shape the rule builds itself
    split: Split | None = None
    keep: tuple[str, Callable[[Any], bool]] | None = None
    # Applied to the handler's response entity last (nested filtering, OffsetFetch v8).
    transform: Callable[[Any], Any] | None = None


@dataclass(slots=True)
class Check:
    """One request's principal and host before the authorizer."""

    authorizer: AclAuthorizer
    principal: str
    host: str

    def allows(self, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        return self.authorizer.authorize(self.principal, self.host, operation, resource_type, name)

    def cluster(self, operation: Operation) -> bool:
        return self.allows(operation, ResourceType.CLUSTER, CLUSTER_NAME)

    def topic(self, operation: Operation, name: str) -> bool:
        return self.allows(operation, ResourceType.TOPIC, name)

    def group(self, operation: Operation, name: str) -> bool:
        return self.allows(operation, ResourceType.GROUP, name)

    def transactional_id(self, operation: Operation, name: str) -> bool:
        return self.allows(operation, ResourceType.TRANSACTIONAL_ID, name)

    def any_of_type(self, operation: Operation, resource_type: ResourceType) -> bool:
        return self.authorizer.authorize_any(self.principal, self.host, operation, resource_type)


Rule = Callable[[Check, Any, int], Decision | None]


class Enforcer:
    """Wraps the broker's dispatch: rules by API key; APIs without one pass unchecked
    (ApiVersions, SASL, DescribeCluster)."""

    def __init__(self, authorizer: AclAuthorizer, rules: dict[int, Rule]) -> None:
        self.authorizer = authorizer
        self.rules = rules

    def check_for(self, ctx: RequestContext) -> Check:
        return Check(self.authorizer, ctx.principal, ctx.client_host)

    async def handle(self, ctx: RequestContext, request: Any, handler: Handler) -> Any:
        check = self.check_for(ctx)
        ctx.authz = check
        api_key, version = ctx.header.api_key, ctx.header.api_version
        rule = self.rules.get(api_key)
        decision = rule(check, request, version) if rule is not None else None
        if decision is None:
            return await handler(ctx, request)
        if decision.answer is not None:
            return build_response(api_key, version, decision.answer)
        if decision.refuse is not None:
            log.info(
                "Principal = %s is Denied operation on api %d from host %s",
                ctx.principal,
                api_key,
                ctx.client_host,
            )
            refused = error_response(api_key, version, request, decision.refuse)
            if decision.refuse_partitions_only and hasattr(refused, "error_code"):
                refused = dataclasses.replace(refused, error_code=ErrorCode.none)
            return refused
        result: Any
        if decision.split is not None:
            result = await self._split(ctx, request, handler, decision.split)
        else:
            result = await handler(ctx, request)
        if decision.keep is not None:
            result = _transform(api_key, version, result, _keeper(*decision.keep))
        if decision.transform is not None:
            result = _transform(api_key, version, result, decision.transform)
        return result

    async def _split(
        self, ctx: RequestContext, request: Any, handler: Handler, split: Split
    ) -> Any:
        api_key, version = ctx.header.api_key, ctx.header.api_version
        elements = tuple(getattr(request, split.request_field) or ())
        refused: dict[int, list[Any]] = {}
        allowed: list[Any] = []
        for element, code in zip(elements, split.codes, strict=True):
            if code is None:
                allowed.append(element)
            else:
                refused.setdefault(code, []).append(element)
        if not refused:
            return await handler(ctx, request)
        if split.rest is not None and allowed:
            refused.setdefault(split.rest, []).extend(allowed)
            allowed = []
        extra: list[Any] = []
        for code, items in refused.items():
            part = dataclasses.replace(request, **{split.request_field: tuple(items)})
            answer = error_response(api_key, version, part, code)
            extra.extend(getattr(answer, split.response_field))
        trimmed = dataclasses.replace(request, **{split.request_field: tuple(allowed)})
        if split.rest is not None:
            # Nothing is attempted: the answer is made of the refusals alone.
            result: Any = error_response(api_key, version, trimmed, 0)
        else:
            # The handler still answers (with the allowed elements, perhaps none): the other
            # fields of its response (Metadata's brokers, the cluster id) must be right.
            result = await handler(ctx, trimmed)
        field_name = split.response_field
        return _transform(
            api_key, version, result, lambda entity: _append(entity, field_name, extra)
        )


def _append(entity: Any, field_name: str, extra: list[Any]) -> Any:
    return dataclasses.replace(entity, **{field_name: (*getattr(entity, field_name), *extra)})


def _keeper(field_name: str, keep: Callable[[Any], bool]) -> Callable[[Any], Any]:
    def apply(entity: Any) -> Any:
        return dataclasses.replace(
            entity, **{field_name: tuple(e for e in getattr(entity, field_name) if keep(e))}
        )

    return apply


def _transform(api_key: int, version: int, result: Any, change: Callable[[Any], Any]) -> Any:
    """Apply ``change`` to a handler's response entity, whatever form it came in."""
    if result is None:
        return None  # acks=0: no response at all
    if isinstance(result, DeferredResponse):
        pending = result.result

        async def later() -> Any:
            return _transform(api_key, version, await pending, change)

        return DeferredResponse(later())
    if isinstance(result, ResponseValues):
        result = build_response(api_key, version, result.values)
    if not dataclasses.is_dataclass(result):
        # A pre-encoded answer cannot be amended; no rule splits such an API.
        log.error("cannot apply authorisation to a %s answer of api %d", type(result), api_key)
        return result
    return change(result)
