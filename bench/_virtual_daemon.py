"""The daemon's pipeline without its HTTP server, on a virtual loop: Experiment + Controller as ``_serve`` builds them.

Besides the experiment the daemon's own telemetry listeners are attached (the status line, the score event every
5 s, the Arena's series), so what piles up over a long run is what a real daemon holds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from chaosd.arena.series import Series
from chaosd.cli.serve import StatusCounts, status_line
from chaosd.config.settings import Settings
from chaosd.core.clock import LoopClock, VirtualEventLoop
from chaosd.daemon.control import Controller
from chaosd.experiment.runner import Experiment
from chaosd.telemetry.snapshot import Snapshot

__all__ = ["VirtualDaemon"]

T = TypeVar("T")

SCORE_EVERY = 5.0  # simulated seconds between the daemon's "score" events (chaosd/api/app.py)


class VirtualDaemon:
    """One experiment running on a :class:`VirtualEventLoop`; the caller advances simulated time."""

    def __init__(self, settings: Settings, *, daemon_listeners: bool = True) -> None:
        self.settings = settings
        self.loop = VirtualEventLoop()
        self.clock = LoopClock(self.loop)
        self.lines = 0  # status lines the daemon would have printed
        self.exp, self.controller, self._stop = self.call(self._build)
        if daemon_listeners:
            self._listen()
        self._run = self.loop.create_task(self.exp.run(None, self._stop), name="experiment")
        self.advance(0.0)  # the pipeline starts (its t0 is set)

    def _build(self) -> tuple[Experiment, Controller, asyncio.Event]:
        experiment = Experiment(self.settings, self.clock, warmup=0.0, scenario=None, virtual=False)
        return experiment, Controller(experiment), asyncio.Event()

    def _listen(self) -> None:
        exp = self.exp
        interval = self.settings.daemon.status_interval
        next_status = [interval]
        next_score = [SCORE_EVERY]
        counted = [StatusCounts.read(exp, 0.0)]

        def on_snapshot(snap: Snapshot) -> None:  # chaosd/cli/serve.py: the status line (written nowhere here)
            if snap.t >= next_status[0]:
                next_status[0] += interval
                now = StatusCounts.read(exp, snap.t)
                status_line(snap, exp.detector.state.value, exp.throttle.factor, now, counted[0])
                counted[0] = now
                self.lines += 1

        def score_events(snap: Snapshot) -> None:  # chaosd/api/app.py: a score event every 5 s
            if snap.t >= next_score[0]:
                next_score[0] += SCORE_EVERY
                live = exp.live_score()
                total = None if live.total is None else round(live.total, 3)
                exp.events.record(snap.t, "score", total=total, grade=live.grade)

        series = Series(exp.settings.telemetry.tick)  # chaosd/arena/mount.py

        def arena(snap: Snapshot) -> None:
            series.add(snap, exp.throttle.factor, exp.detector.state.value)

        exp.telemetry.listen(on_snapshot)
        exp.telemetry.listen(score_events)
        exp.telemetry.listen(arena)

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn`` run on the loop (what starts a task, such as ``start_survival``, needs a running loop)."""

        async def inside() -> T:
            return fn(*args, **kwargs)

        return self.loop.run_until_complete(inside())

    def now(self) -> float:
        """Simulated seconds since the pipeline started."""
        return self.exp.pipeline.elapsed()

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` of simulated time pass; raise what the pipeline raised, if it crashed."""
        self.loop.run_until_complete(asyncio.sleep(max(0.0, seconds)))
        if self._run.done():
            self._run.result()  # re-raises a crash
            raise RuntimeError("the experiment ended while the daemon was running")

    def advance_to(self, t: float) -> None:
        self.advance(t - self.now())

    def close(self) -> dict[str, Any]:
        """Stop the pipeline as the daemon does (plans stopped, faults reverted); its final report."""
        try:
            self.loop.run_until_complete(self.controller.shutdown())
            self._stop.set()
            return self.loop.run_until_complete(self._run)
        finally:
            self.loop.close()
