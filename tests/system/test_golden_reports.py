"""Every shipped scenario's report, for its own seed, is the same bytes as the golden file taken from it.

A refactoring that moves code must not move a number: these files were written before the package layout changed,
and every later change that is meant to keep the engine's behaviour keeps them. After an intended change to what a
run measures, regenerate them with
``CHAOSD_REGENERATE_GOLDEN=1 python -m pytest tests/system/test_golden_reports.py`` and review their diff.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from chaosd.cli.exits import EXIT_EXPECTATION, EXIT_OK

pytestmark = pytest.mark.cpu

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden" / "reports"
SCENARIOS = sorted(p.stem for p in (ROOT / "scenarios").glob("*.yaml"))


def _report(name: str, out: Path, *extra: str) -> bytes:
    cmd = [sys.executable, "-m", "chaosd", "run", name, "--quiet", "--report", str(out), *extra]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    # retry_storm collapses by design: its run fails its verdict (exit 3) and still writes the report
    assert done.returncode in (EXIT_OK, EXIT_EXPECTATION), done.stdout + done.stderr
    return out.read_bytes()


def test_every_shipped_scenario_has_a_golden_report() -> None:
    assert SCENARIOS and sorted(p.stem for p in GOLDEN.glob("*.json")) == SCENARIOS


@pytest.mark.parametrize("name", SCENARIOS)
def test_the_report_is_the_golden_bytes(name: str, tmp_path: Path) -> None:
    got = _report(name, tmp_path / "r.json")
    golden = GOLDEN / f"{name}.json"
    if os.environ.get("CHAOSD_REGENERATE_GOLDEN"):
        golden.write_bytes(got)
    assert got == golden.read_bytes(), f"{name}: the report moved; diff {golden} against a fresh run"


def test_another_seed_moves_the_bytes(tmp_path: Path) -> None:
    # Negative control: the comparison above sees a change in what the run measured.
    assert _report("baseline", tmp_path / "r.json", "--seed", "7") != (GOLDEN / "baseline.json").read_bytes()
