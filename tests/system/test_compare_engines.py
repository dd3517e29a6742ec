"""scripts/compare_engines.py: the same engine on both sides agrees on every metric; a changed setting on one side
does not; its statistics are Student's and Welch's; an old engine named by a git ref is checked out and removed."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.cpu

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "compare_engines.py"
# Short runs of the baseline scenario's M/M/4: the runs' start-up is most of their cost.
SCENARIO = """name: short
seed: 1
duration: 10s
warmup: 1s
config:
  workers: {count: 4}
  stages:
    - {name: work, kind: compute, service: {distribution: exponential, mean: 10ms}}
load: {arrival: poisson, rate: 200, producers: 4, deadline: 1s}
"""
SLOWER = 'CHAOSD_STAGES=[{"name":"work","kind":"compute","service":{"distribution":"exponential","mean":0.015}}]'


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("compare_engines", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["compare_engines"] = module  # dataclasses resolve the module by name
    spec.loader.exec_module(module)
    return module


def _compare(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    scenario = tmp_path / "short.yaml"
    scenario.write_text(SCENARIO, encoding="utf-8")
    command = [sys.executable, str(SCRIPT), "--scenarios", str(scenario), "--seeds", "3", *args]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)


def _summary(out: str) -> tuple[int, int]:
    found = re.search(r"^(\d+) of (\d+) metrics agree", out, re.M)
    assert found is not None, out
    return int(found.group(1)), int(found.group(2))


def test_the_same_engine_agrees_and_a_slower_stage_on_one_side_differs(tmp_path: Path) -> None:
    same = _compare(tmp_path, "--old-path", str(ROOT))
    agree, total = _summary(same.stdout)
    assert same.returncode == 0 and agree == total > 50, same.stdout + same.stderr
    # The negative control: 1.5 × the service time on the new side only, against an old engine checked out at HEAD.
    slower = _compare(tmp_path, "--old", "HEAD", "--new-env", SLOWER, "--differ-only")
    agree, total = _summary(slower.stdout)
    assert slower.returncode == 1 and agree < total, slower.stdout + slower.stderr
    for measured in ("stages.work.mean_s", "utilisation"):
        assert re.search(rf"^short {re.escape(measured)} .* DIFFERS$", slower.stdout, re.M), slower.stdout
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert f"old: HEAD ({head[:10]})" in slower.stdout
    worktrees = subprocess.run(["git", "worktree", "list"], cwd=ROOT, capture_output=True, text=True, check=True)
    assert "chaosd-old-" not in worktrees.stdout  # the old engine's checkout is gone


def test_student_and_welch_as_published() -> None:
    c = _script()
    # Student's t 0.975 quantiles (the standard table) and the two-sided tail they leave.
    assert [round(c.t_quantile(df), 3) for df in (1, 4, 19, 38)] == [12.706, 2.776, 2.093, 2.024]
    assert c.t_two_sided(2.093, 19) == pytest.approx(0.05, abs=1e-4)
    # Welch's test on two samples of unequal spread: t = 3.4125, ν = 7.711, p = 0.009711 (as SciPy's ttest_ind says).
    metric = c.judge("s", "m", [1.0, 2.0, 3.0, 4.0, 5.0], [4.0, 6.0, 8.0, 7.0, 9.0])
    assert metric.p == pytest.approx(0.009711, abs=1e-6) and metric.outside
    # Constants agree when equal and differ otherwise; one value on a side is no sample.
    assert not c.judge("s", "m", [2.0, 2.0], [2.0, 2.0]).differs
    assert c.judge("s", "m", [2.0, 2.0], [3.0, 3.0]).differs
    assert c.judge("s", "m", [2.0], [2.0, 3.0]) is None


def test_holm_keeps_a_real_difference_and_drops_chance_ones() -> None:
    c = _script()
    metrics = [c.judge("s", f"m{i}", [0.0, 1.0, 2.0], [0.0, 1.0, 2.0]) for i in range(200)]
    for i, metric in enumerate(metrics):
        metric.p = (i + 0.5) / 200  # uniform: what 200 metrics of agreeing engines give
    metrics[0].p = 1e-6  # and one real difference
    c.holm(metrics)
    assert [m.path for m in metrics if m.differs] == ["m0"]
    assert sum(m.p < 0.05 for m in metrics) == 10  # an uncorrected 5 % test would have called ten different
