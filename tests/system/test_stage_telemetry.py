"""Per-stage telemetry: the report's `stages` table in virtual time, checked against the ledger and the service
distribution; the same figures in a real daemon's scrape (promtool clean), its status body and its breakers."""

from __future__ import annotations

import math
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import live, run, settings
from daemon_harness import Daemon, wait_for
from needs import program
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from chaosd.core.clock import LoopClock, new_event_loop
from chaosd.daemon.control import Controller
from chaosd.experiment.runner import Experiment
from chaosd.exporters.metrics import make_registry
from chaosd.exporters.stage_series import MAX_STAGE_LABELS, OTHER_STAGES
from chaosd.views import ReportView, StageReportView

MEAN = 0.004  # the clean stage's exponential mean: its p95 is MEAN · ln 20
RATE = 100.0


def _chain(*, flaky_retries: int = 1) -> dict[str, Any]:
    return {
        "load": {"arrival": "poisson", "rate": RATE},
        "workers": {"count": 4},
        "stages": [
            {"name": "clean", "kind": "compute", "service": {"distribution": "exponential", "mean": MEAN}},
            {
                "name": "flaky",
                "kind": "compute",
                "service": {"distribution": "exponential", "mean": 0.002},
                "failure_probability": 0.3,
                "retries": flaky_retries,
                "backoff": {"base": 0.001, "factor": 1.0, "max": 0.001, "jitter": 0.0},
                "breaker_threshold": 0,  # 30 % failures would trip it now and then: this test counts reasons
            },
        ],
    }


def _total_failed(st: StageReportView) -> int:
    return sum(st["failures"].values())


# ---------------------------------------------------------------------------------------------- the report


@pytest.fixture(scope="module")
def measured() -> ReportView:
    report: ReportView = run(_chain(), duration=120.0, warmup=20.0)
    return report


def test_every_stage_has_a_row_and_attempts_are_successes_plus_failures(measured: ReportView) -> None:
    stages = measured["stages"]
    assert list(stages) == ["clean", "flaky"]  # the configuration's order
    for name, st in stages.items():
        assert st["kind"] == "compute"
        assert st["attempts"] == st["succeeded"] + _total_failed(st), name
    # Every offered task went through `clean` once (nothing fails there): the cohort's tasks, give or take the
    # few in service at either mark.
    tasks = measured["tasks"]
    assert abs(stages["clean"]["attempts"] - tasks["accepted"]) <= 8


def test_the_warm_up_is_excluded(measured: ReportView) -> None:
    # 100 s measured at 100/s: 10,000 ± 100 attempts; counting the warm-up too would be 12,000.
    attempts = measured["stages"]["clean"]["attempts"]
    span = measured["duration_s"] - measured["warmup_s"]
    assert span == pytest.approx(100.0)
    assert abs(attempts - RATE * span) < 5 * math.sqrt(RATE * span), attempts


def test_a_flaky_stage_fails_a_third_of_its_attempts_and_a_clean_one_none(measured: ReportView) -> None:
    clean, flaky = measured["stages"]["clean"], measured["stages"]["flaky"]
    share = flaky["failures"]["error"] / flaky["attempts"]
    sigma = math.sqrt(0.3 * 0.7 / flaky["attempts"])
    assert abs(share - 0.3) < 4 * sigma, share
    assert set(flaky["failures"]) == {"error"}
    # Every failed first try is retried once; a failed retry fails the task.
    assert abs(flaky["failures"]["error"] - (flaky["retries"] + measured["tasks"]["failed"])) <= 8
    assert measured["tasks"]["failed_by"] == {"error": measured["tasks"]["failed"]}
    # Negative control: nothing fails, nothing is retried, in the clean stage.
    assert (clean["failures"], clean["retries"], clean["succeeded"]) == ({}, 0, clean["attempts"])
    assert clean["breaker"] == {"state": "closed", "opened": 0, "closed": 0}


def test_p95_is_the_exponential_one_within_the_histogram_resolution(measured: ReportView) -> None:
    clean = measured["stages"]["clean"]
    analytic = MEAN * math.log(20)  # P(S > s) = exp(-s / mean) = 0.05
    # ×1.05 buckets, interpolated, and ~10,000 samples (sampling error of a p95 ≈ 1.3 %).
    assert clean["p95_s"] == pytest.approx(analytic, rel=0.05)
    assert clean["p50_s"] == pytest.approx(MEAN * math.log(2), rel=0.05)
    assert clean["mean_s"] == pytest.approx(MEAN, rel=0.04)  # the exact sum, not a bucket estimate
    assert clean["p50_s"] < clean["p95_s"] < clean["p99_s"]
    # Negative control: the flaky stage's draws have half the mean, and its p95 shows it.
    assert measured["stages"]["flaky"]["p95_s"] == pytest.approx(0.002 * math.log(20), rel=0.08)


