"""Assembles the aiohttp application: middlewares, typed state, and a cleanup context per long-lived part.

Contexts, in order: storage → event broker → experiment (the pipeline and its report), the first and last
entering the daemon's :class:`~chaosd.daemon.lifecycle.LiveRun`, which does the work. Shutdown, in order: new
faults refused, plans stopped, active faults reverted (the controller, before the runner's cleanup), event
streams closed (``on_shutdown``), then in reverse context order the pipeline stops and its report is written,
and storage flushes last.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware
from pydantic import ValidationError

from chaosd.api.errors import HttpError
from chaosd.api.keys import (
    BROKER,
    CONTROLLER,
    HTTP_STATS,
    LIMITS,
    OPENAPI,
    REGISTRY,
    REPORT,
    RUN_ID,
    STARTED,
    STOP,
    STORAGE,
    TRACING,
)
from chaosd.api.routes import UNDO, declared_body_type
from chaosd.api.schemas import openapi_document
from chaosd.api.server import HostPolicy, HttpStats, Refusal, error_body, own_origin, request_ended, request_started
from chaosd.api.sse import Broker
from chaosd.api.table import ENDPOINTS, check_query, route_defs
from chaosd.api.traced import traced
from chaosd.arena.mount import add_arena
from chaosd.config.settings import ApiConfig, Settings
from chaosd.core.errors import ChaosdError, ConfigError, Conflict, FaultError, NotFound, Unavailable
from chaosd.daemon.lifecycle import LiveRun
from chaosd.exporters.metrics import StorageCollector, make_registry
from chaosd.exporters.tracing import Tracing

__all__ = ["build_app", "errors"]

log = logging.getLogger("chaosd")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _error(status: int, message: str, field: str | None = None) -> web.Response:
    return web.json_response(error_body(status, message, field), status=status)


# Answers the front door counts as refusals (a 429 is counted by the event broker that gives it).
_REFUSED: dict[int, Refusal] = {
    400: "bad_request",
    401: "unauthorized",
    403: "cross_origin",
    408: "request_timeout",
    413: "body_too_large",
    415: "unsupported_media_type",
    421: "wrong_host",
}


@web.middleware
async def front(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Outermost: the request has arrived (its deadline stops); refusals are counted by reason."""
    request_started(request)
    try:
        response = await handler(request)
    finally:
        request_ended(request)
    reason = _REFUSED.get(response.status)
    if reason is not None and HTTP_STATS in request.app:
        request.app[HTTP_STATS].refuse(reason)
    return response


# Safety actions are never refused for storage's sake: a full disk must not keep a fault running. They are
# carried out, and answered 503 (saying so) when what they changed could not be stored.
_SAFETY = frozenset(
    {
        ("DELETE", "/api/v1/faults"),
        ("DELETE", "/api/v1/faults/{id}"),
        ("POST", "/api/v1/lever"),
        ("DELETE", "/api/v1/survival"),
        ("DELETE", "/api/v1/scenarios/current"),
    }
)


_CHANGES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def _unstored(message: str) -> web.Response:
    return _error(503, message, "storage")


