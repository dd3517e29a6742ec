"""Assembles the aiohttp application: middlewares, typed state, and a cleanup context per long-lived part.

Contexts, in order: storage → event broker → experiment (the pipeline and its report). Cleanup runs
in reverse: the pipeline stops and its report is written, streams end, storage flushes last.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Middleware
from opentelemetry.trace import SpanKind, Status, StatusCode
from pydantic import ValidationError

from chaosd.api.keys import BROKER, CONTROLLER, REGISTRY, REPORT, RUN_ID, STARTED, STOP, STORAGE
from chaosd.api.routes import routes
from chaosd.api.sse import Broker
from chaosd.clock import unix_time
from chaosd.config import Settings
from chaosd.control import Controller
from chaosd.errors import ChaosdError, ConfigError, FaultError
from chaosd.events import Event
from chaosd.exporters.metrics import make_registry
from chaosd.exporters.tracing import Tracing
from chaosd.report import write_report
from chaosd.storage import Storage

__all__ = ["MAX_BODY", "build_app"]

log = logging.getLogger("chaosd")
MAX_BODY = 64 * 1024
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _error(status: int, message: str, field: str | None = None) -> web.Response:
    body = {"error": {"status": status, "field": field, "message": message}}
    return web.json_response(body, status=status)


@web.middleware
async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """One place maps every error to a JSON 4xx (or a logged 500)."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        message = exc.reason if exc.status != 413 else f"body larger than {MAX_BODY} bytes"
        if exc.status == 405:
            message = f"method {request.method} not allowed on {request.path}"
        if exc.status == 404:
            message = f"no route {request.path}"
        return _error(exc.status, message, "body" if exc.status == 413 else None)
    except FaultError as exc:
        return _error(exc.status, exc.message, exc.field)
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
    @web.middleware
    async def auth(request: web.Request, handler: Handler) -> web.StreamResponse:
        routed = request.match_info.http_exception is None  # an unknown route or method says so first
        if token and routed and request.method not in ("GET", "HEAD", "OPTIONS"):
            header = request.headers.get("Authorization", "")
            scheme, _, given = header.partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token.encode()):
                return _error(401, "missing or wrong bearer token", "Authorization")
        return await handler(request)

    return auth


def _storage_ctx(path: str) -> Callable[[web.Application], AsyncIterator[None]]:
    async def ctx(app: web.Application) -> AsyncIterator[None]:
        storage = Storage(path)
        await storage.open()
        for run_id in storage.aborted_at_open:
            log.warning("run %s did not end cleanly: marked aborted, with its active faults", run_id)
        app[STORAGE] = storage
        yield
        await storage.close()

    return ctx


async def _broker_ctx(app: web.Application) -> AsyncIterator[None]:
    yield
    await app[BROKER].close()


def _experiment_ctx(settings: Settings, report_path: Path) -> Callable[[web.Application], AsyncIterator[None]]:
    async def ctx(app: web.Application) -> AsyncIterator[None]:
        ctl = app[CONTROLLER]
        exp = ctl.exp
        storage = app[STORAGE]
        run_id = app[RUN_ID]
        storage.run_started(run_id, app[STARTED], json.loads(settings.model_dump_json()))

        def persist(event: Event) -> None:
            storage.event(run_id, event.id, event.t, event.kind, dict(event.data))
            if event.kind == "fault" and "id" in event.data:
                storage.fault_changed(run_id, exp.injector.get(int(event.data["id"])).as_dict())

        exp.events.subscribe(persist)
        next_score = [5.0]

        def score_events(snap: Any) -> None:
            if snap.t >= next_score[0]:
                next_score[0] += 5.0
                live = exp.live_score()
                exp.events.record(snap.t, "score", total=round(live.total, 3), grade=live.grade)

        exp.telemetry.listen(score_events)
        task = asyncio.create_task(exp.run(None, app[STOP]), name="experiment")

        def crashed(done: asyncio.Task[dict[str, Any]]) -> None:
            if not done.cancelled() and done.exception() is not None:
                ctl.problems.append(f"pipeline crashed: {done.exception()!r}")
                log.error("the pipeline crashed", exc_info=done.exception())

        task.add_done_callback(crashed)
        yield
        await ctl.shutdown()
        app[STOP].set()
        report: dict[str, Any] | None = None
        try:
            report = await asyncio.wait_for(asyncio.shield(task), settings.daemon.shutdown_grace)
        except TimeoutError:
            log.error("the pipeline did not stop within %.1f s; cancelled", settings.daemon.shutdown_grace)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        except Exception:
            log.exception("the pipeline failed while stopping")
        status = "finished" if report is not None else "failed"
        if report is not None:
            write_report(report, report_path)
            app[REPORT] = report
        for record in exp.injector.faults:
            storage.fault_changed(run_id, record.as_dict())
        storage.run_finished(run_id, unix_time(), status, report)

    return ctx


_UNTRACED = ("/metrics", "/healthz", "/readyz", "/api/v1/events")


def _traced(tracing: Tracing) -> Middleware:
    """A server span per API request (not for scrapes, health checks or the event stream)."""

    @web.middleware
    async def traced(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in _UNTRACED:
            return await handler(request)
        resource = request.match_info.route.resource
        route = resource.canonical if resource is not None else request.path
        span = tracing.tracer.start_span(
            f"{request.method} {route}",
            kind=SpanKind.SERVER,
            start_time=tracing.now_ns(),
            attributes={"http.request.method": request.method, "http.route": route},
        )
        try:
            response = await handler(request)
        except Exception:
            span.set_status(Status(StatusCode.ERROR))
            span.end(end_time=tracing.now_ns())
            raise
        span.set_attribute("http.response.status_code", response.status)
        if response.status >= 500:
            span.set_status(Status(StatusCode.ERROR))
        span.end(end_time=tracing.now_ns())
        return response

    return traced


def build_app(
    settings: Settings,
    controller: Controller,
    stop: asyncio.Event,
    run_id: str,
    tracing: Tracing | None = None,
) -> web.Application:
    """The daemon's application; the caller runs it (``web.AppRunner``) and sets ``stop`` to end the run."""
    middlewares: list[Middleware] = [errors, _auth(settings.api.token)]
    if tracing is not None and tracing.enabled:
        middlewares.insert(0, _traced(tracing))
    app = web.Application(client_max_size=MAX_BODY, middlewares=middlewares)
    app[CONTROLLER] = controller
    app[STOP] = stop
    app[RUN_ID] = run_id
    app[STARTED] = unix_time()
    app[BROKER] = Broker(controller.exp.events, settings.api.heartbeat)
    app[REGISTRY] = make_registry(controller.exp, tracing.counts if tracing is not None else None)
    app.router.add_routes(routes)
    app.cleanup_ctx.append(_storage_ctx(settings.storage.path))
    app.cleanup_ctx.append(_broker_ctx)
    app.cleanup_ctx.append(_experiment_ctx(settings, Path(settings.daemon.report)))

    async def end_streams(app: web.Application) -> None:
        await app[BROKER].close()

    app.on_shutdown.append(end_streams)
    return app
