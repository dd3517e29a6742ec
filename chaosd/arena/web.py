"""The arena's routes: the page and its static files (with a strict CSP), and the telemetry series."""

from __future__ import annotations

import json
from collections.abc import Mapping

from aiohttp import web

from chaosd.arena.assets import CONTENT_TYPES
from chaosd.arena.series import Series
from chaosd.experiment.report import rounded
from chaosd.faults import Injector
from chaosd.views import TimeseriesBody

__all__ = ["CSP", "arena_routes"]

# No inline script, nothing from another origin: data rendered as text cannot turn into code.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
)
_HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache"}


def _file(name: str, body: bytes) -> web.Response:
    kind = CONTENT_TYPES[name[name.rindex(".") :]]
    return web.Response(body=body, headers={**_HEADERS, "Content-Type": kind})


def arena_routes(
    files: dict[str, bytes], series: Series, injector: Injector, stage_kinds: Mapping[str, str]
) -> web.RouteTableDef:
    """``stage_kinds``: each stage's kind (they never change), so the page offers only the faults that apply."""
    routes = web.RouteTableDef()

    async def page(request: web.Request) -> web.Response:
        return _file("index.html", files["index.html"])

    routes.get("/")(page)
    routes.get("/arena")(page)

    @routes.get("/arena/static/{name}")
    async def static(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        body = files.get(name)
        if body is None:
            raise web.HTTPNotFound()
        return _file(name, body)

    @routes.get("/arena/stages")
    async def stages(request: web.Request) -> web.Response:
        return web.json_response({"stages": stage_kinds}, headers=_HEADERS)

    @routes.get("/api/v1/timeseries")
    async def timeseries(request: web.Request) -> web.Response:
        body: TimeseriesBody = {
            "step_s": series.step_s,
            "window_s": series.window_s,
            "points": series.points(),
            # The injector's running totals: every fault of the run, whatever memory still holds.
            "faults": {
                "injected": injector.injected,
                "recovered": injector.outcomes["recovered"],
                "failed": injector.outcomes["failed"],
                "mean_recovery_s": injector.mean_recovery_s,
            },
        }
        return web.json_response(rounded(body), dumps=lambda o: json.dumps(o, sort_keys=True))

    return routes
