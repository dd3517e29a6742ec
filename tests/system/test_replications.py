"""``chaosd run --replications N``: the seeds, the 95 % CI and its coverage of Erlang C, the same bytes whatever
``--jobs``, expectations judged on the CI, and bad input → exit 2."""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from chaosd.batch.replicate import RunSpec, SurvivalSpec, run_many, run_one, seeds_for, summarise
from chaosd.cli.main import main
from chaosd.core.clock import wall_time
from chaosd.core.confidence import mean_ci, t975
from chaosd.experiment.plans import evaluate_expectations, evaluate_replicated
from chaosd.views import ReportView

pytestmark = pytest.mark.cpu

MU = 100.0  # per worker: mean service 10 ms


def _cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


# --- the interval --------------------------------------------------------------------------------------------


def test_t_quantiles_match_the_published_table() -> None:
    # Student's t 0.975 quantiles from the standard table (and the normal one far out).
    published = {1: 12.706, 2: 4.303, 4: 2.776, 10: 2.228, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980, 10_000: 1.960}
    assert {df: round(t975(df), 3) for df in published} == published
    # Past the table the expansion joins it smoothly and keeps falling towards the normal quantile.
    assert t975(30) > t975(31) > t975(1000) > 1.95996
    with pytest.raises(ValueError, match="degrees of freedom"):
        t975(0)


def test_mean_ci_is_t_on_the_sample_deviation() -> None:
    ci = mean_ci([1.0, 2.0, 3.0])  # s = 1, n = 3: half-width t(2)·1/√3
    assert ci["mean"] == 2.0 and ci["n"] == 3
    assert ci["ci95"] == pytest.approx([2 - 4.3027 / math.sqrt(3), 2 + 4.3027 / math.sqrt(3)], abs=1e-9)
    assert mean_ci([5.0]) == {"mean": 5.0, "ci95": None, "n": 1}  # one run says nothing about the spread
    assert mean_ci([]) == {"mean": None, "ci95": None, "n": 0}
    assert mean_ci([4.0, 4.0, 4.0])["ci95"] == [4.0, 4.0]


def test_seeds_are_the_base_then_seed_sequence_children() -> None:
    seeds = seeds_for(42, 6)
    assert seeds[0] == 42  # replication 0 is the plain run
    children = np.random.SeedSequence(42).spawn(6)
    assert seeds[1:] == [int(child.generate_state(1)[0]) for child in children[1:]]
    assert seeds_for(42, 3) == seeds[:3]  # more replications add seeds, never change the first ones
    assert len(set(seeds)) == 6 and all(0 <= s < 2**32 for s in seeds)
    assert seeds_for(43, 6)[1:] != seeds[1:]
    with pytest.raises(ValueError):
        seeds_for(1, 0)


# --- coverage: the CI of the mean wait contains Erlang C's -----------------------------------------------------


def _erlang_c(c: int, a: float) -> float:
    rho = a / c
    top = a**c / math.factorial(c) / (1 - rho)
    return top / (sum(a**k / math.factorial(k) for k in range(c)) + top)


def _mmc_wq(c: int, lam: float) -> float:
    return _erlang_c(c, lam / MU) * (lam / (c * MU)) / (1 - lam / (c * MU)) / lam


def _mmc(seed: int, c: int, lam: float) -> RunSpec:
    overlay: dict[str, object] = {
        "seed": seed,
        "load": {"arrival": "poisson", "rate": lam, "producers": 4},
        "workers": {"count": c},
        "queue": {"capacity": 100_000, "when_full": "reject"},
        "stages": [{"name": "work", "service": {"distribution": "exponential", "mean": 1 / MU}}],
        "detector": {"enabled": False},
        "throttle": {"policy": "none"},  # the textbook queue refuses nothing
        "telemetry": {
            "tick": 1.0
        },  # the wait histogram does not need the tick (tests/unit/experiment/test_queueing.py)
    }
    return RunSpec(overlay=overlay, duration=20.0, warmup=2.0)


SETS = 40
PER_SET = 5
C, LAM = 3, 180.0  # ρ = 0.6


@pytest.fixture(scope="module")
def wait_sets() -> list[list[float]]:
    """SETS independent sets of PER_SET replications (base seeds 1…SETS): each run's mean wait, seconds."""
    return [
        [run_one(_mmc(seed, C, LAM))["latency"]["wait"]["mean"] for seed in seeds_for(base, PER_SET)]
        for base in range(1, SETS + 1)
    ]


def _coverage(sets: list[list[float]], truth: float, quantile: float | None = None) -> float:
    covered = 0
    for waits in sets:
        ci = mean_ci(waits, quantile=quantile)["ci95"]
        assert ci is not None
        covered += ci[0] <= truth <= ci[1]
    return covered / len(sets)


