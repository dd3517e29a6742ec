"""GET /metrics serves the pipeline's series as rendered at the last telemetry tick: scrapes between two ticks render
nothing, whatever their number, and each tick renders once."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client.parser import text_string_to_metric_families

from chaosd.config.settings import load_settings
from chaosd.core.clock import LoopClock, new_event_loop
from chaosd.experiment.runner import Experiment
from chaosd.exporters.metrics import MetricsRegistry, make_registry
from chaosd.telemetry.snapshot import Snapshot

pytestmark = pytest.mark.cpu

TICKS = 10  # ticks observed, each with SCRAPES scrapes half-way to the next
SCRAPES = 20


def _completed(body: bytes) -> float:
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.name == "chaosd_tasks_total" and sample.labels == {"outcome": "completed"}:
                return sample.value
    raise AssertionError("no chaosd_tasks_total{outcome=completed}")


def _scrape_between_ticks(follow: bool) -> list[tuple[int, list[float], float, float | None]]:
    """For each of TICKS ticks: the renders the scrapes half-way after it cost, what they served (completed tasks),
    a fresh render's count at the same instant, and the count as the tick's render saw it (None when not following)."""
    settings = load_settings(None, {"seed": 5, "load": {"rate": 300.0}})
    tick = settings.telemetry.tick
    loop = new_event_loop(virtual=True)
    exp = Experiment(settings, LoopClock(loop), warmup=0.0, virtual=True)
    registry = make_registry(exp)
    rendered: list[float] = []  # the completed count each tick's render saw
    if follow:
        registry.follow(exp.telemetry)

        def after_render(_: Snapshot) -> None:
            # Queued right behind the registry's render (listeners run in order): reads what it read.
            asyncio.get_running_loop().call_soon(lambda: rendered.append(exp.pipeline.ledger.total.completed))

        exp.telemetry.listen(after_render)
    seen: list[tuple[int, list[float], float, float | None]] = []

    async def plan(e: Experiment) -> None:
        t0 = e.pipeline.t0
        for k in range(TICKS):
            await e.clock.sleep_until(t0 + 2.0 + (k + 0.5) * tick)  # half-way between two ticks
            before = registry.renders
            served = [_completed(registry.scrape()) for _ in range(SCRAPES)]
            renders = registry.renders - before
            fresh = _completed(registry.exposition())
            seen.append((renders, served, fresh, rendered[-1] if rendered else None))

    try:
        loop.run_until_complete(exp.run(2.0 + (TICKS + 1) * tick, plan=plan))
    finally:
        loop.close()
    return seen


def test_scrapes_between_ticks_serve_the_last_ticks_render_and_render_nothing() -> None:
    seen = _scrape_between_ticks(follow=True)
    assert len(seen) == TICKS
    for renders, served, fresh, at_tick in seen:
        assert renders == 0  # SCRAPES scrapes, no render
        assert served == [at_tick] * SCRAPES  # the bytes of the last tick, every time
        assert fresh > served[0]  # the pipeline moved on since that tick: the scrapes did not read it now
    # A new tick, new bytes: what each interval served follows the pipeline, one tick behind at most.
    assert len({served[0] for _, served, _, _ in seen}) == TICKS


def test_negative_control_without_a_tick_to_follow_every_scrape_renders() -> None:
    # The mechanism broken (the registry follows no tick, as the route was before): every scrape renders, and what
    # it serves is the pipeline now, not as a tick left it.
    seen = _scrape_between_ticks(follow=False)
    assert len(seen) == TICKS
    for renders, served, fresh, _ in seen:
        assert renders == SCRAPES
        assert served == [fresh] * SCRAPES


def test_each_tick_renders_once_however_many_scrapes() -> None:
    settings = load_settings(None, {"seed": 5, "load": {"rate": 300.0}})
    loop = new_event_loop(virtual=True)
    exp = Experiment(settings, LoopClock(loop), warmup=0.0, virtual=True)
    registry = make_registry(exp)
    registry.follow(exp.telemetry)
    ticks: list[float] = []
    exp.telemetry.listen(lambda snap: ticks.append(snap.t))
    scrapes = 0

    async def scraper(e: Experiment) -> None:
        nonlocal scrapes
        while True:  # a scrape every 7 ms of the run: 14 a tick
            await e.clock.sleep(0.007)
            registry.scrape()
            scrapes += 1

    start = registry.renders  # follow() rendered once: a scrape before the first tick has bytes to serve
    try:
        loop.run_until_complete(exp.run(5.0, plan=scraper))
    finally:
        loop.close()
    assert start == 1
    assert scrapes > 10 * len(ticks) > 400
    assert registry.renders - start == len(ticks)


def test_a_render_that_raises_is_counted_and_the_last_ticks_bytes_are_served(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = load_settings(None, {"seed": 5, "load": {"rate": 300.0}})
    loop = new_event_loop(virtual=True)
    exp = Experiment(settings, LoopClock(loop), warmup=0.0, virtual=True)
    registry = make_registry(exp)
    registry.follow(exp.telemetry)
    served: list[bytes] = []

    async def plan(e: Experiment) -> None:
        await e.clock.sleep_until(e.pipeline.t0 + 1.05)
        served.append(registry.scrape())

        def broken(self: MetricsRegistry) -> tuple[bytes, bytes]:
            raise RuntimeError("a collector failed")

        monkeypatch.setattr(MetricsRegistry, "_pipeline", broken)
        await e.clock.sleep_until(e.pipeline.t0 + 1.55)
        served.append(registry.scrape())
        monkeypatch.undo()
        await e.clock.sleep_until(e.pipeline.t0 + 2.05)
        served.append(registry.scrape())

    try:
        loop.run_until_complete(exp.run(3.0, plan=plan))
    finally:
        loop.close()
    before, during, after = (_completed(body) for body in served)
    assert during == before < after  # five failed renders: the last good one served, then a new one
    assert exp.events.observers.errors == {"metrics": 5}
