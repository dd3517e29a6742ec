"""Mounts the Arena on the daemon's app: the page at ``/`` and ``/arena``, its files, and the telemetry series."""

from __future__ import annotations

from aiohttp import web

from chaosd.arena.assets import static_files
from chaosd.arena.series import Series
from chaosd.arena.web import arena_routes
from chaosd.daemon.control import Controller
from chaosd.telemetry.snapshot import Snapshot

__all__ = ["add_arena"]


def add_arena(app: web.Application, controller: Controller) -> None:
    """Serve the page and ``GET /api/v1/timeseries``, fed by the experiment's telemetry and fault totals."""
    exp = controller.exp
    series = Series(exp.settings.telemetry.tick)

    def on_tick(snap: Snapshot) -> None:
        series.add(snap, exp.throttle.factor, exp.detector.state.value)

    exp.telemetry.listen(on_tick)
    kinds = {name: stage.kind for name, stage in exp.pipeline.stages.items()}
    app.router.add_routes(arena_routes(static_files(), series, exp.injector, kinds))