def test_retries_add_up_to_the_ledger_s_without_a_warm_up() -> None:
    report = run(_chain(flaky_retries=2), duration=30.0)
    stages = report["stages"]
    assert sum(st["retries"] for st in stages.values()) == report["tasks"]["retries"] > 0
    # Retried twice: a task fails only when three attempts in a row failed (0.3³ = 2.7 % of the tasks).
    tasks = report["tasks"]
    assert tasks["failed"] / tasks["accepted"] == pytest.approx(0.027, abs=0.012)


def test_the_summary_prints_the_stage_table(measured: ReportView) -> None:
    from chaosd.experiment.report import render_summary  # noqa: PLC0415 - what `chaosd run` prints

    lines = render_summary(measured).splitlines()
    at = lines.index("  by stage")
    rows = {line.split()[0]: line.split() for line in lines[at + 2 : at + 4]}
    flaky = measured["stages"]["flaky"]
    assert rows["flaky"][2] == str(flaky["attempts"]) and rows["flaky"][5] == "error"
    assert rows["clean"][3:5] == ["0", "(0.0%)"]


# ---------------------------------------------------------------------------------------------- breakers, virtual time


def _breaker_overlay() -> dict[str, Any]:
    return {
        "load": {"arrival": "poisson", "rate": 50.0},
        "stages": [
            {"name": "prep", "kind": "compute", "service": {"distribution": "exponential", "mean": 0.002}},
            {
                "name": "search",
                "kind": "tool",
                "service": {"distribution": "exponential", "mean": 0.002},
                "timeout": 0.05,
                "breaker_threshold": 3,
                "breaker_reset": 1.0,
            },
        ],
    }


def test_a_hung_tool_opens_its_breaker_and_closes_it_after_the_fault() -> None:
    async def script(ctl: Controller, clock: LoopClock, out: dict[str, Any]) -> None:
        t0 = ctl.exp.pipeline.t0
        await clock.sleep_until(t0 + 5.0)
        out["before"] = ctl.exp.report()["stages"]
        ctl.faults.inject("tool_timeout", "search", {}, ttl=3.0)
        await clock.sleep_until(t0 + 5.5)
        ctl.board.status("run", 0.0)  # a reading: the next status's window starts here, inside the fault
        await clock.sleep_until(t0 + 6.6)
        out["during"] = ctl.board.status("run", 0.0)["dag"]["stages"]
        await clock.sleep_until(t0 + 13.0)
        ctl.board.status("run", 0.0)
        await clock.sleep_until(t0 + 15.0)
        out["after"] = ctl.exp.report()["stages"]
        out["after_status"] = ctl.board.status("run", 0.0)["dag"]["stages"]
        out["trips"] = ctl.exp.pipeline.stages["search"].trips

    out = live(script, settings(_breaker_overlay()))
    before, after = out["before"]["search"], out["after"]["search"]
    assert before["breaker"] == {"state": "closed", "opened": 0, "closed": 0}
    assert before["failures"] == {}
    during = out["during"]["search"]
    assert during["breaker"] in ("open", "half_open")
    assert during["error_share"] > 0.9  # every call hangs to its timeout
    assert 0.045 <= during["p95_s"] <= 0.06  # the 50 ms stage timeout, within a bucket
    assert out["during"]["prep"]["error_share"] == 0.0  # negative control: the stage before it is untouched
    assert after["breaker"]["state"] == "closed"
    assert after["breaker"]["opened"] == out["trips"] >= 1
    assert after["breaker"]["closed"] >= 1
    assert after["failures"]["tool_timeout"] >= 3
    assert out["after"]["prep"]["failures"] == {}
    assert out["after_status"]["search"]["error_share"] == 0.0  # the window after the fault is clean again
    assert out["after_status"]["search"]["attempts_per_s"] == pytest.approx(50.0, rel=0.5)


# ---------------------------------------------------------------------------------------------- the stage label's bound


