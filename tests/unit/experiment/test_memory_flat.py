"""An experiment's memory is flat in simulated time: once its bounded histories are full, two more minutes of
tasks (18,000 at the default config's load) leave the Python heap where it was. Anything kept per task, even a
pointer (8 bytes each), would add about 150 kB; the stage histograms' samples, left undrained, add well over that."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc

import pytest

from chaosd.config.settings import load_settings
from chaosd.core.clock import LoopClock, new_event_loop
from chaosd.experiment.runner import Experiment
from chaosd.telemetry.engine import Telemetry

pytestmark = pytest.mark.cpu

RATE = 200.0  # the default config's load
FULL = 60.0  # simulated s: every window and ring is full by then, and the (shortened) timeline
LATER = 150.0
# Traced from this on, a while before FULL: by FULL the rings have turned over, so what they drop after FULL was
# traced and counts off (and the warm-up runs at full speed, untraced).
TRACED_FROM = FULL - 15.0
HELD_PER_TASK = 8  # bytes: one pointer per task would cost this


def _growth() -> tuple[int, int]:
    """Bytes the Python heap grew by from FULL to LATER simulated seconds, and the tasks that ended meanwhile."""
    settings = load_settings(None, {"seed": 3, "load": {"rate": RATE}, "history": {"timeline": 10}})
    loop = new_event_loop(virtual=True)
    exp = Experiment(settings, LoopClock(loop), warmup=0.0, virtual=True)
    stop = asyncio.Event()
    run = loop.create_task(exp.run(None, stop))

    def heap_at(t: float) -> tuple[int, int]:
        loop.run_until_complete(asyncio.sleep(max(0.0, exp.pipeline.t0 + t - loop.time())))
        gc.collect()
        return tracemalloc.get_traced_memory()[0], exp.pipeline.ledger.total.completed

    try:
        heap_at(TRACED_FROM)
        tracemalloc.start()
        before, done_before = heap_at(FULL)
        after, done_after = heap_at(LATER)
    finally:
        tracemalloc.stop()
        stop.set()
        loop.run_until_complete(run)
        loop.close()
    return after - before, done_after - done_before


def test_two_more_minutes_of_tasks_leave_the_heap_where_it_was() -> None:
    grew, tasks = _growth()
    assert tasks > 0.9 * RATE * (LATER - FULL), tasks
    assert grew < 0.75 * HELD_PER_TASK * tasks, (grew, tasks)  # measured: about 14 kB


def test_stage_samples_left_undrained_show_as_growth(monkeypatch: pytest.MonkeyPatch) -> None:
    # Negative control: the tick no longer drains the stage histograms, whose samples then pile up per attempt.
    monkeypatch.setattr(Telemetry, "_drain_stages", lambda self: None)
    grew, tasks = _growth()
    assert grew > 3 * HELD_PER_TASK * tasks, (grew, tasks)  # measured: about 0.7 MB, 41 bytes a task
