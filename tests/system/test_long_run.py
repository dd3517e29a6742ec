"""A week of survival on the daemon's own parts, in virtual time: memory stays within its bounds, totals count
everything, and the API still serves the first day's faults, from storage.

One run (the module fixture) serves every test here: the week is simulated once.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
from aiohttp import web

from chaosd.api import build_app
from chaosd.api.keys import STORAGE
from chaosd.config.settings import Settings, load_settings
from chaosd.core.clock import LoopClock, VirtualEventLoop
from chaosd.daemon.control import Controller
from chaosd.daemon.lifecycle import LiveRun
from chaosd.experiment.report import rounded
from chaosd.experiment.runner import Experiment

pytestmark = [pytest.mark.slow, pytest.mark.cpu]  # a minute or more of wall time

DAY = 86_400.0
WEEK = 7 * DAY
KEEP = 50  # history.faults: far fewer than the week's faults
ENTRIES = 20  # history.entries
TIMELINE = 100  # history.timeline
INTERVAL = 900.0  # a survival fault every 15 minutes: 672 in the week


def _settings(tmp: str) -> Settings:
    return load_settings(
        None,
        {
            # A light load on the daemon's own parts, so a week takes a minute: what grows is per fault, per
            # tick and per action, and a week still holds 672 faults and 60,480 ticks.
            "load": {"rate": 0.1, "producers": 1},
            "workers": {"count": 2},
            "telemetry": {"tick": 10.0, "window": 100.0},
            "detector": {"slope_window": 50.0},
            "orchestrator": {"lease_ttl": 60.0, "renew_interval": 20.0, "checkpoint_interval": 600.0},
            "recovery": {"baseline_window": 300.0, "baseline_min": 100.0, "confirm": 30.0, "limit": 600.0},
            "faults": {"default_ttl": 60.0},
            "run": {"timeline": 600.0},
            "history": {"faults": KEEP, "entries": ENTRIES, "timeline": TIMELINE},
            "storage": {"path": f"{tmp}/chaosd.db"},
            "daemon": {"report": f"{tmp}/report.json"},
            "api": {"host": "127.0.0.1", "port": 0, "token": None},
        },
    )


@pytest.fixture(scope="module")
def week(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The daemon's app (storage, API, pipeline) on the virtual clock for a week of survival; what it served."""
    settings = _settings(str(tmp_path_factory.mktemp("week")))
    loop = VirtualEventLoop()
    clock = LoopClock(loop)
    outside = loop.outside  # while a socket or storage's thread is awaited, the clock waits for it
    out: dict[str, Any] = {"sizes": []}

    async def main() -> None:
        exp = Experiment(settings, clock, warmup=0.0, virtual=True)
        ctl = Controller(exp)
        app = build_app(settings, LiveRun(settings, ctl, "week"))
        runner = web.AppRunner(app)
        with outside():
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        base = f"http://127.0.0.1:{port}"
        try:
            async with aiohttp.ClientSession() as http:
                with outside():
                    async with http.post(
                        base + "/api/v1/survival", json={"interval": INTERVAL, "duration": WEEK - DAY / 2}
                    ) as r:
                        assert r.status == 201, await r.text()
                await clock.sleep(INTERVAL * 1.5)  # the first survival fault is in: keep what it looked like
                first = exp.injector.faults.get(1)
                assert first is not None
                out["first"] = first.as_dict()
                while exp.pipeline.elapsed() < WEEK:
                    await clock.sleep(DAY)
                    out["sizes"].append(ctl.board.sizes())
                with outside():
                    for path in (
                        "/api/v1/faults/1",
                        "/api/v1/faults",
                        "/api/v1/report",
                        "/api/v1/score",
                        "/api/v1/runs/week?faults_limit=100",
                        "/api/v1/runs/week?faults_after=600&faults_limit=100",
                    ):
                        async with http.get(base + path) as r:
                            out[path] = (r.status, await r.json())
                    out["stored_first"] = await app[STORAGE].fault("week", 1)
            out["injected"] = exp.injector.injected
            out["kept"] = [f.id for f in exp.injector.faults]
            out["outcomes"] = dict(exp.injector.outcomes)
            out["pending"] = len(exp.injector.in_play)
            out["book"] = (exp.injector.book.judged, exp.injector.book.recovered)
        finally:
            with outside():
                await runner.cleanup()

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    return out