def test_stages_past_the_cap_share_one_label_value() -> None:
    count = MAX_STAGE_LABELS + 6
    names = ['q"uote\\d'] + [f"s{i:03d}" for i in range(1, count)]  # a name that needs escaping, too
    overlay = {
        "load": {"rate": 20.0},
        "stages": [{"name": n, "service": {"distribution": "constant", "mean": 0.0}} for n in names],
    }
    loop = new_event_loop(virtual=True)
    try:
        exp = Experiment(settings(overlay), LoopClock(loop), warmup=0.0)
        registry = make_registry(exp)

        async def plan(e: Experiment) -> None:
            await e.clock.sleep_until(e.pipeline.t0 + 5.0)

        loop.run_until_complete(exp.run(6.0, plan=plan))
        text = generate_latest(registry).decode()
        assert registry.stages is not None
        # What GET /metrics serves of them is rendered apart, faster: the same bytes as prometheus_client's.
        assert registry.stages.text() == generate_latest(registry.stages)
        assert registry.stages.text().decode() in registry.exposition().decode()
    finally:
        loop.close()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    attempts = {s.labels["stage"]: s.value for s in families["chaosd_stage_attempts"].samples}
    assert set(attempts) == {*names[:MAX_STAGE_LABELS], OTHER_STAGES}
    per_stage = attempts[names[0]]
    assert per_stage > 50  # ~20/s for 6 s, every stage once per task
    assert attempts[OTHER_STAGES] == pytest.approx(6 * per_stage, abs=6)  # six stages folded into one
    breaker = {s.labels["stage"] for s in families["chaosd_stage_breaker_state"].samples}
    assert breaker == set(names[:MAX_STAGE_LABELS])


# ---------------------------------------------------------------------------------------------- a real daemon


# The daemon's default load: 500 attempts of the first stage take 2.5 s.
DAEMON_RATE = 200.0
CONFIG = f"""
[load]
rate = {DAEMON_RATE}

[[stages]]
name = "clean"
kind = "compute"
service = {{ distribution = "exponential", mean = 0.002 }}
next = ["flaky"]

[[stages]]
name = "flaky"
kind = "compute"
service = {{ distribution = "exponential", mean = 0.002 }}
failure_probability = 0.3
breaker_threshold = 0
next = ["search"]

[[stages]]
name = "search"
kind = "tool"
service = {{ distribution = "exponential", mean = 0.002 }}
timeout = 0.05
breaker_threshold = 3
breaker_reset = 1.0
next = []
"""


def _value(scrape: dict[str, float], name: str, **labels: str) -> float:
    key = name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"
    return scrape[key]


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    tmp = tmp_path_factory.mktemp("stage-telemetry")
    config = tmp / "chaosd.toml"
    config.write_text(CONFIG)
    d = Daemon(tmp, config=config)
    try:
        yield d
    finally:
        d.terminate()
        d.kill()


