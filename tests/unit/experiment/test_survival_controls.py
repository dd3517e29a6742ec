"""Negative controls for survival's score: break a mechanism and the number must move, with the
diagnostics saying why. Supervisor off: killed agents stay dead and the grade falls at least two bands
below survival's A; idempotent sink off: redelivered tasks take effect twice, the audit counts them and
consistency falls, naming the duplicates."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_survival_acceptance import survive

pytestmark = pytest.mark.cpu  # virtual time: CPU only, at a lower priority as root (conftest.py)

GRADES = ("A+", "A", "B", "C", "D", "F")


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    return monkeypatch


def test_with_the_supervisor_off_the_grade_falls_two_bands_and_names_the_dead_agents(
    tmp_path: Path, env: pytest.MonkeyPatch
) -> None:
    env.setenv("CHAOSD_SUPERVISOR__ENABLED", "false")
    r: dict[str, Any] = survive(tmp_path, 10)
    # Survival on the default config grades A or better (test_survival_acceptance): two bands down is C.
    assert GRADES.index(r["score"]["grade"]) >= GRADES.index("C"), r["score"]
    assert r["runtime"]["restarts"] == 0
    dead = next(d for d in r["diagnostics"] if d["cause"] == "agents_dead")
    assert dead["count"] == len(dead["agents"]) >= 1
    killed = {t for f in r["faults"] if f["action"].startswith("kill_") for t in f["targets"]}
    assert set(dead["agents"]) <= killed  # only agents a fault killed, named by id
    assert any(d["cause"] == "faults_failed" for d in r["diagnostics"])


def test_with_the_idempotent_sink_off_consistency_falls_and_names_the_duplicates(
    tmp_path: Path, env: pytest.MonkeyPatch
) -> None:
    env.setenv("CHAOSD_SINK__IDEMPOTENT", "false")
    r: dict[str, Any] = survive(tmp_path, 10)
    t = r["tasks"]
    assert t["duplicated"] > 0 and t["lost"] == 0
    assert r["runtime"]["deduplicated"] == 0  # nothing suppressed them
    # Consistency is the worse of the share of tasks accounted exactly once and the share of incidents
    # that kept every effect exactly once: a few duplicates among 100,000 tasks still cost points.
    accepted = t["accepted"] - t["in_flight"]
    judged = [i for i in r["incidents"] if i["outcome"] in ("recovered", "failed")]
    dirty = [i for i in judged if not i["consistent"]]
    assert dirty and all(i["impact_tasks"]["duplicated"] > 0 for i in dirty)
    assert sum(i["impact_tasks"]["duplicated"] for i in r["incidents"]) <= t["duplicated"] + 5  # the cohorts differ
    by_task = 100.0 * (accepted - t["duplicated"]) / accepted
    by_incident = 100.0 * (len(judged) - len(dirty)) / len(judged)
    assert r["score"]["consistency"] == pytest.approx(min(by_task, by_incident), rel=1e-6)
    assert r["score"]["consistency"] < 95.0
    dup = next(d for d in r["diagnostics"] if d["cause"] == "duplicated")
    assert dup["count"] == t["duplicated"] and 1 <= len(dup["examples"]) <= 5
    assert all(isinstance(i, int) and i > 0 for i in dup["examples"])
