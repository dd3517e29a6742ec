"""``chaosd run``'s verdict as users meet it: the exit code, the report's ``verdict`` and the summary's last line.

3 when the run missed its [slo] where one is set, or with no availability objective when the detector said
failing for most of the measured window; 0 when all holds. Real runs in virtual time, through the CLI.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from chaosd.cli.main import EXIT_EXPECTATION, main

pytestmark = pytest.mark.cpu  # virtual time: CPU only

_STAGE = '[[stages]]\nname = "work"\nservice = {{ distribution = "exponential", mean = 0.01 }}\n{extra}'


def _config(tmp_path: Path, extra: str = "", slo: str = "") -> Path:
    """M/M/4 at ρ 0.25 for 30 s (3 s of warm-up); ``extra`` goes in the stage, ``slo`` in [slo]."""
    text = "seed = 5\n[load]\nrate = 100.0\n[workers]\ncount = 4\n[run]\nduration = 30.0\nwarmup = 3.0\n"
    text += _STAGE.format(extra=extra) + "\n"
    if slo:
        text += f"[slo]\n{slo}\n"
    path = tmp_path / "c.toml"
    path.write_text(text)
    return path


def _run(args: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any], str]:
    report = tmp_path / "r.json"
    code = main(["run", *args, "--report", str(report)])
    out = capsys.readouterr().out
    data: dict[str, Any] = json.loads(report.read_text())
    return code, data, out


def _last_summary_line(out: str) -> str:
    """The last line printed: the verdict, after where the report went and where the settings came from."""
    lines = out.rstrip("\n").split("\n")
    assert lines[-2].startswith("  report     "), lines[-2]
    assert lines[-3].startswith("  config     "), lines[-3]
    return lines[-1]


def test_every_task_failing_exits_3_and_says_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, report, out = _run(["--config", str(_config(tmp_path, "failure_probability = 1.0"))], tmp_path, capsys)
    assert code == EXIT_EXPECTATION == 3
    verdict = report["verdict"]
    assert verdict["passed"] is False
    assert verdict["reason"].startswith(
        "no availability objective in [slo], and the pipeline was failing or collapsed 27.0 s of "
    )
    assert "(100.0%)" in verdict["reason"]
    assert _last_summary_line(out) == f"  verdict    FAIL: {verdict['reason']}"
    assert report["collapse"]["time_failing_s"] == 27.0 and report["tasks"]["completed"] == 0
    # The summary says where the failures came from.
    assert "stage work: error on" in out and "fix what the stage calls" in out


def test_a_healthy_run_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Negative control: the same pipeline, nothing failing."""
    code, report, out = _run(["--config", str(_config(tmp_path))], tmp_path, capsys)
    assert code == 0
    assert report["verdict"] == {
        "passed": True,
        "reason": "failing or collapsed 0 s of the measured 27.0 s (0.0%), at most half allowed with no availability"
        " objective",
    }
    assert _last_summary_line(out) == f"  verdict    pass: {report['verdict']['reason']}"