def test_a_real_scrape_has_every_stage_series_and_promtool_accepts_it(daemon: Daemon) -> None:
    import urllib.request  # noqa: PLC0415

    with urllib.request.urlopen(daemon.base + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    stages = {"clean", "flaky", "search"}
    assert {(s.labels["stage"], s.labels["kind"]) for s in families["chaosd_stage_attempts"].samples} == {
        ("clean", "compute"),
        ("flaky", "compute"),
        ("search", "tool"),
    }
    reasons = {(s.labels["stage"], s.labels["reason"]) for s in families["chaosd_stage_attempt_failures"].samples}
    assert len(reasons) == 3 * 8  # every reason of every stage, from the first scrape
    assert {s.labels["stage"] for s in families["chaosd_stage_breaker_state"].samples} == stages
    moves = {(s.labels["stage"], s.labels["to"]) for s in families["chaosd_stage_breaker_transitions"].samples}
    assert moves == {(n, to) for n in stages for to in ("open", "closed")}
    assert families["chaosd_stage_attempt_seconds"].type == "histogram"
    promtool = program("promtool")
    check = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30, check=False
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_the_counts_move_as_the_pipeline_serves(daemon: Daemon) -> None:
    first = daemon.scrape()
    began = time.monotonic()
    a0 = _value(first, "chaosd_stage_attempts_total", stage="clean", kind="compute")

    def served() -> bool:
        return _value(daemon.scrape(), "chaosd_stage_attempts_total", stage="clean", kind="compute") >= a0 + 500

    wait_for(served, 30, "500 more attempts of the clean stage")
    last = daemon.scrape()
    elapsed = time.monotonic() - began
    grown = _value(last, "chaosd_stage_attempts_total", stage="clean", kind="compute") - a0
    # ≈ the offered rate × the time between the scrapes (every task passes `clean` once).
    assert grown / elapsed == pytest.approx(DAEMON_RATE, rel=0.3)
    accepted = _value(last, "chaosd_tasks_total", outcome="accepted") - _value(
        first, "chaosd_tasks_total", outcome="accepted"
    )
    # The tasks in the pipeline at either scrape: accepted, not yet through `clean` (a loaded host holds more).
    held = first["chaosd_tasks_in_flight"] + last["chaosd_tasks_in_flight"]
    assert abs(grown - accepted) <= held + 5, (grown, accepted, held)
    flaky_attempts = _value(last, "chaosd_stage_attempts_total", stage="flaky", kind="compute") - _value(
        first, "chaosd_stage_attempts_total", stage="flaky", kind="compute"
    )
    flaky_errors = _value(last, "chaosd_stage_attempt_failures_total", stage="flaky", reason="error") - _value(
        first, "chaosd_stage_attempt_failures_total", stage="flaky", reason="error"
    )
    assert flaky_attempts > 300
    assert flaky_errors / flaky_attempts == pytest.approx(0.3, abs=4 * math.sqrt(0.21 / flaky_attempts))
    # Negative control: the clean stage shows no failure of any reason, and nothing retried.
    assert all(v == 0 for k, v in last.items() if k.startswith("chaosd_stage_attempt_failures_total{") and "clean" in k)
    assert _value(last, "chaosd_stage_retries_total", stage="clean") == 0
    # The histogram counts every attempt.
    assert _value(last, "chaosd_stage_attempt_seconds_count", stage="clean") == _value(
        last, "chaosd_stage_attempts_total", stage="clean", kind="compute"
    )


def test_the_status_body_carries_each_stage_over_the_window(daemon: Daemon) -> None:
    daemon.get("/api/v1/status")  # a reading to compare the next one with

    stages: dict[str, Any] = {}

    def windowed() -> bool:
        stages.update(daemon.get("/api/v1/status")[1]["dag"]["stages"])
        return 1.0 <= stages["clean"]["window_s"] < 2.0  # compared with the reading taken a window before

    wait_for(windowed, 10, "a status a telemetry window after the previous one", lambda: str(stages))
    clean, flaky = stages["clean"], stages["flaky"]
    assert clean["attempts_per_s"] == pytest.approx(DAEMON_RATE, rel=0.5)
    assert 0.0 < clean["p95_s"] < 0.05
    assert clean["error_share"] == 0.0  # negative control
    assert 0.1 < flaky["error_share"] < 0.5  # ~0.3 over about a second (~200 attempts)
    assert (clean["kind"], stages["search"]["kind"]) == ("compute", "tool")
    assert {st["breaker"] for st in stages.values()} == {"closed"}


def test_a_hung_tool_opens_the_breaker_in_the_scrape_and_it_closes_after(daemon: Daemon) -> None:
    before = daemon.scrape()
    opened0 = _value(before, "chaosd_stage_breaker_transitions_total", stage="search", to="open")
    closed0 = _value(before, "chaosd_stage_breaker_transitions_total", stage="search", to="closed")
    assert _value(before, "chaosd_stage_breaker_state", stage="search") == 0
    # A 1 s fault: three hung calls open the breaker within a few tenths of a second, and it stays open for its
    # breaker_reset (1 s) whenever the fault ends.
    code, body = daemon.request("POST", "/api/v1/faults", {"action": "tool_timeout", "target": "search", "ttl": 1})
    assert code == 201, body

    def state() -> float:
        return _value(daemon.scrape(), "chaosd_stage_breaker_state", stage="search")

    wait_for(lambda: state() == 2, 10, "the search breaker open (2)", lambda: str(state()))
    during = daemon.scrape()
    assert _value(during, "chaosd_stage_breaker_transitions_total", stage="search", to="open") > opened0
    hung = _value(during, "chaosd_stage_attempt_failures_total", stage="search", reason="tool_timeout")
    assert hung >= 3  # the threshold's worth of hung calls opened it
    assert _value(during, "chaosd_stage_attempt_failures_total", stage="clean", reason="tool_timeout") == 0

    def closed() -> bool:
        s = daemon.scrape()
        again = _value(s, "chaosd_stage_breaker_transitions_total", stage="search", to="closed") > closed0
        return again and _value(s, "chaosd_stage_breaker_state", stage="search") == 0

    wait_for(closed, 30, "the search breaker closed after the fault", lambda: str(state()))


def test_scrape_text_is_the_same_for_the_registry_and_the_endpoint(tmp_path: Path) -> None:
    """The stage families are rendered afresh at each scrape (never kept like the recovery histograms)."""
    loop = new_event_loop(virtual=True)
    try:
        exp = Experiment(settings(_chain()), LoopClock(loop), warmup=0.0)
        registry = make_registry(exp)

        async def plan(e: Experiment) -> None:
            await e.clock.sleep_until(e.pipeline.t0 + 2.0)

        loop.run_until_complete(exp.run(3.0, plan=plan))
        served = registry.exposition().decode()
    finally:
        loop.close()
    counts = {
        s.labels["stage"]: s.value
        for f in text_string_to_metric_families(served)
        for s in f.samples
        if s.name == "chaosd_stage_attempts_total"
    }
    assert counts["clean"] == exp.pipeline.stages["clean"].stats.attempts > 0
