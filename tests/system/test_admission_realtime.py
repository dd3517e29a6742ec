"""Admission control in real time, judged by the real programs on loopback: a daemon with the default capacity
policy (4 workers, ~10 ms a task: ~400 tasks/s; offered 200/s) → Prometheus with the shipped rules →
Alertmanager → a webhook.

- A sustained 2× overload is an overload, not a collapse: ChaosdPipelineOverloaded reaches the webhook with
  the shipped timing (only the evaluation interval is 1 s instead of 10 s), goodput stays at the measured
  capacity while the excess is shed, and ChaosdPipelineCollapsed (its `for:` cut to 2 s) never even pends.
- A 10 s process stall (SIGSTOP 300 ms, SIGCONT 200 ms: a CPU-throttled container) is seen as a stall and
  nothing else, then or in the 20 s after it: little refused, no alarm, no alert. Negative control: the same
  stall with the stall threshold out of reach is judged as an overload (within seconds: it ends at the alarm).

promtool (tests/system/test_prometheus_rules.py) proves the rules' timing at the shipped 10 s evaluation interval.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import AlertStack, Daemon, shortened_rules, wait_for
from needs import program

pytestmark = pytest.mark.slow  # about a minute and a half of real time

program("prometheus")
program("prometheus-alertmanager", "alertmanager")

ALARMS = ("ChaosdPipelineOverloaded", "ChaosdPipelineCollapsed")
RATE = 200  # tasks/s offered by the default load
STALL_S = 10.0
# Watched after the stall: twice the longest its aftermath is judged apart (the detector takes the backlog a stall
# leaves for the pause's for at most five 1 s telemetry windows) plus the longest hold before an alarm (4 s, rising
# latency), so an overload the stall left behind is raised inside it. The detector was healthy again 1 to 2 s after
# the stall in every run measured.
AFTER_S = 20.0
OFFERED = 'chaosd_tasks_total{outcome="offered"}'
REFUSED = 'chaosd_tasks_total{outcome="rejected"}'
# Refusals for overload (chaosd:tasks_refused:ratio1m's), over a window short enough to lie inside the overload.
SHARE_20S = (
    'sum(rate(chaosd_tasks_rejected_total{{instance="{i}", reason=~"shed|queue_full|dropped|throttled"}}[20s]))'
    ' / sum(rate(chaosd_tasks_total{{instance="{i}", outcome="offered"}}[20s]))'
)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Daemon, AlertStack, str]]:
    """A daemon with the default admission policy, scraped by Prometheus; both stopped after the module. The stall
    test runs on it first: after the overload the daemon recovers, and the overload alert resolves, for a while."""
    tmp = tmp_path_factory.mktemp("admission")
    (tmp / "daemon").mkdir()
    daemon = Daemon(tmp / "daemon")
    try:
        target = daemon.base.removeprefix("http://")
        # Collapsed cut to 2 s: any collapse at all would reach the webhook. Overloaded keeps its shipped for:.
        rules = shortened_rules(tmp, {"ChaosdPipelineCollapsed": "2s"})
        alerting = AlertStack(tmp / "stack", [target], rules)
        try:
            daemon.wait_for_baseline()
            alerting.wait_scraped(target)
            yield daemon, alerting, target
        finally:
            alerting.close()
    finally:
        daemon.kill()


def _status(daemon: Daemon) -> dict[str, Any]:
    return dict(daemon.get("/api/v1/status")[1])


def _delta(after: dict[str, float], before: dict[str, float], key: str) -> float:
    return after[key] - before[key]


def _runs(states: list[str]) -> str:
    """``healthy×3 stall×1 …``: the states sampled, run-length encoded."""
    runs: list[list[Any]] = []
    for state in states:
        if runs and runs[-1][0] == state:
            runs[-1][1] += 1
        else:
            runs.append([state, 1])
    return " ".join(f"{state}×{n}" for state, n in runs)


def _never(alerting: AlertStack, target: str, names: tuple[str, ...], since: float) -> list[dict[str, Any]]:
    """Alerts (pending or firing) Prometheus held for ``target`` since ``since`` (time.monotonic()), and those
    that reached the webhook."""
    window = f"{int(time.monotonic() - since) + 5}s"
    selector = f'ALERTS{{instance="{target}", alertname=~"{"|".join(names)}"}}'
    held = alerting.query(f"max_over_time({selector}[{window}])")
    return held + [a for name in names for a in alerting.alerts(name, target)]


def _stall(pid: int, seconds: float = STALL_S, until: Callable[[], bool] | None = None) -> None:
    """A CPU-throttled container: stopped 300 ms, running 200 ms, for ``seconds`` (a duty cycle, not a wait);
    ``until``, asked once a cycle while the process runs, ends it sooner."""
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            os.kill(pid, signal.SIGSTOP)
            time.sleep(0.3)
            os.kill(pid, signal.SIGCONT)
            running = time.monotonic()
            if until is not None and until():
                return
            time.sleep(max(0.0, running + 0.2 - time.monotonic()))
    finally:
        os.kill(pid, signal.SIGCONT)


def test_a_10s_stall_refuses_little_raises_no_alarm_and_fires_no_alert(
    stack: tuple[Daemon, AlertStack, str],
) -> None:
    daemon, alerting, target = stack
    wait_for(lambda: _status(daemon)["detector"] == "healthy", 30, "a healthy detector", lambda: str(_status(daemon)))
    before = daemon.scrape()
    assert before['chaosd_admission_info{policy="capacity"}'] == 1  # the default policy
    started = time.monotonic()
    _stall(daemon.proc.pid)
    # Then the daemon runs on for AFTER_S, sampled every second: the states it passes through.
    states = []
    while (left := started + STALL_S + AFTER_S - time.monotonic()) > 0:
        states.append(_status(daemon)["detector"])
        time.sleep(min(1.0, left))
    after = daemon.scrape()

    offered = _delta(after, before, OFFERED)
    refused = _delta(after, before, REFUSED)
    by_reason = {
        k.split('"')[1]: _delta(after, before, k) for k in after if k.startswith("chaosd_tasks_rejected_total{")
    }
    numbers = f"refused {refused:.0f} of {offered:.0f} offered ({refused / offered:.1%}) {by_reason}; {_runs(states)}"
    assert offered >= 0.8 * RATE * (STALL_S + AFTER_S), numbers  # the load went on through the stall (open loop)
    assert _delta(after, before, "chaosd_stalls_total") >= 1, "the stall was seen: " + numbers
    # What is refused, the pause refused (as its backlog drains): at most 5 % of a minute's load.
    assert refused <= 0.05 * RATE * 60, numbers
    assert _delta(after, before, "chaosd_overloads_total") == 0, "a stall is no overload: " + numbers
    assert _delta(after, before, "chaosd_collapses_total") == 0, numbers
    assert {"overload", "collapsed"}.isdisjoint(states), numbers

    # Prometheus saw the stall (a scrape after it counts it) and still held no alert, not even pending.
    stalls = f'chaosd_stalls_total{{instance="{target}"}}'
    wait_for(lambda: alerting.value(stalls) >= after["chaosd_stalls_total"], 10, "Prometheus to scrape the stall count")
    assert _never(alerting, target, ALARMS, started) == [], numbers
    print(f"\nstall: {numbers}")


def test_a_sustained_2x_overload_alerts_overloaded_and_never_collapsed(
    stack: tuple[Daemon, AlertStack, str],
) -> None:
    daemon, alerting, target = stack
    before = daemon.scrape()
    assert before['chaosd_admission_info{policy="capacity"}'] == 1  # the default policy
    # 4 × 200/s = 800/s against ~400/s (less on a busy host): more than twice the capacity, for a minute.
    code, fault = daemon.request("POST", "/api/v1/faults", {"action": "load_spike", "params": {"factor": 4}, "ttl": 60})
    assert code == 201, fault
    injected = time.monotonic()

    # Raised ~2 s in, pending from the next evaluation, firing 30 s later: well inside the minute.
    wait_for(
        lambda: bool(alerting.alerts("ChaosdPipelineOverloaded", target)),
        58,
        "ChaosdPipelineOverloaded at the webhook while the overload lasts",
        lambda: str(_status(daemon)["admission"]) + " " + _status(daemon)["detector"],
    )
    fired_after = time.monotonic() - injected
    alert = alerting.alerts("ChaosdPipelineOverloaded", target)[0]
    assert alert["status"] == "firing" and alert["labels"]["severity"] == "warning", alert
    status = _status(daemon)
    # Overload; or a stall, if the host just paused the daemon for 50 ms or more (the overload resumes after it).
    assert status["detector"] in ("overload", "stall") and status["faults_active"] == 1, status
    assert status["admission"]["policy"] == "capacity" and status["admission"]["standing"], status["admission"]

    # The last 20 s, all inside the overload, as Prometheus saw them.
    offered = alerting.value(f'avg_over_time(chaosd_offered_rate{{instance="{target}"}}[20s])')
    capacity = alerting.value(f'avg_over_time(chaosd_capacity_rate{{instance="{target}"}}[20s])')
    goodput = alerting.value(f'avg_over_time(chaosd_goodput_rate{{instance="{target}"}}[20s])')
    refused = alerting.value(SHARE_20S.format(i=target))
    numbers = f"offered {offered:.0f}/s, capacity {capacity:.0f}/s, goodput {goodput:.0f}/s, refused {refused:.1%}"
    assert offered >= 1.8 * capacity, numbers  # it was an overload of about twice the capacity
    assert goodput >= 0.9 * capacity, numbers  # served at capacity, within the deadline: no collapse
    assert refused >= 0.3, numbers  # the excess shed (about 1 - capacity/offered)

    after = daemon.scrape()
    assert _delta(after, before, 'chaosd_tasks_rejected_total{reason="shed"}') > 0  # over the admission limit…
    assert _delta(after, before, 'chaosd_tasks_rejected_total{reason="queue_full"}') == 0  # …never a full queue
    assert _delta(after, before, "chaosd_overloads_total") == 1, "one overload, one alarm"
    assert _delta(after, before, "chaosd_collapses_total") == 0
    assert _never(alerting, target, ("ChaosdPipelineCollapsed",), injected) == [], numbers
    print(f"\noverload: Overloaded at the webhook {fired_after:.1f} s after the spike; {numbers}")


def test_negative_control_the_same_stall_unseen_is_judged_an_overload(tmp_path: Path) -> None:
    """Stall detection out of reach (a tick would have to be an hour late): the detector judges the pause's
    readings (busy time and the queue head's age inflated by it, a catch-up burst of arrivals) and raises an
    overload. What keeps the real test quiet is the stall state, not a pause too short to matter."""
    daemon = Daemon(tmp_path, env={"CHAOSD_DETECTOR__STALL": "3600"})
    try:
        daemon.wait_for_baseline()
        wait_for(lambda: _status(daemon)["detector"] == "healthy", 30, "a healthy detector")
        before = daemon.scrape()

        def alarmed() -> bool:
            return daemon.scrape()["chaosd_overloads_total"] > before["chaosd_overloads_total"]

        started = time.monotonic()
        _stall(daemon.proc.pid, until=alarmed)  # the same stall, ended at the alarm: the rest would add nothing
        wait_for(alarmed, 15, "the unseen stall to raise an overload alarm", lambda: str(_status(daemon)["detector"]))
        alarmed_after = time.monotonic() - started
        after = daemon.scrape()
        assert _delta(after, before, "chaosd_stalls_total") == 0
        share = _delta(after, before, REFUSED) / _delta(after, before, OFFERED)
        print(
            f"\nnegative control: an overload alarm {alarmed_after:.1f} s into the stall, no stall counted; "
            f"refused {share:.1%} of offered during it"
        )
    finally:
        daemon.kill()
