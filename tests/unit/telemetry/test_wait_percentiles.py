"""A tick's wait percentiles, and its sojourn p50 and p99, are those of its own window whenever they are read: worked
out on the first read, they must not take the pipeline's state at that later moment."""

from __future__ import annotations

import dataclasses

from chaosd.config.settings import load_settings
from chaosd.core.clock import LoopClock, new_event_loop
from chaosd.core.histogram import percentiles
from chaosd.experiment.runner import Experiment
from chaosd.telemetry.snapshot import Snapshot

QS = (0.5, 0.95, 0.99)
# One busy queue (ρ 0.9): tasks wait, and the waits vary from one window to the next.
MM1 = {
    "seed": 5,
    "load": {"rate": 90.0, "producers": 1, "arrival": "poisson"},
    "workers": {"count": 1},
    "detector": {"enabled": False},
    "throttle": {"enabled": False},
    "stages": [{"name": "work", "kind": "compute", "service": {"distribution": "exponential", "mean": 0.010}}],
}


def test_each_snapshot_keeps_the_wait_percentiles_of_its_own_window() -> None:
    settings = load_settings(None, MM1)
    loop = new_event_loop(virtual=True)
    exp = Experiment(settings, LoopClock(loop), warmup=0.0, virtual=True)
    window = exp.telemetry.window_ticks
    wait = exp.pipeline.wait
    counts = [wait.snapshot()]  # the wait histogram at each tick, read beside the telemetry
    sojourns = [exp.pipeline.sojourn.snapshot()]  # and the sojourn histogram
    kept: list[Snapshot] = []

    def tick(snap: Snapshot) -> None:
        counts.append(wait.snapshot())
        sojourns.append(exp.pipeline.sojourn.snapshot())
        kept.append(snap)

    exp.telemetry.listen(tick)
    try:
        loop.run_until_complete(exp.run(20.0))
    finally:
        loop.close()
    assert len(kept) >= 190
    for k, snap in enumerate(kept, start=1):  # read now, long after their ticks
        window_counts = counts[k] - counts[max(0, k - window)]
        expected = percentiles(window_counts, QS) if window_counts.any() else (0.0, 0.0, 0.0)
        assert (snap.wait_p50, snap.wait_p95, snap.wait_p99) == expected, k
        # The sojourn's p95 is worked out at the tick, its p50 and p99 when first read: all of the same window.
        window_sojourns = sojourns[k] - sojourns[max(0, k - window)]
        expected = percentiles(window_sojourns, QS) if window_sojourns.any() else (0.0, 0.0, 0.0)
        assert (snap.sojourn_p50, snap.sojourn_p95, snap.sojourn_p99) == expected, k
    # Control: the windows differ, so a value taken from another window (or from now) would have been caught.
    assert len({snap.wait_p95 for snap in kept}) > 50
    assert len({snap.sojourn_p99 for snap in kept}) > 50
    assert max(snap.wait_p95 for snap in kept) > 0


def test_a_snapshots_view_lists_its_wait_percentiles_in_field_order() -> None:
    settings = load_settings(None, MM1)
    loop = new_event_loop(virtual=True)
    exp = Experiment(settings, LoopClock(loop), warmup=0.0, virtual=True)
    try:
        loop.run_until_complete(exp.run(2.0))
    finally:
        loop.close()
    snap = exp.telemetry.latest
    assert snap is not None
    view = snap.as_dict()
    assert list(view)[:-1] == [f.name for f in dataclasses.fields(Snapshot)]
    assert view["wait_p95"] == snap.wait_p95 > 0
    assert view["sojourn_p99"] == snap.sojourn_p99 > view["sojourn_p50"] > 0
    assert dataclasses.replace(snap, lateness=1.0).wait_p99 == snap.wait_p99
