"""The dashboards' fault annotation, as Grafana draws it: a real daemon scraped by the real Prometheus, one fault
injected, the annotation's query run over the fault's time as Grafana runs it (a range query at the annotation's
step), and its points grouped into regions by Grafana's rule. The region spans the fault, from its injection to its
end, as the daemon's own record of the fault times it."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from typing import Any

import pytest
from daemon_harness import ROOT, AlertStack, Daemon, free_port, wait_for
from needs import program
from test_dashboards_static import panel_queries

pytestmark = pytest.mark.slow  # about 15 s of real time: Prometheus's first scrape, the fault, the scrapes after it

program("prometheus")
program("prometheus-alertmanager", "alertmanager")

TTL = 3.0  # seconds the fault lasts
AFTER = 3.0  # seconds of scrapes after the fault's end in the query's time range
STEP = 1.0  # the test stack scrapes every second; a dashboard's step is its Prometheus's scrape interval
INJECTION_POINTS = 'changes(chaosd_faults_injected_total{instance=~".*"}[30s]) > 0'  # the annotation of old


def regions(prom: str, expr: str, start: float, end: float) -> dict[tuple[str, str], list[tuple[float, float]]]:
    """(instance, action) → [(from, to)]: Grafana's regions of a Prometheus annotation (its processEvents): the
    points above 0, each within a step of the last one joined to it."""
    query = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": STEP})
    with urllib.request.urlopen(f"{prom}/api/v1/query_range?{query}", timeout=10) as resp:
        body = json.loads(resp.read())
    assert body["status"] == "success", body
    out: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for series in body["data"]["result"]:
        key = (series["metric"].get("instance", ""), series["metric"].get("action", ""))
        spans: list[tuple[float, float]] = []
        for t, value in series["values"]:
            if float(value) <= 0:
                continue
            if spans and spans[-1][1] + STEP >= t:
                spans[-1] = (spans[-1][0], t)
            else:
                spans.append((t, t))
        if spans:
            out[key] = spans
    return out


def _fault(daemon: Daemon, fault_id: int) -> dict[str, Any]:
    return dict(daemon.get(f"/api/v1/faults/{fault_id}")[1])


def test_a_fault_is_one_region_from_its_injection_to_its_end(tmp_path: Any) -> None:
    annotation = dict(panel_queries(ROOT / "dashboards" / "chaosd-faults.json"))["annotation: Faults active"]
    port = free_port()
    target = f"127.0.0.1:{port}"
    stack = AlertStack(tmp_path / "stack", [target], ROOT / "config" / "prometheus" / "rules.yml")
    daemon = Daemon(tmp_path, env={"CHAOSD_API__PORT": str(port)})
    try:
        stack.wait_scraped(target)
        started = float(daemon.get("/api/v1/status")[1]["started_unix"])
        status, fault = daemon.request("POST", "/api/v1/faults", {"action": "slow_agent", "ttl": TTL})
        assert status == 201, fault
        wait_for(lambda: _fault(daemon, fault["id"])["reverted_at"] is not None, 30, "the fault to end")
        record = _fault(daemon, fault["id"])
        injected, ended = started + record["injected_at"], started + record["reverted_at"]
        # Prometheus has scraped the daemon for AFTER seconds past the fault's end.
        scraped = f'timestamp(chaosd_faults_active{{instance="{target}", action="slow_agent"}})'
        wait_for(lambda: stack.value(scraped) >= ended + AFTER, 30, f"scrapes {AFTER} s past the fault")
        window = (injected - 20, stack.value(scraped))
        shown = regions(stack.prom, annotation, *window)
        old = regions(stack.prom, INJECTION_POINTS, *window)
    finally:
        daemon.terminate()
        daemon.kill()
        stack.close()
    assert list(shown) == [(target, "slow_agent")], shown  # one region, for that fault only
    ((start, end),) = shown[(target, "slow_agent")]
    # Each end within a scrape and a telemetry tick (plus a step of the query) of the fault's own record.
    assert injected <= start <= injected + 2 * STEP + 0.5, (start - injected, record)
    assert ended - STEP <= end <= ended + 2 * STEP + 0.5, (end - ended, record)
    assert TTL - 2 * STEP <= end - start <= TTL + STEP, end - start
    # The negative control: the injection points of old, grouped the same way, start with the fault but outlast it
    # (the counter's change stays in its 30 s window), to the end of the query.
    ((old_start, old_end),) = old[(target, "slow_agent")]
    assert injected <= old_start <= injected + 2 * STEP + 0.5, (old_start - injected, record)
    assert old_end >= ended + AFTER - STEP, (old_end - ended, record)