@pytest.mark.slow
def test_the_ci_of_the_mean_wait_covers_erlang_c(wait_sets: list[list[float]]) -> None:
    truth = _mmc_wq(C, LAM)
    assert truth == pytest.approx(0.002956, abs=1e-6)  # C(3, 1.8) = 0.3547; Wq = C / (cμ − λ)
    coverage = _coverage(wait_sets, truth)
    means = [math.fsum(w) / len(w) for w in wait_sets]
    assert abs(math.fsum(means) / SETS / truth - 1) < 0.02  # the estimator is unbiased to 2 %
    assert coverage >= 0.90, f"coverage {coverage:.3f}"
    # Negative controls on the same runs. The normal quantile in place of t with n - 1 = 4 degrees of freedom
    # (1.96 for 2.78) makes the interval too narrow: in theory it covers 88 %; it misses sets the t interval covers.
    z = _coverage(wait_sets, truth, quantile=1.959964)
    assert z < coverage and z <= 0.90, f"z coverage {z:.3f} vs t {coverage:.3f}"
    # The model one worker short (ρ = 0.9) waits six times longer: the measured CIs never contain it.
    assert _coverage(wait_sets, _mmc_wq(C - 1, LAM)) == 0.0


# --- local processes: the same bytes whatever --jobs -----------------------------------------------------------


def test_replications_are_the_same_bytes_whatever_jobs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["run", "--survival", "--duration", "30", "--seed", "3", "--replications", "3", "--quiet"]
    one, two, plain = tmp_path / "j1.json", tmp_path / "j2.json", tmp_path / "plain.json"
    assert _cli([*base, "--jobs", "1", "--report", str(one)], capsys)[0] == 0
    assert _cli([*base, "--jobs", "2", "--report", str(two)], capsys)[0] == 0
    assert one.read_bytes() == two.read_bytes()
    report = json.loads(one.read_text())
    block = report["replications"]
    assert block["n"] == 3 and block["seeds"] == seeds_for(3, 3) and report["seed"] == 3
    assert sum(block["grade_counts"].values()) == 3
    scores = block["score"]
    assert scores["n"] == 3 and scores["ci95"][0] <= scores["mean"] <= scores["ci95"][1]
    # The report is the base seed's: without the block, the plain run's bytes.
    plain_args = ["run", "--survival", "--duration", "30", "--seed", "3", "--quiet", "--report", str(plain)]
    assert _cli(plain_args, capsys)[0] == 0
    del report["replications"]
    assert report == json.loads(plain.read_text())
    assert block["seeds"][1] != 3 and block["score"]["mean"] != json.loads(plain.read_text())["score"]["total"]


def test_one_replication_is_the_plain_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    one, plain = tmp_path / "one.json", tmp_path / "plain.json"
    args = ["run", "baseline", "--duration", "20", "--warmup", "2", "--quiet"]
    assert _cli([*args, "--replications", "1", "--report", str(one)], capsys)[0] == 0
    assert _cli([*args, "--report", str(plain)], capsys)[0] == 0
    report = json.loads(one.read_text())
    block = report.pop("replications")
    assert report == json.loads(plain.read_text())
    assert block["n"] == 1 and block["score"]["ci95"] is None and block["score"]["mean"] == report["score"]["total"]


