"""`chaosd inspect` on a report whose callers retry: attempts per caller, what was wasted, and the storm threshold;
nothing of it where callers wait forever."""

from __future__ import annotations

import json
from pathlib import Path

from chaosd.cli.inspect_command import inspect_lines

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "reports"


def test_a_retry_storm_is_inspected_with_its_callers_and_its_threshold() -> None:
    report = json.loads((GOLDEN / "retry_storm.json").read_text())
    t = report["tasks"]
    lines = inspect_lines(report)
    callers = next(line for line in lines if line.startswith("callers "))
    attempts = t["offered"] + t["retried"]
    assert callers == (
        f"callers    {t['offered']} · attempts {attempts} (×{attempts / t['offered']:.2f} per caller) · "
        f"abandoned {t['abandoned']} · wasted {t['wasted']} · gave up {t['gave_up']}"
    )
    storm = next(line for line in lines if line.startswith("storm "))
    assert storm.startswith("storm      storm threshold 100.0/s, the load above it · 4 attempts per caller")
    detector = next(line for line in lines if line.startswith("detector "))
    assert f"{report['collapse']['time_metastable_s']:.1f} s metastable" in detector


def test_callers_that_wait_forever_add_nothing() -> None:
    report = json.loads((GOLDEN / "baseline.json").read_text())
    lines = inspect_lines(report)
    assert not [line for line in lines if line.startswith(("callers ", "storm "))]
    assert "metastable" not in "\n".join(lines)
