"""A stage's latency histogram, filled every task and read by nobody until the run ends, holds a few seconds of
unbinned samples at most: telemetry drains it. Held until a reader came, the samples grew for the daemon's life. The
same holds for the wait histogram, whose samples each tick cuts for its window and bins only when asked."""

from __future__ import annotations

import pytest

from chaosd.config.settings import load_settings
from chaosd.core.clock import LoopClock, new_event_loop
from chaosd.core.histogram import LogHistogram
from chaosd.experiment.runner import Experiment
from chaosd.telemetry.engine import DRAIN_EVERY
from chaosd.telemetry.snapshot import Snapshot

pytestmark = pytest.mark.cpu

RATE = 200.0  # the default config's load
TICKS = 300  # 30 s: three drains


def _most_unbinned() -> tuple[int, int]:
    """The most samples any stage histogram, or the wait histogram, held unbinned at a tick, and the ticks seen, over
    TICKS ticks."""
    settings = load_settings(None, {"seed": 3, "load": {"rate": RATE}})
    tick = settings.telemetry.tick
    loop = new_event_loop(virtual=True)
    exp = Experiment(settings, LoopClock(loop), warmup=0.0, virtual=True)
    seen: list[int] = []

    def held(snap: Snapshot) -> None:
        histograms = [s.stats.latency for s in exp.pipeline.stages.values()] + [exp.pipeline.wait]
        seen.append(max(h.unbinned for h in histograms))

    exp.telemetry.listen(held)
    try:
        loop.run_until_complete(exp.run(TICKS * tick))
    finally:
        loop.close()
    return max(seen), len(seen)


def test_a_histogram_nobody_reads_holds_no_more_than_a_drain_s_worth() -> None:
    most, ticks = _most_unbinned()
    assert ticks >= TICKS - 1
    assert 0 < most <= 1.2 * RATE * DRAIN_EVERY, most  # a stage's attempts: the tasks, and a few retries


def test_without_the_drain_the_samples_pile_up(monkeypatch: pytest.MonkeyPatch) -> None:
    # Negative control: the tick's drain does nothing, as before, and the held samples grow with the run.
    monkeypatch.setattr(LogHistogram, "drain", lambda self: None)
    most, _ = _most_unbinned()
    assert most > 2.5 * RATE * DRAIN_EVERY, most
