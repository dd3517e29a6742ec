"""The daemon's status line: its λ, done, good and shed are averages since the previous line, so over a run they add
up to the ledger's counts; a one-second window read every 10 s told a rate that the run as a whole never had."""

from __future__ import annotations

import re
from typing import Any

import pytest
from conftest import settings

from chaosd.cli.serve import StatusCounts, status_line
from chaosd.experiment.runner import Experiment, run_offline
from chaosd.telemetry.snapshot import Snapshot

INTERVAL = 10.0
RATE = re.compile(r"(λ|done|good|shed)=\s*([0-9.]+)/s")


def _lines(overlay: dict[str, Any], duration: float) -> tuple[list[dict[str, float]], list[float], StatusCounts]:
    """The status lines of a virtual run, parsed; the window λ each line would have shown before; the last counts."""
    held: dict[str, Any] = {"exp": None, "before": StatusCounts(0.0, 0, 0, 0, 0), "next": INTERVAL}
    lines: list[dict[str, float]] = []
    window: list[float] = []

    async def plan(exp: Experiment) -> None:
        held["exp"] = exp

    def tick(snap: Snapshot) -> None:
        exp = held["exp"]
        if exp is None or snap.t < held["next"]:
            return
        held["next"] += INTERVAL
        now = StatusCounts.read(exp, snap.t)
        line = status_line(snap, "healthy", 1.0, now, held["before"])
        held["before"] = now
        lines.append({name: float(value) for name, value in RATE.findall(line)})
        window.append(snap.arrival_rate)

    run_offline(settings(overlay), duration=duration, warmup=0.0, plan=plan, on_tick=tick)
    return lines, window, held["before"]


@pytest.mark.cpu
def test_the_status_lines_rates_add_up_to_the_ledgers_counts() -> None:
    # A spike between two lines, into a queue that sheds: the second's window has forgotten most of it.
    overlay = {
        "load": {"rate": 200.0, "phases": [{"type": "spike", "at": 12.0, "rate": 2_000.0, "duration": 3.0}]},
        "queue": {"capacity": 500, "when_full": "reject"},
    }
    lines, window, last = _lines(overlay, 41.0)
    assert len(lines) == 4
    offered = sum(line["λ"] for line in lines) * INTERVAL
    assert offered == pytest.approx(last.offered, abs=0.05 * INTERVAL * len(lines))  # each printed to 0.1/s
    assert sum(line["done"] for line in lines) * INTERVAL == pytest.approx(last.done, abs=0.05 * INTERVAL * 4)
    assert sum(line["good"] for line in lines) * INTERVAL == pytest.approx(last.good, abs=0.05 * INTERVAL * 4)
    assert sum(line["shed"] for line in lines) * INTERVAL == pytest.approx(last.shed, abs=0.05 * INTERVAL * 4)
    assert lines[1]["λ"] > 600 and lines[1]["shed"] > 0  # the spike's 6,000 tasks land in the 10–20 s line
    # The control: the telemetry window's λ, as the line showed it before, misses the spike and the run's total.
    assert abs(sum(window) * INTERVAL - last.offered) > 0.5 * 6_000