@web.middleware
async def durable(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A change is answered 2xx only once it is committed to storage: a fault answered 201 (or a callers' policy
    pushed, its ``clients`` event) survives ``kill -9``.

    Storage known to fail (the last write, or the file gone) refuses a change before it is made (503, nothing
    changed) unless a probe write succeeds now. A change whose writes fail is undone (the handler's
    ``UNDO`` steps: a fault injected is reverted at once) and answered 503: the state is as before.
    """
    if request.method not in _CHANGES or STORAGE not in request.app:
        return await handler(request)
    resource = request.match_info.route.resource
    if resource is None or request.match_info.http_exception is not None:
        return await handler(request)
    storage = request.app[STORAGE]
    safety = (request.method, resource.canonical) in _SAFETY
    if not safety and storage.problem is not None and (why := await storage.probe()) is not None:
        return _unstored(f"storage cannot record changes, nothing was changed: {why}")
    mark = storage.mark()
    undo: list[Callable[[], Awaitable[object]]] = []
    request[UNDO] = undo
    response = await handler(request)
    if response.status >= 300:
        return response
    await storage.flush()
    if storage.alive and not storage.failed_since(mark):
        return response
    why = storage.problem or "a write failed"
    if safety:
        return _unstored(f"done (a safety action is never refused), but not recorded in storage: {why}")
    for step in reversed(undo):
        await step()
    await storage.flush()
    return _unstored(f"not recorded in storage, so undone: {why}")


def _protocol(request: web.Request, exc: web.HTTPException) -> HttpError:
    """aiohttp's own refusals (no route, no such method, a body past client_max_size) in chaosd's words."""
    # The path is quoted as sent (percent-encoded) and cut short: nothing raw is echoed back.
    path = request.rel_url.raw_path[:200]
    if exc.status == 413:
        return HttpError(
            413, "body", f"body larger than {request.app[LIMITS].max_body_bytes} bytes (api.max_body_bytes)"
        )
    if exc.status == 405:
        return HttpError(405, None, f"method {request.method} not allowed on {path}")
    if exc.status == 404:
        return HttpError(404, None, f"no route {path}")
    return HttpError(exc.status, None, exc.reason)


# The one table from domain errors to HTTP statuses: the layers below raise what went wrong, not how HTTP says it.
_STATUS: dict[type[FaultError], int] = {NotFound: 404, Conflict: 409, Unavailable: 503}


def status_of(exc: FaultError) -> int:
    """The HTTP status the API answers ``exc`` with: 422 for input that is wrong as given."""
    return _STATUS.get(type(exc), 422)


@web.middleware
async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """One place maps every error to a JSON 4xx (or a logged 500): protocol errors, then domain errors."""
    try:
        resource = request.match_info.route.resource
        if resource is not None and request.match_info.http_exception is None:
            check_query(resource.canonical, request.query)
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        refused = _protocol(request, exc)
        return _error(refused.status, refused.message, refused.field)
    except HttpError as exc:
        return _error(exc.status, exc.message, exc.field)
    except FaultError as exc:
        return _error(status_of(exc), exc.message, exc.field)
    except ConfigError as exc:
        src, field, msg = exc.problems[0]
        return _error(422, "; ".join(exc.lines()) if len(exc.problems) > 1 else msg, field or src)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "body"
        msg = "unknown field" if err["type"] == "extra_forbidden" else str(err["msg"]).removeprefix("Value error, ")
        return _error(422, msg, field)
    except ChaosdError as exc:
        return _error(422, str(exc))
    except Exception:
        log.exception("unhandled error on %s %s", request.method, request.path)
        return _error(500, "internal error (logged)")


def _auth(token: str | None) -> Middleware:
    # The token is held only in this closure; a rejection never says what was sent.
    @web.middleware
    async def auth(request: web.Request, handler: Handler) -> web.StreamResponse:
        routed = request.match_info.http_exception is None  # an unknown route or method says so first
        if token and routed and request.method not in ("GET", "HEAD", "OPTIONS"):
            header = request.headers.get("Authorization", "")
            scheme, _, given = header.partition(" ")
            # Header bytes that are not UTF-8 reach us as surrogates: compared as the bytes they were, never raised.
            sent = given.strip().encode("utf-8", "surrogateescape")
            if scheme.lower() != "bearer" or not hmac.compare_digest(sent, token.encode()):
                # One short line an operator (or fail2ban) can act on: who and where, never what was sent.
                log.warning(
                    "refused %s %s from %s: missing or wrong bearer token",
                    request.method,
                    request.path[:100],
                    request.remote,
                )
                return _error(401, "missing or wrong bearer token", "Authorization")
        return await handler(request)

    return auth


_WITH_BODY = frozenset({"POST", "PUT", "PATCH"})  # DELETE takes no body: see docs/security.md


def _browser_guard(api: ApiConfig) -> Middleware:
    """What a web page in the user's browser must not do (docs/security.md): reach the daemon under another
    host name (DNS rebinding: 421), send it a change from another origin (403), or send a change as a form or
    text/plain, the types a page may post anywhere without a CORS preflight (415)."""
    hosts = HostPolicy(api)

    @web.middleware
    async def browser_guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        host = request.headers.get("Host")
        if not hosts.allows(host):
            return _error(421, "not a host name this daemon answers to (loopback, api.host, api.allowed_hosts)", "Host")
        if request.method in _CHANGES and request.match_info.http_exception is None:
            site = request.headers.get("Sec-Fetch-Site", "").strip().lower()
            if site in ("cross-site", "same-site"):
                return _error(403, f"a change sent by a page of another site is refused ({site})", "Sec-Fetch-Site")
            origin = request.headers.get("Origin")
            if origin is not None and not own_origin(origin, host):
                return _error(403, "a change sent by a page of another origin is refused", "Origin")
            if request.method in _WITH_BODY and not declared_body_type(request.content_type):
                sent = request.headers.get("Content-Type", "")[:100] or "none"
                message = f"a change is sent as application/json, with or without a body (sent: {sent})"
                return _error(415, message, "Content-Type")
        return await handler(request)

    return browser_guard


def _storage_ctx(live: LiveRun) -> Callable[[web.Application], AsyncIterator[None]]:
    async def ctx(app: web.Application) -> AsyncIterator[None]:
        async with live.stored() as storage:
            app[STORAGE] = storage
            collector = StorageCollector(storage)
            app[REGISTRY].register(collector)
            yield
        app[REGISTRY].unregister(collector)

    return ctx


async def _broker_ctx(app: web.Application) -> AsyncIterator[None]:
    yield
    await app[BROKER].close()


def _experiment_ctx(live: LiveRun) -> Callable[[web.Application], AsyncIterator[None]]:
    async def ctx(app: web.Application) -> AsyncIterator[None]:
        async with live.running():
            yield

    return ctx


def build_app(settings: Settings, live: LiveRun, tracing: Tracing | None = None) -> web.Application:
    """The daemon's application for ``live``; the caller runs it (``web.AppRunner`` and a ``FrontDoor``).

    The pipeline runs from the runner's setup until its cleanup; cleanup stops it (``live.stop``).
    """
    controller = live.controller
    api = settings.api
    middlewares: list[Middleware] = [front, _browser_guard(api), errors, _auth(api.token_value()), durable]
    if tracing is not None and tracing.enabled:
        # Outside every other middleware but the front door: a refusal (403, 415, 401) is traced too, and
        # the span is current while they run, so their log lines carry its ids.
        middlewares.insert(1, traced(tracing))
    app = web.Application(client_max_size=api.max_body_bytes, middlewares=middlewares)
    app[CONTROLLER] = controller
    app[STOP] = live.stop
    app[RUN_ID] = live.run_id
    app[STARTED] = live.started
    app[REPORT] = live.final
    if tracing is not None and tracing.enabled:
        app[TRACING] = tracing
    app[LIMITS] = api
    broker = Broker(controller.exp.events, api.heartbeat, max_subscribers=api.max_sse_subscribers)
    app[BROKER] = broker
    app[HTTP_STATS] = stats = HttpStats(lambda: broker.subscribers, lambda: broker.refused)
    app[REGISTRY] = make_registry(controller.exp, tracing.counts if tracing is not None else None, server=stats)
    app[OPENAPI] = openapi_document(ENDPOINTS)
    app.router.add_routes(route_defs(ENDPOINTS))
    add_arena(app, controller)  # the page at / and /arena, and GET /api/v1/timeseries
    app.cleanup_ctx.append(_storage_ctx(live))
    app.cleanup_ctx.append(_broker_ctx)
    app.cleanup_ctx.append(_experiment_ctx(live))

    async def end_streams(app: web.Application) -> None:
        await app[BROKER].close()

    app.on_shutdown.append(end_streams)
    return app