def test_the_summary_prints_the_score_with_its_ci(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "r.json"
    code, out, _ = _cli(["run", "--survival", "--duration", "30", "--replications", "3", "--report", str(path)], capsys)
    assert code == 0
    block = json.loads(path.read_text())["replications"]
    lo, hi = block["score"]["ci95"]
    counts = block["grade_counts"]
    grades = ", ".join(f"{g} in {counts[g]} of 3" for g in ("A+", "A", "B", "C", "D", "F", "none") if g in counts)
    assert (
        f"  runs       score {block['score']['mean']:.1f} ± {(hi - lo) / 2:.1f} (95 % CI, 3 runs) · grade {grades}"
        in out
    )
    assert sum(f"  replication {i}/3 seed " in out for i in (1, 2, 3)) == 3
    code, summary, _ = _cli(["report", str(path)], capsys)  # the written report reads the same
    assert code == 0 and "(95 % CI, 3 runs)" in summary


# --- expectations on the CI ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def survival_reports() -> list[ReportView]:
    spec = RunSpec(duration=40.0, survival=SurvivalSpec(interval=10.0))
    return run_many([spec.with_seed(s) for s in seeds_for(5, 4)], jobs=2)


def test_min_score_is_judged_on_the_ci_lower_bound(survival_reports: list[ReportView]) -> None:
    block = summarise(survival_reports)
    lo, hi = block["score"]["ci95"] or [math.nan, math.nan]
    mean = block["score"]["mean"]
    assert mean is not None and lo < mean < hi
    between = (lo + mean) / 2  # the mean passes it, the interval does not
    [judged] = evaluate_replicated({"min_score": between}, survival_reports)
    assert judged["passed"] is False and judged["measured"] == pytest.approx(lo, abs=1e-6)
    assert "lower bound of the 95 % CI over 4 runs" in judged["because"]
    assert mean >= between  # judged on the mean it would have passed
    [below] = evaluate_replicated({"min_score": math.floor(lo)}, survival_reports)  # control: under the bound
    assert below["passed"] is True and below["measured"] == pytest.approx(lo, abs=1e-6)


def test_max_recovery_is_judged_on_the_upper_bound(survival_reports: list[ReportView]) -> None:
    slowest = [evaluate_expectations({"max_recovery_s": 0}, r)[0]["measured"] for r in survival_reports]
    ci = mean_ci([float(v) for v in slowest if isinstance(v, float)])["ci95"]
    assert ci is not None and len(slowest) == 4
    [judged] = evaluate_replicated({"max_recovery_s": max(slowest)}, survival_reports)  # every run meets it
    assert judged["measured"] == pytest.approx(ci[1]) and judged["passed"] is (ci[1] <= max(slowest))
    [roomy] = evaluate_replicated({"max_recovery_s": math.ceil(ci[1]) + 1}, survival_reports)
    assert roomy["passed"] is True


def test_a_count_limit_holds_only_if_every_run_meets_it(survival_reports: list[ReportView]) -> None:
    passes = [evaluate_expectations({"all_recovered": True}, r)[0]["passed"] for r in survival_reports]
    [judged] = evaluate_replicated({"all_recovered": True}, survival_reports)
    assert judged["passed"] is all(passes)
    # One run is judged as a plain run is.
    assert evaluate_replicated({"min_score": 50}, survival_reports[:1]) == evaluate_expectations(
        {"min_score": 50}, survival_reports[0]
    )


def test_a_scenario_run_with_replications_exits_3_on_the_ci(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = tmp_path / "strict.yaml"
    scenario.write_text("name: strict\nduration: 30s\nexpect:\n  min_score: 99.9\n  lost_tasks: 1000000\n")
    path = tmp_path / "r.json"
    args = ["run", str(scenario), "--survival", "--replications", "2", "--report", str(path)]
    code, out, _ = _cli(args, capsys)
    report = json.loads(path.read_text())
    [score, lost] = report["expectations"]
    lo = report["replications"]["score"]["ci95"][0]
    assert code == 3 and score["passed"] is False and score["measured"] == lo < 99.9
    assert lost["passed"] is True
    assert "  expect     FAIL: min_score 99.9 (measured " in out


# --- bad input -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--replications", "0"], "--replications: must be ≥ 1"),
        (["--replications", "x"], "--replications: not a whole number"),
        (["--replications", "1001"], "--replications: at most 1000 (got 1001)"),
        (["--replications", "2", "--jobs", "0"], "--jobs: must be ≥ 1"),
        (["--jobs", "2"], "--jobs: only with --replications"),
        (["--replications", "2", "--realtime"], "--replications: only in virtual time"),
        (["--replications", "2", "--warmup", "70", "--duration", "60"], "--warmup: 70 s leaves nothing to measure"),
    ],
)
def test_bad_replication_flags_exit_2_and_run_nothing(
    args: list[str], named: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    os.chdir(tmp_path)
    try:
        code = main(["run", *args])
    except SystemExit as exc:  # argparse's own refusals
        code = exc.code  # type: ignore[assignment]
    assert code == 2
    assert named in capsys.readouterr().err
    assert not (tmp_path / "chaosd-report.json").exists()


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:  # gone
        return []
    return [int(c) for c in text.split()]


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads child processes from /proc")
def test_ctrl_c_stops_the_replications_at_once_and_writes_no_report(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    root = Path(__file__).resolve().parents[2]
    args = ["run", "--survival", "--duration", "30m", "--replications", "4", "--jobs", "2", "--report", str(report)]
    env = {**os.environ, "PYTHONPATH": str(root)}
    child = subprocess.Popen(
        [sys.executable, "-m", "chaosd", *args], cwd=tmp_path, env=env, text=True, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = wall_time() + 60
        # Its fork server, then the server's workers: the runs have started.
        while not any(_children(server) for server in _children(child.pid)):
            assert child.poll() is None and wall_time() < deadline, "no worker process within 60 s"
            with contextlib.suppress(subprocess.TimeoutExpired):  # a pause that ends early if the child exits
                child.wait(timeout=0.05)
        os.killpg(child.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole group
        sent = wall_time()
        _, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    assert child.returncode == 130 and "chaosd: interrupted; no report written" in err
    assert wall_time() - sent < 10  # four 30-minute runs take minutes: nothing waited for them
    assert not report.exists()


def test_a_bad_config_is_refused_before_any_process_starts(tmp_path: Path) -> None:
    from chaosd.core.errors import ConfigError  # noqa: PLC0415

    with pytest.raises(ConfigError, match=r"load\.rate"):
        run_many([RunSpec(overlay={"load": {"rate": -1}})] * 2, jobs=2)
