"""Every scenario in scenarios/ runs with ``--replications`` and in a sweep: its expectations, whatever form their
values are written in (``max_recovery_s: 20s``), are judged on each run and over all of them."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from chaosd.cli.main import main
from chaosd.experiment.scenario import load_scenario, settings_for

pytestmark = pytest.mark.cpu

ROOT = Path(__file__).resolve().parents[3]
SCENARIOS = sorted(p for p in (ROOT / "scenarios").iterdir() if p.suffix in (".yaml", ".yml", ".json"))
# Seconds a shortened run goes on after the scenario's last fault ends: the shipped scenarios recover within 10 s,
# and a recovery is confirmed 3 s later.
SETTLE = 15.0
NO_FAULTS = 30.0  # a scenario without faults runs this long (its own duration when shorter)
# Judged on every run alone; over replications, these pass only if every run passes.
EVERY_RUN = ("lost_tasks", "duplicated_tasks", "all_recovered", "checks_pass")


def _short(path: Path) -> list[str]:
    """``--duration`` just past the scenario's last fault (its own when shorter), and a tenth of it as warm-up."""
    scenario = load_scenario(path)
    settings = settings_for(scenario, path, None)
    windows = scenario.fault_windows(settings.faults.default_ttl)
    short = max(w.end for w in windows) + SETTLE if windows else NO_FAULTS
    duration = min(settings.run.duration, short)
    return ["--duration", f"{duration:g}", "--warmup", f"{duration / 10:g}"]


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> int:
    code = main(args)
    capsys.readouterr()
    return code


def test_the_glob_finds_the_shipped_scenarios() -> None:
    assert {"cascading_storm", "leader_assassination", "baseline"} <= {p.stem for p in SCENARIOS}


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_each_scenario_replicates_with_every_expectation_judged_per_run_and_pooled(
    path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "replicated.json"
    args = ["run", str(path), *_short(path), "--quiet", "--report", str(out)]
    code = _run([*args, "--replications", "2", "--jobs", "2"], capsys)
    report = json.loads(out.read_text())
    block = report["replications"]
    assert block["n"] == 2 and len(block["seeds"]) == 2
    expect = load_scenario(path).expect
    judged = report.get("expectations", [])
    assert [(e["check"], e["expected"]) for e in judged] == list(expect.items())  # as written: "20s", not 20.0
    assert code == (3 if any(not e["passed"] for e in judged) else 0)
    by_check = {e["check"]: e for e in judged}
    for e in judged:
        assert [run["seed"] for run in e["runs"]] == block["seeds"]
        if e["check"] in EVERY_RUN:
            assert e["passed"] is all(run["passed"] for run in e["runs"])
    if "min_grade" in by_check:
        assert Counter(run["measured"] for run in by_check["min_grade"]["runs"]) == block["grade_counts"]
    if "lost_tasks" in by_check:
        assert sum(run["measured"] for run in by_check["lost_tasks"]["runs"]) / 2 == block["lost"]["mean"]
    if judged:  # each run's verdict is that seed's own: the plain run of the second seed judges alike
        alone = tmp_path / "alone.json"
        _run([*args[:-1], str(alone), "--seed", str(block["seeds"][1])], capsys)
        plain = json.loads(alone.read_text())["expectations"]
        assert [(e["measured"], e["passed"]) for e in plain] == [
            (e["runs"][1]["measured"], e["runs"][1]["passed"]) for e in judged
        ]


def test_every_kind_of_value_is_judged_over_replications(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = tmp_path / "all.yaml"
    scenario.write_text(
        "name: all\nduration: 30s\nwarmup: 3s\n"
        "actions:\n  - delay: 8s\n    action: {type: kill_leader, target_id: leader, metadata: {duration: 4s}}\n"
        "expect: {min_grade: F, min_score: 0, min_availability: 0, max_recovery_s: 1m, lost_tasks: 1000,\n"
        "         duplicated_tasks: 1000, all_recovered: true, checks_pass: true}\n"
    )
    out = tmp_path / "r.json"
    code = _run(["run", str(scenario), "--replications", "3", "--jobs", "2", "--quiet", "--report", str(out)], capsys)
    judged = json.loads(out.read_text())["expectations"]
    assert code == 0 and all(e["passed"] and len(e["runs"]) == 3 for e in judged)
    recovery = next(e for e in judged if e["check"] == "max_recovery_s")
    assert recovery["expected"] == "1m" and 0 < recovery["measured"] < 60  # the CI's upper bound, in seconds
    # Negative control: a bound under any run's hand-over (about 0.8 s) fails, in each run and on the CI.
    strict = scenario.read_text().replace("max_recovery_s: 1m", "max_recovery_s: 100ms")
    scenario.write_text(strict)
    assert (
        _run(["run", str(scenario), "--replications", "3", "--jobs", "2", "--quiet", "--report", str(out)], capsys) == 3
    )
    recovery = next(e for e in json.loads(out.read_text())["expectations"] if e["check"] == "max_recovery_s")
    assert recovery["passed"] is False and not any(run["passed"] for run in recovery["runs"])
    assert "upper bound of the 95 % CI over 3 runs" in recovery["because"]


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_each_scenario_sweeps(path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sweep.json"
    code = _run(
        [
            "sweep",
            str(path),
            "--param",
            "load.rate=100,200",
            *_short(path),
            "--jobs",
            "2",
            "--quiet",
            "--out",
            str(out),
        ],
        capsys,
    )
    view = json.loads(out.read_text())
    assert code == 0 and view["scenario"] == load_scenario(path).name
    assert [p["at"] for p in view["points"]] == [{"load.rate": 100.0}, {"load.rate": 200.0}]
    low, high = (p["offered_per_s"]["mean"] for p in view["points"])
    assert low < high  # the swept rate is what was offered, on top of the scenario's own load