def test_every_long_lived_structure_stays_within_its_bound(week: dict[str, Any]) -> None:
    assert week["injected"] > 10 * KEEP, "the week injected far more faults than memory keeps"
    bounds = {
        "faults": KEEP,
        "incidents": KEEP,
        "timeline": TIMELINE,
        "plan_log": ENTRIES,
        "collapse_episodes": ENTRIES,
        "throttle_actions": ENTRIES,
        "windows": 100,
        "events": 10_000,
    }
    for day, sizes in enumerate(week["sizes"], start=1):
        for name, bound in bounds.items():
            assert sizes[name] <= bound, f"day {day}: {name} holds {sizes[name]} (bound {bound})"
        # Not bounded by a setting but by what is in play now: a handful, whatever the day.
        assert sizes["faults_pending"] <= 5 and sizes["restarts"] <= 20, (day, sizes)
        assert sizes["dispatch_log"] <= 1000 and sizes["in_flight"] <= 100, (day, sizes)
    # Flat from day 2 on: nothing grows with run time.
    for name in ("faults", "incidents", "timeline", "plan_log"):
        assert len({sizes[name] for sizes in week["sizes"][1:]}) == 1, (name, [s[name] for s in week["sizes"]])


def test_the_totals_count_every_fault_not_only_those_in_memory(week: dict[str, Any]) -> None:
    outcomes = week["outcomes"]
    assert sum(outcomes.values()) + week["pending"] == week["injected"]
    assert outcomes["recovered"] > 0.9 * week["injected"], outcomes  # survival on the default DAG heals
    code, report = week["/api/v1/report"]
    assert code == 200
    summary = report["faults_summary"]
    assert summary["injected"] == week["injected"] and summary["recovered"] == outcomes["recovered"]
    assert summary["faults_listed"] == len(report["faults"]) == KEEP
    assert [f["id"] for f in report["faults"]] == week["kept"]  # the newest, in order
    code, score = week["/api/v1/score"]
    assert score["faults_injected"] == week["injected"] and score["faults_recovered"] == outcomes["recovered"]
    judged, recovered = week["book"]
    assert judged > 10 * KEEP and 0 < recovered <= judged  # the score judged every incident, not the last 50
    assert score["recovery"] is not None and report["score"] == {k: score[k] for k in report["score"]}


def test_a_fault_from_day_one_is_served_on_day_seven_from_storage(week: dict[str, Any]) -> None:
    first = week["first"]
    assert first["id"] == 1 and first["injected_at"] < DAY
    assert 1 not in week["kept"]  # long gone from memory
    code, served = week["/api/v1/faults/1"]
    assert code == 200
    assert served == rounded(week["stored_first"])  # what storage recorded, rounded as every answer is
    # As it was known on day one, with the verdict it got later.
    assert {k: served[k] for k in ("id", "action", "targets", "injected_at")} == {
        k: first[k] for k in ("id", "action", "targets", "injected_at")
    }
    assert served["outcome"] in ("recovered", "failed", "unmeasured") and served["run_id"] == "week"
    code, listed = week["/api/v1/faults"]
    assert code == 200 and len(listed["faults"]) == KEEP
    assert listed["injected"] == week["injected"] and listed["first_in_memory"] == week["kept"][0]


def test_the_runs_history_is_served_a_page_at_a_time(week: dict[str, Any]) -> None:
    code, first = week["/api/v1/runs/week?faults_limit=100"]
    assert code == 200 and [f["id"] for f in first["faults"]] == list(range(1, 101))
    assert first["faults_next"] == 100
    code, last = week["/api/v1/runs/week?faults_after=600&faults_limit=100"]
    assert code == 200 and [f["id"] for f in last["faults"]] == list(range(601, week["injected"] + 1))
    assert last["faults_next"] is None  # fewer than a page left: the last one