@pytest.mark.parametrize(
    ("objective", "code", "reason"),
    [
        (0.9, 3, r"availability [45]\d\.\d% \(\d+ good of \d+ offered\) < the SLO's 90\.0% over the measured 27\.0 s"),
        (0.4, 0, r"availability [45]\d\.\d% \(\d+ good of \d+ offered\) ≥ 40\.0%"),
    ],
)
def test_an_availability_objective_is_what_judges_half_the_tasks_failing(
    objective: float, code: int, reason: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Failing the whole run, but the SLO is set: it decides, both ways."""
    config = _config(tmp_path, "failure_probability = 0.5", f"availability = {objective}")
    got, report, _ = _run(["--config", str(config)], tmp_path, capsys)
    assert report["collapse"]["time_failing_s"] > 20  # the detector named it either way
    assert (got, report["verdict"]["passed"]) == (code, code == 0)
    assert re.fullmatch(reason, report["verdict"]["reason"]), report["verdict"]["reason"]


def test_a_p95_objective_alone_still_fails_a_run_whose_tasks_all_fail(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No completion has a sojourn, so p95 holds vacuously; with no availability objective, failing judges."""
    config = _config(tmp_path, "failure_probability = 1.0", "p95 = 0.5")
    code, report, _ = _run(["--config", str(config)], tmp_path, capsys)
    assert code == 3
    assert report["verdict"]["reason"].startswith("no availability objective in [slo], and the pipeline was failing")
    # Negative control for the p95 objective: a healthy run that misses it.
    code, report, _ = _run(["--config", str(_config(tmp_path, slo="p95 = 0.001"))], tmp_path, capsys)
    assert code == 3 and re.match(r"p95 sojourn [\d.]+ ms > the SLO's 1\.0 ms", report["verdict"]["reason"])


def _scenario(tmp_path: Path, failing_for: str) -> Path:
    """60 s with an llm stage (no fallback) whose model errors from 10 s on, for ``failing_for``."""
    path = tmp_path / "s.yaml"
    path.write_text(
        "name: broken_model\nseed: 3\nduration: 60s\nwarmup: 5s\n"
        "config:\n  workers: {count: 4}\n"
        "  stages:\n    - {name: model, kind: llm, service: {distribution: exponential, mean: 10ms}}\n"
        "load: {rate: 100}\n"
        "actions:\n  - delay: 10s\n"
        f"    action: {{type: llm_failure, target_id: model, metadata: {{duration: {failing_for}}}}}\n"
    )
    return path


@pytest.mark.parametrize(("failing_for", "code"), [("20s", 0), ("40s", 3)])
def test_failing_for_most_of_the_window_is_what_fails_a_run_with_no_objective(
    failing_for: str, code: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    got, report, _ = _run([str(_scenario(tmp_path, failing_for)), "--quiet"], tmp_path, capsys)
    failing = report["collapse"]["time_failing_s"]
    window = report["duration_s"] - report["warmup_s"]
    assert (failing > window / 2) is (code == 3), (failing, window)
    assert got == code and report["verdict"]["passed"] is (code == 0)
    assert f"failing or collapsed {failing:.1f} s of the measured 55.0 s" in report["verdict"]["reason"]


def test_replications_fail_when_any_run_does(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = _config(tmp_path, "failure_probability = 1.0")
    code, report, out = _run(["--config", str(config), "--replications", "2", "--jobs", "1"], tmp_path, capsys)
    assert code == 3
    failed = report["replications"]["failed_runs"]
    assert [f["seed"] for f in failed] == report["replications"]["seeds"]
    assert report["verdict"]["reason"].startswith(f"2 of 2 runs failed; seed {failed[0]['seed']}: no availability")
    assert _last_summary_line(out) == f"  verdict    FAIL: {report['verdict']['reason']}"
    healthy = _config(tmp_path)
    code, report, _ = _run(["--config", str(healthy), "--replications", "2", "--jobs", "1"], tmp_path, capsys)
    assert code == 0 and report["replications"]["failed_runs"] == [] and report["verdict"]["passed"]


def test_a_run_collapsed_for_most_of_its_window_fails_and_the_throttled_one_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """pressure_storm without admission control stays collapsed after its spike: goodput far below what the workers
    could serve. Users failed behind a saturated queue, so the run fails as a failing one does; with admission
    control on (the negative control) it drains and passes."""
    shortened = ["pressure_storm", "--duration", "120s", "--warmup", "10s", "--quiet"]
    code, report, _ = _run(shortened, tmp_path, capsys)
    collapsed = report["collapse"]["time_collapsed_s"]
    assert collapsed > 0.5 * 110.0 and report["collapse"]["time_failing_s"] < collapsed
    assert code == 3 and report["verdict"]["passed"] is False
    assert f"failing or collapsed {collapsed:.1f} s of the measured 110.0 s" in report["verdict"]["reason"]
    assert "goodput fell far below what the workers could serve" in report["verdict"]["reason"]
    monkeypatch.setenv("CHAOSD_THROTTLE__ENABLED", "true")  # as the scenario's description says to
    code, report, _ = _run(shortened, tmp_path, capsys)
    assert code == 0 and report["verdict"]["passed"], report["verdict"]


def test_a_retry_storm_for_most_of_the_window_fails_naming_the_storm(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """retry_storm: the callers' retries hold the pipeline metastable after the spike; the verdict says so, and the
    expectations (final state metastable, availability at most 40 %) hold."""
    code, report, _ = _run(["retry_storm", "--quiet"], tmp_path, capsys)
    storm = report["collapse"]["time_metastable_s"]
    assert storm > 0.5 * 110.0, report["collapse"]
    assert code == 3 and report["verdict"]["passed"] is False
    assert "callers kept retrying while the workers served attempts nobody waited for" in report["verdict"]["reason"]
    assert [e["passed"] for e in report["expectations"]] == [True, True]
