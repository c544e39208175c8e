"""The console's Starlette application: one route per page, Jinja2 templates, JSON for charts.

Pages read the cluster through :class:`~odradek.console.gateway.Gateway`. Failures become an
error page with a fitting status, never a traceback: a :class:`ConsoleError` carries its own
(400 bad input, 404 unknown topic or group, 409 conflict), the cluster's refusals
(:class:`KafkaError`) map by error code, an unreachable cluster (:class:`ClientError`) is 503.

Writes (create or delete a topic, reset an empty group's offsets) are POST forms that exist only
when the console runs with ``allow_writes``; otherwise they answer 403. Each POST must come from
a page of this console (its ``Origin``, or failing that its ``Referer``, names this host), which
is enough to stop another site's page from posting through an operator's browser.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from odradek.client.errors import ClientError, ErrorCode, KafkaError
from odradek.client.group_admin import ResetSpec
from odradek.client.security import ClientSecurity
from odradek.console.decode import FORMATS, Formats
from odradek.console.gateway import (
    MAX_BROWSE,
    ConsoleError,
    Gateway,
    parse_datetime,
    parse_int,
)
from odradek.console.sampler import Sampler

log = logging.getLogger(__name__)

HERE = Path(__file__).parent
BROWSE_MODES = ("oldest", "newest", "offset", "timestamp")
NOT_FOUND_CODES = {
    ErrorCode.unknown_topic_or_partition,
    ErrorCode.group_id_not_found,
    ErrorCode.unknown_topic_id,
}
CONFLICT_CODES = {ErrorCode.topic_already_exists, ErrorCode.non_empty_group}
# The authorizer refused the console's user (--command-config): shown as Kafka's error.
FORBIDDEN_CODES = {
    ErrorCode.topic_authorization_failed,
    ErrorCode.group_authorization_failed,
    ErrorCode.cluster_authorization_failed,
    ErrorCode.transactional_id_authorization_failed,
    ErrorCode.delegation_token_authorization_failed,
}

Handler = Callable[[Request], Awaitable[Response]]


def _human_bytes(value: int | None) -> str:
    if value is None:
        return "-"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def _kafka_status(exc: KafkaError) -> int:
    if exc.code in FORBIDDEN_CODES:
        return 403
    if exc.code == ErrorCode.sasl_authentication_failed:
        return 401
    if exc.code in NOT_FOUND_CODES:
        return 404
    if exc.code in CONFLICT_CODES:
        return 409
    if exc.name.startswith("INVALID_") or exc.code == ErrorCode.policy_violation:
        return 400
    return 503 if exc.retriable else 502


class Console:
    """The application's state: gateway, sampler, templates and the write switch."""

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        allow_writes: bool = False,
        sample_interval_s: float = 5,
        security: ClientSecurity | None = None,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.allow_writes = allow_writes
        self.gateway = Gateway(bootstrap_servers, security)
        self.sampler = Sampler(self.gateway, interval_s=sample_interval_s)
        self.templates = Jinja2Templates(directory=str(HERE / "templates"))
        self.templates.env.filters["bytes"] = _human_bytes
        # Group ids may hold any character, "/" included: quote everything in links.
        self.templates.env.filters["q"] = lambda value: quote(str(value), safe="")
        self.templates.env.globals["console"] = self
        self._plotly_js: str | None = None

    # -- rendering -----------------------------------------------------------------------------

    def render(
        self, request: Request, template: str, status_code: int = 200, **context: Any
    ) -> Response:
        context.setdefault("message", _done_message(request))
        return self.templates.TemplateResponse(request, template, context, status_code=status_code)

    def error(self, request: Request, status: int, message: str) -> Response:
        return self.render(request, "error.html", status, error=message, status=status)

    def page(self, handler: Handler) -> Handler:
        """Wrap a page so every expected failure is an error page with its status."""

        @functools.wraps(handler)
        async def wrapped(request: Request) -> Response:
            try:
                return await handler(request)
            except ConsoleError as exc:
                return self.error(request, exc.status, exc.message)
            except KafkaError as exc:
                return self.error(request, _kafka_status(exc), f"the cluster refused: {exc}")
            except (ClientError, OSError) as exc:
                detail = str(exc) or type(exc).__name__
                return self.error(
                    request, 503, f"cannot reach the cluster at {self.bootstrap_servers}: {detail}"
                )
            except Exception as exc:
                # A bug of the console's own: log it in full, show one line.
                log.exception("console page %s failed", request.url.path)
                return self.error(request, 500, f"internal error: {type(exc).__name__}: {exc}")

        return wrapped

    def write(self, handler: Handler) -> Handler:
        """A state-changing POST: refused unless writes are allowed and it comes from here."""

        @functools.wraps(handler)
        async def wrapped(request: Request) -> Response:
            if not self.allow_writes:
                raise ConsoleError(
                    403, "this console is read-only: start it with --allow-writes to change things"
                )
            if not _same_origin(request):
                raise ConsoleError(403, "refused: the form was not posted from this console")
            return await handler(request)

        return self.page(wrapped)

    # -- pages ---------------------------------------------------------------------------------

    async def brokers(self, request: Request) -> Response:
        overview = await self.gateway.overview()
        return self.render(request, "brokers.html", overview=overview)

    async def topics(self, request: Request) -> Response:
        topics = await self.gateway.topics()
        show_internal = request.query_params.get("internal") == "1"
        shown = [t for t in topics if show_internal or not t.internal]
        rates = {t.name: self.sampler.current_rate(t.name) for t in shown}
        return self.render(
            request, "topics.html", topics=shown, rates=rates, show_internal=show_internal
        )

    async def topic(self, request: Request) -> Response:
        detail = await self.gateway.topic(request.path_params["name"])
        rate = self.sampler.current_rate(detail.name)
        return self.render(request, "topic.html", topic=detail, rate=rate)

    async def messages(self, request: Request) -> Response:
        name = request.path_params["name"]
        params = request.query_params
        mode = params.get("mode", "oldest")
        form = {
            "partition": params.get("partition", "0"),
            "mode": mode,
            "offset": params.get("offset", ""),
            "timestamp": params.get("timestamp", ""),
            "count": params.get("count", "20"),
            "key_format": params.get("key_format", "text"),
            "value_format": params.get("value_format", "text"),
            "header_format": params.get("header_format", "text"),
        }
        try:
            formats = Formats(form["key_format"], form["value_format"], form["header_format"])
        except ValueError as exc:
            raise ConsoleError(400, str(exc)) from None
        if mode not in BROWSE_MODES:
            raise ConsoleError(400, f"mode must be one of {', '.join(BROWSE_MODES)}, not {mode!r}")
        partition = parse_int(form["partition"], "partition") or 0
        count = parse_int(form["count"], "the number of messages", minimum=1) or 20
        offset = timestamp = None
        if mode == "offset":
            offset = parse_int(form["offset"], "offset")
            if offset is None:
                raise ConsoleError(400, "give an offset to start from")
        elif mode == "timestamp":
            if not form["timestamp"].strip():
                raise ConsoleError(400, "give a timestamp to start from")
            timestamp = parse_datetime(form["timestamp"])
        result = await self.gateway.browse(
            name,
            partition,
            offset=offset,
            timestamp_ms=timestamp,
            newest=mode == "newest",
            count=count,
            formats=formats,
        )
        partitions = len(self.gateway.client.cluster.partitions_for(name))
        return self.render(
            request,
            "messages.html",
            topic=name,
            partitions=partitions,
            result=result,
            form=form,
            formats=FORMATS,
            modes=BROWSE_MODES,
            max_count=MAX_BROWSE,
        )

    async def groups(self, request: Request) -> Response:
        groups = await self.gateway.group_list()
        return self.render(request, "groups.html", groups=groups)

    async def group(self, request: Request) -> Response:
        detail = await self.gateway.group(request.path_params["group"])
        return self.render(request, "group.html", group=detail)

    async def throughput(self, request: Request) -> Response:
        return self.render(request, "throughput.html")

    # -- chart data ----------------------------------------------------------------------------

    async def throughput_json(self, request: Request) -> Response:
        return JSONResponse({"series": self.sampler.throughput(), "error": self.sampler.last_error})

    async def lag_json(self, request: Request) -> Response:
        group = request.path_params["group"]
        return JSONResponse({"series": self.sampler.lag(group), "error": self.sampler.last_error})

    async def plotly_js(self, request: Request) -> Response:
        if self._plotly_js is None:
            from plotly.offline import get_plotlyjs

            self._plotly_js = get_plotlyjs()
        return Response(
            self._plotly_js,
            media_type="text/javascript",
            headers={"Cache-Control": "max-age=86400"},
        )

    # -- writes --------------------------------------------------------------------------------

    async def create_topic(self, request: Request) -> Response:
        form = await request.form()
        name = str(form.get("name", "")).strip()
        if not name:
            raise ConsoleError(400, "give the new topic a name")
        partitions = parse_int(str(form.get("partitions", "")), "partitions", minimum=1) or -1
        replication = parse_int(
            str(form.get("replication_factor", "")), "replication factor", minimum=1
        )
        await self.gateway.create_topic(name, partitions, replication or -1)
        return _redirect(f"/topics/{quote(name, safe='')}", "created", name)

    async def delete_topic(self, request: Request) -> Response:
        name = request.path_params["name"]
        await self.gateway.delete_topic(name)
        return _redirect("/topics", "deleted", name)

    async def reset_group(self, request: Request) -> Response:
        group = request.path_params["group"]
        form = await request.form()
        strategy = str(form.get("strategy", ""))
        if strategy == "offset":
            value = parse_int(str(form.get("offset", "")), "offset")
            if value is None:
                raise ConsoleError(400, "give the offset to reset to")
            spec = ResetSpec("offset", value)
        elif strategy in ("earliest", "latest"):
            spec = ResetSpec(strategy)
        else:
            raise ConsoleError(400, "reset to earliest, latest or an offset")
        await self.gateway.reset_group(group, spec)
        return _redirect(f"/groups/{quote(group, safe='')}", "reset", group)

    # -- assembly ------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        self.sampler.start()
        try:
            yield
        finally:
            await self.sampler.stop()
            await self.gateway.close()

    async def not_found(self, request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        message = "no such page" if status == 404 else str(getattr(exc, "detail", exc))
        return self.error(request, status, message)

    def app(self) -> Starlette:
        page = self.page
        routes = [
            Route("/", page(self.brokers)),
            Route("/topics", page(self.topics)),
            Route("/topics", self.write(self.create_topic), methods=["POST"]),
            Route("/topics/{name}", page(self.topic)),
            Route("/topics/{name}/messages", page(self.messages)),
            Route("/topics/{name}/delete", self.write(self.delete_topic), methods=["POST"]),
            Route("/groups", page(self.groups)),
            Route("/groups/{group:path}/reset", self.write(self.reset_group), methods=["POST"]),
            Route("/groups/{group:path}", page(self.group)),
            Route("/throughput", page(self.throughput)),
            Route("/api/throughput", self.throughput_json),
            Route("/api/groups/{group:path}/lag", self.lag_json),
            Route("/static/plotly.min.js", self.plotly_js),
            Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
        ]
        return Starlette(
            routes=routes,
            lifespan=self.lifespan,
            exception_handlers={HTTPException: self.not_found},
        )


def _same_origin(request: Request) -> bool:
    host = request.headers.get("host")
    source = request.headers.get("origin") or request.headers.get("referer")
    if not host or not source or source == "null":
        return False
    return urlsplit(source).netloc == host


# What a write's redirect may announce: a fixed sentence per action, so a crafted link can
# only name a topic or group, not put arbitrary text on the console's pages.
DONE_MESSAGES = {
    "created": "created topic {}",
    "deleted": "deleted topic {}",
    "reset": "reset the committed offsets of group {}",
}


def _redirect(path: str, done: str, subject: str) -> Response:
    return RedirectResponse(f"{path}?done={done}&subject={quote(subject)}", status_code=303)


def _done_message(request: Request) -> str | None:
    template = DONE_MESSAGES.get(request.query_params.get("done", ""))
    return template.format(request.query_params.get("subject", "")) if template else None


def create_app(
    bootstrap_servers: str,
    *,
    allow_writes: bool = False,
    sample_interval_s: float = 5,
    security: ClientSecurity | None = None,
) -> Starlette:
    return Console(
        bootstrap_servers,
        allow_writes=allow_writes,
        sample_interval_s=sample_interval_s,
        security=security,
    ).app()
