"""A real daemon's GET /metrics serves the pipeline as its last telemetry tick left it: back-to-back scrapes see at
most one pipeline state per tick, however many they are."""

from __future__ import annotations

import http.client
import os
import time
from pathlib import Path

from daemon_harness import ROOT, Daemon
from prometheus_client.parser import text_string_to_metric_families

SCRAPES = 60
TICK = 0.1  # telemetry.tick's default
WINDOW = 0.5  # the back-to-back scrapes last at least this long: several ticks, however fast a scrape is
DEADLINE = 30.0  # for the pipeline's first offers to show in /metrics
# The tick render taken out, as the route was before: every scrape renders the pipeline now.
PER_SCRAPE = (
    "from chaosd.exporters.metrics import MetricsRegistry\nMetricsRegistry.follow = lambda self, telemetry: None\n"
)


def _offered(body: bytes) -> float:
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.name == "chaosd_tasks_total" and sample.labels == {"outcome": "offered"}:
                return sample.value
    raise AssertionError("no chaosd_tasks_total{outcome=offered}")


def _states_seen(tmp: Path, env: dict[str, str | None]) -> tuple[int, float, int]:
    """Distinct pipeline states (offered counts) in back-to-back scrapes (at least SCRAPES of them, over at least
    WINDOW seconds, once the pipeline's offers show), the wall seconds they took, and how many there were."""
    daemon = Daemon(tmp, env={"CHAOSD_LOAD__RATE": "1000", "CHAOSD_WORKERS__COUNT": "12", **env})
    try:
        host, port = daemon.base.removeprefix("http://").rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=10)

        def scrape() -> float:
            conn.request("GET", "/metrics")
            resp = conn.getresponse()
            assert resp.status == 200
            return _offered(resp.read())

        deadline = time.monotonic() + DEADLINE
        while scrape() == 0.0:  # a tick has rendered the running pipeline: the window starts there
            assert time.monotonic() < deadline, "no offer showed in /metrics"
        offered = []
        started = time.monotonic()
        while len(offered) < SCRAPES or time.monotonic() - started < WINDOW:
            offered.append(scrape())
        took = time.monotonic() - started
        conn.close()
        assert daemon.terminate() == 0
    finally:
        daemon.kill()
    assert offered == sorted(offered) and offered[-1] > offered[0]  # the pipeline ran, and the scrapes followed it
    return len(set(offered)), took, len(offered)


def test_back_to_back_scrapes_see_one_pipeline_state_a_tick(tmp_path: Path) -> None:
    states, took, scrapes = _states_seen(tmp_path, {})
    # 1,000 tasks/s arrive, a few between any two scrapes; the scrapes still serve one state per tick that passed.
    assert states <= took / TICK + 2, (states, took)
    assert states < scrapes / 3, (states, took, scrapes)
    assert states >= 2, (states, took)  # the window spans ticks: the scrapes did follow the pipeline


def test_negative_control_rendering_at_each_scrape_sees_a_new_state_nearly_every_time(tmp_path: Path) -> None:
    patch = tmp_path / "patch"
    patch.mkdir()
    (patch / "sitecustomize.py").write_text(PER_SCRAPE)  # imported by the daemon's interpreter at start-up
    path = os.pathsep.join([str(patch), str(ROOT), os.environ.get("PYTHONPATH", "")])
    states, took, _ = _states_seen(tmp_path, {"PYTHONPATH": path})
    assert states > 2 * (took / TICK + 2), (states, took)
