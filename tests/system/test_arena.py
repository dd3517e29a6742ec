"""The Arena: the daemon's own page, driven in a real Chromium against a real daemon on loopback."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from daemon_harness import ROOT, TOKEN, Daemon, wait_for
from playwright.sync_api import Browser, Page, Route, expect, sync_playwright

from chaosd.admission.detector import DetectorState
from chaosd.arena.postmortem import embed_json, render_html
from chaosd.arena.series import Series
from chaosd.arena.vocabulary import ACTION_VERBS, ARES_ACTIONS, DETECTOR_TONES, vocabulary, vocabulary_module
from chaosd.cli.main import main as cli_main
from chaosd.faults.catalogue import CATALOGUE

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Recoveries confirmed after 1 s (3 s by default), so the tests see verdicts quickly, and survival slots can be as short
# as 3 s: a 1 s fault, then the confirmation and a 1 s margin.
ENV = {"CHAOSD_RECOVERY__CONFIRM": "1"}


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=shutil.which("chromium"), args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """Ready to serve, not yet to judge a recovery: :func:`_settled` waits for its baseline where a test needs it."""
    started = Daemon(tmp_path_factory.mktemp("arena"), env=ENV)
    try:
        yield started
    finally:
        started.kill()


class _Arena:
    """One tab on the page, with what went wrong in it (script errors, console errors, CSP violations).

    ``clock``: Playwright's clock replaces the page's timers before it loads; time flows as usual until
    :meth:`next_round` moves it on.
    """

    def __init__(
        self,
        browser: Browser,
        base: str,
        token: str | None = TOKEN,
        rows: int = 17,
        viewport: tuple[int, int] = (1400, 1000),
        clock: bool = False,
    ) -> None:
        self.page: Page = browser.new_page(viewport={"width": viewport[0], "height": viewport[1]})
        self.errors: list[str] = []
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        if clock:
            self.page.clock.install()
        self.page.goto(base + "/arena")
        self.live(rows)
        if token is not None:
            self.page.fill("#token", token)
            self.page.click("#token-save")

    def live(self, rows: int = 17) -> None:
        """Until the page follows the daemon's stream and shows a row per fault that applies."""
        expect(self.page.locator("#connection")).to_have_text("● live", timeout=10_000)
        expect(self.page.locator(".fault-row")).to_have_count(rows)

    def next_round(self) -> None:
        """The page's polls due within a second run now rather than when their second is up (a ``clock`` tab)."""
        self.page.clock.fast_forward(1000)

    def button(self, name: str) -> Any:
        return self.page.get_by_role("button", name=name, exact=True)

    def log(self) -> Any:
        return self.page.locator("#log")

    def close(self) -> None:
        self.page.close()


def _used(tab: _Arena) -> Iterator[_Arena]:
    """``tab`` live for one test, which fails if anything went wrong in the page meanwhile."""
    tab.live()
    yield tab
    errors = list(tab.errors)
    tab.errors.clear()
    assert errors == []


@pytest.fixture(scope="module")
def shared_tab(browser: Browser, daemon: Daemon) -> Iterator[_Arena]:
    tab = _Arena(browser, daemon.base)
    yield tab
    tab.close()


@pytest.fixture
def arena(shared_tab: _Arena) -> Iterator[_Arena]:
    """The module's tab on the daemon, for the tests that check what the page shows of the daemon now, not of a page
    freshly loaded (one replays the recent events too, so a fresh tab did not hide an earlier test's log lines)."""
    yield from _used(shared_tab)


@pytest.fixture(scope="module")
def clock_tab(browser: Browser, daemon: Daemon) -> Iterator[_Arena]:
    tab = _Arena(browser, daemon.base, clock=True)
    yield tab
    tab.close()


@pytest.fixture
def fed(clock_tab: _Arena) -> Iterator[_Arena]:
    """A tab for the tests that feed the page statuses through a route: :meth:`_Arena.next_round` has it poll the
    status at once after each change."""
    yield from _used(clock_tab)


def _faults(daemon: Daemon) -> list[dict[str, Any]]:
    code, body = daemon.get("/api/v1/faults")
    assert code == 200
    faults: list[dict[str, Any]] = body["faults"]
    return faults


def _pm_charts(report: dict[str, Any]) -> tuple[int, int]:
    """The post-mortem's charts and lines: depth, dQ/dt, p95, callers/attempts/throughput/goodput/wasted, and aimd's
    factor."""
    return (5, 9) if report["throttle"]["policy"] == "aimd" else (4, 8)


def _settled(daemon: Daemon) -> None:
    """A baseline learnt, no fault active and none still waiting for its verdict: the next one starts from a steady
    state and can be judged against it."""
    daemon.wait_for_baseline()
    wait_for(lambda: all(f["outcome"] not in ("active", "recovering") for f in _faults(daemon)), 60, "verdicts")


def test_page_is_served_with_a_strict_policy(daemon: Daemon) -> None:
    for path in ("/", "/arena", "/arena/static/main.js", "/arena/static/vocabulary.js", "/arena/static/arena.css"):
        with urllib.request.urlopen(daemon.base + path, timeout=10) as resp:
            assert resp.status == 200
            assert "script-src 'self'" in resp.headers["Content-Security-Policy"]
            assert "frame-ancestors 'none'" in resp.headers["Content-Security-Policy"]
            assert resp.headers["X-Content-Type-Options"] == "nosniff"
    assert daemon.get("/arena/static/..%2F__init__.py")[0] == 404
    assert daemon.get("/api/v1/timeseries?points=5")[0] == 400  # no query parameters
    code, series = daemon.get("/api/v1/timeseries")
    assert code == 200 and 0 < len(series["points"]) <= 600
    assert {"t", "queue_depth", "queue_slope", "sojourn_p95", "throughput", "arrival_rate", "throttle_factor"} <= set(
        series["points"][-1]
    )


def test_a_wrong_token_is_refused_visibly_and_the_lever_blocks_the_buttons(arena: _Arena, daemon: Daemon) -> None:
    page = arena.page
    page.fill("#token", "not-the-token-at-all")
    page.click("#token-save")
    try:
        count = len(_faults(daemon))
        arena.button("Kill agent").click()
        note = page.locator('.fault-row[data-action="kill_agent"] .note')
        expect(note).to_have_text("✗ missing or wrong bearer token (Authorization)")
        assert len(_faults(daemon)) == count
        page.fill("#token", TOKEN)
        page.click("#token-save")
        arena.button("Pull lever").click()
        for name in ("Kill leader", "Remove node", "Pool exhaustion", "Start survival", "Run scenario"):
            expect(arena.button(name)).to_be_disabled(timeout=5_000)
        expect(page.locator("#lever-top")).to_have_text("pulled (pulled from the arena)")
        assert daemon.get("/api/v1/status")[1]["lever"] == "pulled from the arena"
        arena.button("Release lever").click()
        for name in ("Kill leader", "Remove node", "Pool exhaustion", "Start survival", "Run scenario"):
            expect(arena.button(name)).to_be_enabled(timeout=5_000)
        assert daemon.get("/api/v1/status")[1]["lever"] is None
        assert len(_faults(daemon)) == count
        # Only the refusal reached the console (Chromium logs the 401 itself).
        assert all("401" in e for e in arena.errors), arena.errors
        arena.errors.clear()
    finally:  # the shared tab as the next test expects it, whatever failed here
        page.fill("#token", TOKEN)
        page.click("#token-save")
        daemon.request("DELETE", "/api/v1/lever")


def test_the_scenario_picker_offers_what_the_daemon_can_run(arena: _Arena, daemon: Daemon) -> None:
    names = daemon.get("/api/v1/scenarios")[1]["scenarios"]
    assert "leader_assassination" in names
    options = arena.page.locator("#scenario-name option")
    expect(options).to_have_count(len(names))
    assert options.all_text_contents() == names


def test_markup_in_an_event_is_shown_as_text(arena: _Arena, daemon: Daemon) -> None:
    name = "<script>window.pwned=1</script><img src=x onerror=window.pwned=2>"
    code, window = daemon.request("POST", "/api/v1/windows", {"name": name})
    assert code == 201
    line = arena.page.locator('#log li[data-kind="window"]').filter(has_text=name)
    expect(line).to_have_count(1, timeout=5_000)
    assert name in (line.text_content() or "")
    assert arena.page.locator("#log script, #log img").count() == 0
    assert arena.page.evaluate("window.pwned") is None
    daemon.request("DELETE", f"/api/v1/windows/{window['id']}")


def test_every_control_is_named_and_reachable_by_keyboard(arena: _Arena) -> None:
    page = arena.page
    snapshot = page.locator("body").aria_snapshot()
    controls = [
        line.strip()
        for line in snapshot.splitlines()
        if re.match(r"\s*- (button|combobox|spinbutton|textbox|listbox|checkbox)\b", line)
    ]
    assert len([c for c in controls if c.startswith("- button")]) >= 17 + 6
    unnamed = [c for c in controls if not re.match(r'- \w+ "[^"]+"', c)]
    assert unnamed == []
    # Tab walks through them all: no control needs a mouse (up to 200 presses; it stops once it has reached them).
    wanted = {"Kill leader", "Pool exhaustion", "Pull lever", "Start survival", "Run scenario", "token"}
    reached: set[str] = set()
    for _ in range(200):
        page.keyboard.press("Tab")
        reached.add(page.evaluate("document.activeElement.textContent.trim() || document.activeElement.id"))
        if wanted <= reached:
            break
    assert wanted <= reached, wanted - reached
    # Enter on a focused button acts like a click.
    page.locator('button[data-action="resume_agent"]').focus()
    page.keyboard.press("Enter")
    note = page.locator('.fault-row[data-action="resume_agent"] .note')
    expect(note).to_have_text(re.compile(r"^(✓ done|✗ .+)$"), timeout=5_000)
    if "✗" in (note.text_content() or ""):  # nothing was paused: refused (409), and Chromium logs the refusal
        arena.errors[:] = [e for e in arena.errors if "409" not in e]


def test_the_first_screen_shows_the_ring_the_charts_and_the_dag(browser: Browser, daemon: Daemon) -> None:
    tab = _Arena(browser, daemon.base, viewport=(1440, 900))
    try:
        page = tab.page
        expect(page.locator("#charts svg.chart")).to_have_count(5, timeout=10_000)  # four, and admission's
        for selector in ("svg.ring", "#charts", "#charts svg.chart >> nth=0", "#dag"):
            box = page.locator(selector).first.bounding_box()
            assert box is not None and box["height"] > 0 and box["y"] < 900, (selector, box)
        # Every fault applies to the default DAG: memory_corrupt has its memory stage, mcp_disconnect its mcp.
        for action in ("memory_corrupt", "mcp_disconnect", "remove_edge", "tool_timeout", "llm_failure"):
            expect(page.locator(f'button[data-action="{action}"]')).to_have_count(1)
        expect(page.locator("#skipped-actions")).to_have_count(0)
        # The log tells narratives; the score's lines and aimd's steps wait behind their unticked boxes.
        for group in ("score", "throttle steps"):
            expect(page.locator(f'#log-filter input[data-group="{group}"]')).not_to_be_checked()
        expect(page.locator('#log-filter input[data-group="faults"]')).to_be_checked()
        expect(page.locator("#log")).to_have_class(re.compile(r"\bhide-score\b.*\bhide-throttlesteps\b"))
        assert tab.errors == []
    finally:
        tab.close()


def test_the_ring_is_coloured_by_the_grade(fed: _Arena) -> None:
    page = fed.page
    forced: dict[str, Any] = {}

    def rewrite(route: Route) -> None:
        response = route.fetch()
        body = response.json()
        body["score"] = {**body["score"], **forced}
        route.fulfill(response=response, json=body)

    page.route("**/api/v1/status", rewrite)
    arc = page.locator("header svg.ring .ring-arc")
    try:
        for grade, total, colour in (("A+", 97.0, "green"), ("F", 31.0, "red"), ("C", 72.0, "amber")):
            forced.update(grade=grade, total=total)
            fed.next_round()
            expect(page.locator("header svg.ring")).to_have_attribute("data-grade", grade, timeout=5_000)
            r, g, b = _rgb(arc.evaluate("a => getComputedStyle(a).stroke"))
            if colour == "green":
                assert g > r and g > b, (grade, r, g, b)
            elif colour == "red":
                assert _is_red(f"rgb({r},{g},{b})"), (grade, r, g, b)
            else:
                assert r > b and g > b and not _is_red(f"rgb({r},{g},{b})"), (grade, r, g, b)
    finally:
        # A poll's handler may be mid-fetch: wait for it, or its late fulfil fails whatever the browser does next.
        page.unroute_all(behavior="wait")


ONE_STAGE = """
[[stages]]
name = "work"
kind = "compute"
service = { distribution = "exponential", mean = 0.002 }
"""


def test_only_the_faults_that_apply_to_the_dag_get_a_button(browser: Browser, tmp_path: Path) -> None:
    config = tmp_path / "one-stage.toml"
    config.write_text(ONE_STAGE)
    env = {**ENV, "CHAOSD_API__PORT": str(_free_port())}
    d = Daemon(tmp_path, env=env, config=config)
    try:
        assert d.get("/arena/stages") == (200, {"stages": {"work": "compute"}})
        # No memory, mcp, tool or llm stage and no edge: 12 of the 17 actions apply.
        tab = _Arena(browser, d.base, rows=12)
        try:
            page = tab.page
            for action in ("memory_corrupt", "mcp_disconnect", "tool_timeout", "llm_failure", "remove_edge"):
                expect(page.locator(f'button[data-action="{action}"]')).to_have_count(0)
                expect(page.locator(f'#survival-actions option[value="{action}"]')).to_have_count(0)
            for action in ("kill_leader", "remove_node", "latency_jitter", "load_spike"):
                expect(page.locator(f'button[data-action="{action}"]')).to_have_count(1)
            expect(page.locator("#skipped-actions")).to_contain_text("memory_corrupt (needs a memory stage)")
            assert tab.errors == []
        finally:
            tab.close()
    finally:
        d.kill()


def test_the_log_tells_each_state_change_and_a_run_of_throttle_steps_on_one_line(arena: _Arena) -> None:
    """The page's own log module, fed a story: aimd's steps become one line per run; capacity's are rare."""
    lines = arena.page.evaluate(
        """async () => {
      const { EventLog } = await import("/arena/static/log.js");
      const log = new EventLog(document.createElement("ol"), document.createElement("fieldset"));
      const ev = (id, kind, data) => ({ id, kind, data: { t: id, ...data } });
      log.add([
        ev(1, "detector", { old: "healthy", new: "overload", reason: "shedding" }),
        ev(2, "throttle", { action: "decrease", factor: 0.5, limit: 100 }),
        ev(3, "throttle", { action: "decrease", factor: 0.25, limit: 100 }),
      ]);
      log.add([
        ev(4, "score", { total: 80, grade: "B" }),
        ev(5, "throttle", { action: "decrease", factor: 0.1, limit: 100 }),
        ev(6, "detector", { old: "overload", new: "collapsed", reason: "goodput_collapse" }),
        ev(7, "detector", { old: "collapsed", new: "stall", reason: "tick 312 ms late" }),
        ev(8, "throttle", { action: "increase", factor: 0.15, limit: 100 }),
        ev(9, "throttle", { action: "increase", factor: 0.2, limit: 100 }),
        ev(10, "throttle", { action: "standing", factor: 1, limit: 42 }),
        ev(11, "detector", { old: "healthy", new: "failing", reason: "tasks_failing" }),
      ]);
      return [...log.list.children].map((li) => [li.dataset.id, li.className, li.textContent]);
    }"""
    )
    assert [(i, cls) for i, cls, _ in lines] == [
        ("11", "ev bad"),
        ("10", "ev warn"),
        ("9", "ev info"),
        ("7", "ev stall"),
        ("6", "ev bad"),
        ("5", "ev warn"),
        ("4", "ev info"),
        ("1", "ev warn"),
    ]
    text = {i: t for i, _, t in lines}
    assert text["5"].endswith("⇅ throttle down 3 steps: producers at 10 %")
    assert text["9"].endswith("⇅ throttle up 2 steps: producers at 20 % (from 10 %)")
    assert "stall: the daemon's process was paused (its event loop ran 312 ms late)" in text["7"]
    assert "collapse" in text["6"] and "overload: more offered than served" in text["1"]
    assert "at most 42 tasks may wait" in text["10"]
    assert "✗ failing: tasks end failed, late or degraded while the queue is short (healthy → failing)" in text["11"]


def test_the_log_tells_a_retry_storm_its_end_and_a_pushed_callers_policy(arena: _Arena) -> None:
    """The page's own log module, fed a storm's story and a policy pushed at run time (the ``clients`` event)."""
    lines = arena.page.evaluate(
        """async () => {
      const { EventLog } = await import("/arena/static/log.js");
      const log = new EventLog(document.createElement("ol"), document.createElement("fieldset"));
      const ev = (id, kind, data) => ({ id, kind, data: { t: id, ...data } });
      const policy = { timeout: 0.5, retries: 3, retry_on: ["timeout", "refused"], budget: null, patience: null,
                       drop_expired: false, retry_after: false };
      log.add([
        ev(1, "clients", { clients: policy, changed: ["retries", "timeout"] }),
        ev(2, "detector", { old: "overload", new: "metastable", reason: "retry_storm" }),
        ev(3, "clients", { clients: { ...policy, retries: 0, budget: { ratio: 0.1 }, drop_expired: true },
                           changed: ["budget", "drop_expired", "retries"] }),
        ev(4, "detector", { old: "metastable", new: "recovering", reason: "overload cleared" }),
        ev(5, "clients", { clients: policy, changed: [] }),
      ]);
      return [...log.list.children].map((li) => [li.dataset.id, li.className, li.dataset.group, li.textContent]);
    }"""
    )
    assert [(i, cls, group) for i, cls, group, _ in lines] == [
        ("5", "ev info", "callers"),
        ("4", "ev info", "detector"),
        ("3", "ev info", "callers"),
        ("2", "ev bad", "detector"),
        ("1", "ev info", "callers"),
    ]
    text = {i: t for i, _, _, t in lines}
    assert text["2"].endswith(
        "✗ retry storm (metastable): callers retrying: most work done is for callers who already left "
        "(overload → metastable)"
    )
    assert text["4"].endswith("↺ retry storm over, recovering: the overload cleared (metastable → recovering)")
    assert text["1"].endswith(
        "⚙ callers' policy pushed (changed retries, timeout): wait 500 ms, 3 retries on timeout/refused"
    )
    assert text["3"].endswith(
        "⚙ callers' policy pushed (changed budget, drop_expired, retries): wait 500 ms, no retries, budget 10 %, "
        "expired work dropped"
    )
    assert text["5"].endswith("(nothing changed): wait 500 ms, 3 retries on timeout/refused")
    # The callers' events have a check box of their own, ticked.
    expect(arena.page.locator('#log-filter input[data-group="callers"]')).to_be_checked()


def test_the_post_mortem_file_opens_offline_with_its_charts(browser: Browser, tmp_path: Path) -> None:
    report = tmp_path / "la.json"
    run = [sys.executable, "-m", "chaosd", "run", "leader_assassination", "--report", str(report), "--quiet"]
    subprocess.run(run, cwd=ROOT, check=True, timeout=120)
    data = json.loads(report.read_text())
    data["scenario"] = "</script><script>window.pwned=1</script><!--<script>"  # must stay text
    report.write_text(json.dumps(data))
    out = tmp_path / "pm.html"
    assert cli_main(["report", str(report), "--html", "--out", str(out)]) == 0
    html = out.read_text()
    block = html.split('<script type="application/json" id="report-data">')[1].split("</script>")[0]
    assert "<" not in block and json.loads(block)["scenario"] == data["scenario"]
    context = browser.new_context(offline=True)
    page = context.new_page()
    errors: list[str] = []
    requests: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("request", lambda r: requests.append(r.url))
    try:
        page.goto(out.as_uri())
        charts, count = _pm_charts(data)
        lines = page.locator("svg.chart path.line")
        expect(lines).to_have_count(count)
        for i in range(count):
            expect(lines.nth(i)).to_have_attribute("d", re.compile(r"^M[\d.]+ [\d.]+(L[\d.]+ [\d.]+){10,}$"))
        episodes = data["collapse"]["episodes"]
        expect(page.locator("svg.chart rect.band")).to_have_count(charts * (len(data["faults"]) + len(episodes)))
        for kind in ("overload", "collapse", "failing"):  # each alarm in its colour: overload amber, the others red
            shaded = charts * sum(1 for e in episodes if e["kind"] == kind)
            expect(page.locator(f"svg.chart rect.band.{kind}")).to_have_count(shaded)
        expect(page.locator(".pm-admission")).to_have_text(re.compile(rf"^{data['throttle']['policy']}: "))
        expect(page.locator(".pm-verdict")).to_have_text(f"pass: {data['verdict']['reason']}")
        expect(page.locator(".pm-detector")).to_have_text(
            re.compile(r"^\d+ alarms?, \d+ collapsed, \d+ stalls?; ended ")
        )
        expect(page.locator("#pm-faults tbody tr")).to_have_count(len(data["faults"]))
        # Readable axis labels: at least 10 CSS pixels once the chart is scaled to its width.
        sizes = page.locator("svg.chart text.axis").evaluate_all(
            """ts => ts.map(t => parseFloat(getComputedStyle(t).fontSize)
                 * t.ownerSVGElement.getBoundingClientRect().width / t.ownerSVGElement.viewBox.baseVal.width)"""
        )
        assert sizes and min(sizes) >= 10, sizes
        expect(page.locator('svg.chart[data-chart="queue_slope"] path.line')).to_have_attribute("d", re.compile(r"^M"))
        # One summary row per action: its faults, how many recovered, mean and p95 recovery.
        actions = sorted({f["action"] for f in data["faults"]})
        summary = page.locator("#pm-actions tbody tr")
        expect(summary).to_have_count(len(actions))
        assert sorted(summary.locator("td:first-child").all_text_contents()) == actions
        expect(page.locator("#pm-actions thead")).to_have_text("actionfaultsrecoveredmean recoveryp95 recovery")
        # Incidents where they group several faults, and those nobody injected; no expectations table when there
        # are none.
        grouped = [i for i in data.get("incidents", []) if len(i["faults"]) > 1 or i.get("unplanned")]
        expect(page.locator("#pm-incidents tbody tr")).to_have_count(len(grouped))
        if not data.get("expectations"):
            expect(page.locator("#pm-expectations")).to_have_count(0)
        expect(page.locator("svg.ring")).to_have_attribute("data-grade", data["score"]["grade"])
        expect(page.locator("h2")).to_contain_text(data["scenario"])
        assert page.evaluate("window.pwned") is None
        assert errors == [] and requests == [out.as_uri()]
    finally:
        context.close()


def _fresh_page(browser: Browser, base: str) -> tuple[Page, list[str]]:
    """A tab not yet on the page (its routes can be set before the first request), and what went wrong in it."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(f"pageerror: {exc}"))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    return page, errors


def test_a_failed_control_request_shows_an_error_on_the_page(browser: Browser, daemon: Daemon) -> None:
    page, errors = _fresh_page(browser, daemon.base)
    try:
        page.route("**/api/v1/scenarios", lambda route: route.fulfill(status=500, json={"error": {"message": "x"}}))
        page.route(
            "**/api/v1/faults", lambda route: route.abort() if route.request.method == "POST" else route.fallback()
        )
        page.goto(daemon.base + "/arena")
        expect(page.locator("#connection")).to_have_text("● live", timeout=10_000)
        note = page.locator("#scenario-list-note")
        expect(note).to_have_text("✗ the scenarios could not be listed (/api/v1/scenarios: HTTP 500)")
        expect(note).to_have_class(re.compile(r"\berror\b"))
        expect(page.locator("#scenario-name option")).to_have_count(0)
        # A change whose request never reaches the daemon says so beside its button.
        page.fill("#token", TOKEN)
        page.click("#token-save")
        page.get_by_role("button", name="Slow agent", exact=True).click()
        expect(page.locator('.fault-row[data-action="slow_agent"] .note')).to_have_text("✗ the daemon did not answer")
        # Told on the page, not left as an unhandled rejection (Chromium itself logs the failed loads).
        assert not [e for e in errors if "500" not in e and "ERR_FAILED" not in e], errors
    finally:
        page.close()


def test_a_rendering_error_is_shown_in_the_problems_banner_until_a_round_succeeds(
    browser: Browser, daemon: Daemon
) -> None:
    page, errors = _fresh_page(browser, daemon.base)
    try:
        broken = {"on": True}
        tally = {"injected": 0, "recovered": 0, "failed": 0, "mean_recovery_s": None}

        def answer(route: Route) -> None:
            if not broken["on"]:
                route.fallback()
                return
            route.fulfill(json={"step_s": 1.0, "window_s": 600.0, "points": None, "faults": tally})

        page.route("**/api/v1/timeseries", answer)
        page.clock.install()  # time flows as usual; fast_forward below runs the charts' next round at once
        page.goto(daemon.base + "/arena")
        banner = page.locator("#problems")
        expect(banner).to_be_visible(timeout=10_000)
        expect(banner.locator('li[data-part="charts"]')).to_have_text(re.compile(r"^charts: .*null"))
        assert any("chaosd arena: charts:" in e for e in errors), errors
        broken["on"] = False
        page.clock.fast_forward(2000)  # the charts' poll interval
        expect(banner).to_be_hidden(timeout=10_000)
        expect(page.locator('#charts svg.chart[data-chart="queue_depth"] path.line')).to_have_attribute(
            "d", re.compile(r"^M"), timeout=10_000
        )
    finally:
        page.close()


# Each chart as drawn: its id, title, and per series its key, stroke colour, legend label and legend colour.
_CHART_FACES = """svgs => svgs.map(s => {
  const legend = [...s.closest("figure").querySelectorAll(".legend li")];
  return {
    id: s.dataset.chart,
    title: s.getAttribute("aria-label"),
    series: [...s.querySelectorAll("path.line")].map((p, i) => [
      p.dataset.series,
      getComputedStyle(p).stroke,
      legend[i].textContent,
      getComputedStyle(legend[i], "::before").color,
    ]),
  };
})"""


def test_the_live_page_and_the_post_mortem_draw_the_same_charts(
    arena: _Arena, browser: Browser, daemon: Daemon, tmp_path: Path
) -> None:
    page = arena.page
    # Run alone, the module's daemon may not have a timeline point yet: the post-mortem needs one.
    wait_for(lambda: bool(daemon.get("/api/v1/report")[1]["timeline"]), 15, "a first timeline point")
    expect(page.locator("#charts svg.chart")).to_have_count(5, timeout=10_000)
    live = page.locator("#charts svg.chart").evaluate_all(_CHART_FACES)
    code, report = daemon.get("/api/v1/report")
    assert code == 200 and report["timeline"]
    out = tmp_path / "live.html"
    out.write_text(render_html(report, "the live run"), encoding="utf-8")
    pm = browser.new_page()
    try:
        pm.goto(out.as_uri())
        charts, _ = _pm_charts(report)
        expect(pm.locator("svg.chart")).to_have_count(charts)
        drawn = pm.locator("svg.chart").evaluate_all(_CHART_FACES)
    finally:
        pm.close()
    shared = ["queue_depth", "queue_slope", "sojourn_p95", "throughput"]
    assert [c["id"] for c in live][:4] == [c["id"] for c in drawn][:4] == shared
    if report["throttle"]["policy"] == "aimd":  # both draw aimd's factor; otherwise the live page's refusals only
        shared.append("throttle")
    by_id = {c["id"]: c for c in drawn}
    assert [c for c in live if c["id"] in shared] == [by_id[i] for i in shared]
    throughput = by_id["throughput"]["series"]
    assert [s[2] for s in throughput] == ["callers (offered)", "attempts", "throughput", "goodput", "wasted"]
    assert len({s[1] for s in throughput}) == 5  # each line its own colour, the legend's
    assert all(s[1] == s[3] for c in live for s in c["series"])


def test_report_command_refuses_a_missing_or_invalid_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["report", str(tmp_path / "missing.json"), "--html"]) == 2
    bad = tmp_path / "bad.json"
    bad.write_text('{"not": "a report"}')
    assert cli_main(["report", str(bad), "--html"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"chaosd: error: {tmp_path / 'missing.json'}: no such file",
        f"chaosd: error: {bad}: not a run report (no timeline list)",
    ]


def test_embedded_json_cannot_end_its_script_block() -> None:
    text = embed_json({"a": "</script><!--<script>&"})
    assert "<" not in text and ">" not in text and json.loads(text) == {"a": "</script><!--<script>&"}


def test_the_page_names_only_what_python_has() -> None:
    """The vocabulary the page imports names catalogue actions and detector states, every one of the states."""
    assert set(ARES_ACTIONS) <= set(CATALOGUE) and len(ARES_ACTIONS) == 13
    assert set(ACTION_VERBS) <= set(CATALOGUE)
    assert set(DETECTOR_TONES) == set(DetectorState)
    groups = vocabulary()["ACTION_GROUPS"]
    assert isinstance(groups, dict) and list(groups) == list(CATALOGUE)
    assert [a for a, g in groups.items() if g == "dependency"] == [a for a in CATALOGUE if a.startswith("dependency_")]


def test_the_vocabulary_module_and_its_declarations_name_the_same_constants() -> None:
    declared = (ROOT / "chaosd/arena/static/vocabulary.d.ts").read_text(encoding="utf-8")
    names = re.findall(r"^export const (\w+)", declared, re.MULTILINE)
    assert names == list(vocabulary()) == re.findall(r"^export const (\w+)", vocabulary_module(), re.MULTILINE)


def test_the_post_mortem_inlines_each_module_after_those_it_imports() -> None:
    """postmortem.js needs narrate.js (an unplanned incident's cause), which needs states.js and the vocabulary."""
    page = render_html({"timeline": []}, "empty")
    script = page.split('<script type="module">\n')[1]
    order = re.findall(r"^// --- (\S+)$", script, re.MULTILINE)
    assert order[-2:] == ["postmortem.js", "pm_entry.js"]
    for first, then in (("vocabulary.js", "states.js"), ("states.js", "narrate.js"), ("narrate.js", "postmortem.js")):
        assert order.index(first) < order.index(then)
    assert not re.search(r"^(import|export) ", script, re.MULTILINE)


def test_the_series_stays_bounded_however_long_the_daemon_runs() -> None:
    series = Series(tick_s=0.1)  # ten minutes at one point a second
    fields = dict.fromkeys(
        ("queue_slope", "sojourn_p95", "throughput", "arrival_rate", "admitted_rate", "goodput"), 1.0
    )
    for k in range(36_000):  # an hour of ticks
        series.add(SimpleNamespace(t=k / 10, queue_depth=k, **fields), 1.0, "healthy")  # type: ignore[arg-type]
    points = series.points()
    assert len(series) == 600 and points[-1]["queue_depth"] == 35_999  # the newest tick stands for its step
    assert points[-1]["t"] - points[0]["t"] == pytest.approx(599.0)  # one point per second, the newest of each


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_the_page_reconnects_after_a_restart_without_duplicate_lines(
    browser: Browser, tmp_path_factory: pytest.TempPathFactory
) -> None:
    tmp = tmp_path_factory.mktemp("arena-restart")
    env = {**ENV, "CHAOSD_API__PORT": str(_free_port())}
    first = Daemon(tmp, env=env)
    second: Daemon | None = None
    tab = None
    try:
        tab = _Arena(browser, first.base)
        log = tab.log()
        first.request("POST", "/api/v1/windows", {"name": "before-restart"})
        expect(log).to_contain_text("before-restart", timeout=5_000)
        first.terminate()
        expect(tab.page.locator("#connection")).to_have_text("reconnecting…", timeout=5_000)
        second = Daemon(tmp, env=env)
        expect(log).to_contain_text(f"run {first.run_id} ended, run {second.run_id} began", timeout=15_000)
        expect(tab.page.locator("#connection")).to_have_text("● live", timeout=10_000)
        second.request("POST", "/api/v1/windows", {"name": "after-restart"})
        expect(log).to_contain_text("after-restart", timeout=5_000)
        # Newest first: the new run's lines, the marker, the old run's lines; no id twice within a run.
        rows = tab.page.locator("#log li").evaluate_all("ls => ls.map(l => [l.dataset.kind, l.dataset.id])")
        marker = [i for i, (kind, _) in enumerate(rows) if kind == "marker"]
        assert len(marker) == 1
        for part in (rows[: marker[0]], rows[marker[0] + 1 :]):
            ids = [i for _, i in part if i]
            assert len(ids) == len(set(ids)) and ids
        assert tab.page.locator("#log li").filter(has_text="before-restart").count() == 1
        assert tab.page.locator("#log li").filter(has_text="after-restart").count() == 1
        # The run that ended is a post-mortem now, drawn by the same page code.
        tab.page.goto(f"{second.base}/arena#run={first.run_id}")
        _, count = _pm_charts(second.get(f"/api/v1/runs/{first.run_id}")[1]["report"])
        expect(tab.page.locator("#postmortem svg.chart path.line")).to_have_count(count, timeout=10_000)
        expect(tab.page.locator("#postmortem h2")).to_have_text(f"Post-mortem: run {first.run_id}")
    finally:
        if tab is not None:
            tab.close()
        first.kill()
        if second is not None:
            second.kill()


# --- the banner: what the detector says, in its own colour ------------------------------------------------

# The banner and the detector's cell as the page shows them, read in one go (no state change in between).
_BANNER_JS = """() => {
  const b = document.getElementById("banner");
  const d = document.getElementById("detector");
  return {state: b.dataset.state, cls: b.className, hidden: b.hidden, role: b.getAttribute("role"),
          text: b.textContent, bg: getComputedStyle(b).backgroundColor, detector: d.className,
          admission: document.getElementById("admission").textContent};
}"""


def _banner(page: Page) -> dict[str, Any]:
    shown: dict[str, Any] = page.evaluate(_BANNER_JS)
    return shown


def _rgb(colour: str) -> tuple[int, ...]:
    return tuple(int(v) for v in re.findall(r"\d+", colour)[:3])


def _is_red(colour: str) -> bool:
    r, g, b = _rgb(colour)
    return r > 2 * g and r > 2 * b


def _status(daemon: Daemon) -> dict[str, Any]:
    status: dict[str, Any] = daemon.get("/api/v1/status")[1]
    return status


def _wait_banner(page: Page, what: str, holds: Any, deadline_s: float = 15.0) -> dict[str, Any]:
    """The banner as it was when ``holds`` first held of it."""
    seen: list[dict[str, Any]] = []

    def check() -> bool:
        seen.append(_banner(page))
        return bool(holds(seen[-1]))

    wait_for(check, deadline_s, what, explain=lambda: str(seen[-1] if seen else None))
    return seen[-1]


def test_the_banner_tells_a_collapse_in_red_and_a_stall_never_so(fed: _Arena) -> None:
    """The same page, fed statuses it cannot get on demand from a healthy daemon (a negative control)."""
    page = fed.page
    forced: dict[str, Any] = {}

    def rewrite(route: Route) -> None:
        response = route.fetch()
        body = response.json()
        for key, value in forced.items():
            if isinstance(value, dict):
                body[key] = {**(body[key] or {}), **value}
            else:
                body[key] = value
        route.fulfill(response=response, json=body)

    def feed(**values: Any) -> None:
        forced.update(values)
        fed.next_round()

    page.route("**/api/v1/status", rewrite)
    try:
        telemetry = {"goodput": 12.0, "arrival_rate": 400.0, "lateness": 0.0}
        feed(detector="collapsed", telemetry=telemetry, admission={"capacity_per_s": 300.0})
        collapse = _wait_banner(page, "the collapse banner", lambda b: b["state"] == "collapsed")
        assert collapse["cls"] == "banner collapse" and collapse["role"] == "alert" and not collapse["hidden"]
        assert collapse["text"] == "⚠ Collapse — goodput 12/s of offered 400/s (measured capacity 300/s)"
        assert _is_red(collapse["bg"]) and "bad" in collapse["detector"].split()

        # A retry storm: attempts against callers, red as a collapse is, in a red of its own.
        storm = {"attempt_rate": 390.0, "arrival_rate": 100.0, "goodput": 0.0, "waste_rate": 98.0, "lateness": 0.0}
        feed(detector="metastable", telemetry=storm)
        shown = _wait_banner(page, "the retry storm banner", lambda b: b["state"] == "metastable")
        assert shown["cls"] == "banner metastable" and shown["role"] == "alert" and not shown["hidden"]
        assert shown["text"] == (
            "⚠ Retry storm — 390 attempts/s for 100 callers/s (×3.9 per caller), goodput 0.0/s, wasted 98/s: "
            "most work done is for callers who already left"
        )
        assert _is_red(shown["bg"]) and shown["bg"] != collapse["bg"] and "bad" in shown["detector"].split()

        # Failing: every task ending fails while the queue is short; red as a collapse is, in words of its own.
        failing = {"goodput": 0.0, "throughput": 48.0, "arrival_rate": 50.0, "lateness": 0.0}
        feed(detector="failing", telemetry=failing, admission={"capacity_per_s": 300.0})
        shown = _wait_banner(page, "the failing banner", lambda b: b["state"] == "failing")
        assert shown["cls"] == "banner failing" and shown["role"] == "alert" and not shown["hidden"]
        assert shown["text"] == (
            "✗ Failing — 100 % of the tasks ending are not good (goodput 0.0/s of 48/s ending, 50/s offered); "
            "the queue is short: the work fails, not the load, and admission is not cut"
        )
        assert _is_red(shown["bg"]) and shown["bg"] != collapse["bg"] and "bad" in shown["detector"].split()

        feed(detector="stall", telemetry={**telemetry, "lateness": 0.3})
        stall = _wait_banner(page, "the stall banner", lambda b: b["state"] == "stall")
        assert stall["cls"] == "banner stall" and "collapse" not in stall["cls"]
        assert re.fullmatch(r"‖ Stall — .+ \(event loop late by \d+ ms\); nothing is cut", stall["text"])
        assert int(re.findall(r"late by (\d+)", stall["text"])[0]) >= 300
        assert not _is_red(stall["bg"]) and stall["bg"] != collapse["bg"]
        assert "bad" not in stall["detector"].split()

        # aimd keeps its factor; an overload without refusals tells the backlog instead.
        aimd = {"policy": "aimd", "shed_per_s": 50.0, "limit": 10_000}
        feed(detector="overload", throttle_factor=0.25, admission=aimd, telemetry={"arrival_rate": 400.0})
        shown = _wait_banner(page, "the aimd overload banner", lambda b: "aimd" in b["text"])
        assert shown["text"] == "⚠ Overload — refusing 50 tasks/s of 400 offered; producers admitted at 25 % (aimd)"
        assert shown["admission"] == "aimd: producers at 25 %" and shown["cls"] == "banner overload"
        feed(admission={**aimd, "shed_per_s": 0.0}, telemetry={"queue_depth": 500, "queue_fill": 0.05, "head_age": 1.2})
        shown = _wait_banner(page, "the backlog banner", lambda b: "backlog" in b["text"])
        assert shown["text"] == "⚠ Overload — backlog of 500 tasks, the oldest waiting 1.20 s"

        for calm in ("warning", "recovering", "healthy"):
            feed(detector=calm)
            shown = _wait_banner(page, f"no banner when {calm}", lambda b, calm=calm: b["state"] == calm)
            assert shown["hidden"] and shown["cls"] == "banner" and "bad" not in shown["detector"].split()
    finally:
        # A poll's handler may be mid-fetch: wait for it, or its late fulfil fails whatever the browser does next.
        page.unroute_all(behavior="wait")


def test_a_healthy_daemon_shows_no_alarm_banner(arena: _Arena, daemon: Daemon) -> None:
    _settled(daemon)
    wait_for(lambda: _status(daemon)["detector"] == "healthy", 60, "a healthy detector", lambda: str(_status(daemon)))
    shown = _wait_banner(arena.page, "the page to show healthy", lambda b: b["state"] == "healthy")
    assert shown["hidden"] and shown["cls"] == "banner" and shown["text"] == ""
    assert "bad" not in shown["detector"].split()
    policy = _status(daemon)["admission"]["policy"]
    assert policy == "capacity"  # the default: the limit and the measured capacity, not a factor
    assert re.fullmatch(
        r"capacity: at most \d+ waiting, measured [\d.]+ tasks/s( \(standing queue kept short\))?", shown["admission"]
    )


def test_a_paused_daemon_shows_a_stall_banner_never_a_collapse(arena: _Arena, daemon: Daemon) -> None:
    _settled(daemon)
    wait_for(lambda: _status(daemon)["detector"] == "healthy", 60, "a healthy detector", lambda: str(_status(daemon)))
    pid = daemon.proc.pid
    done = threading.Event()

    def duty_cycle() -> None:  # 300 ms stopped, 200 ms running: every tick after a pause runs late
        try:
            for _ in range(10):
                os.kill(pid, signal.SIGSTOP)
                if done.wait(0.3):
                    break
                os.kill(pid, signal.SIGCONT)
                if done.wait(0.2):
                    break
        finally:
            os.kill(pid, signal.SIGCONT)

    pauses = threading.Thread(target=duty_cycle, daemon=True)
    pauses.start()
    try:
        shown = _wait_banner(arena.page, "the stall banner", lambda b: b["state"] == "stall" and "late by" in b["text"])
    finally:
        done.set()
        pauses.join()
    assert shown["cls"] == "banner stall" and not shown["hidden"] and shown["role"] == "status"
    assert re.fullmatch(
        r"‖ Stall — the daemon's process was paused \(event loop late by \d+ ms\); nothing is cut", shown["text"]
    ), shown["text"]
    late_ms = int(re.findall(r"\d+", shown["text"])[0])
    assert 50 <= late_ms < 5_000  # the detector's stall threshold, and no pause was longer than 300 ms plus the host
    r, _, b = _rgb(shown["bg"])
    assert b >= r and not _is_red(shown["bg"])  # blue-grey
    assert {"bad", "warn"}.isdisjoint(shown["detector"].split())
    assert shown["admission"].endswith("(held through the stall)")
    told = arena.log().locator('li[data-kind="detector"]').filter(has_text="stall: the daemon's process was paused")
    expect(told.first).to_be_visible()
    assert "bad" not in (told.first.get_attribute("class") or "").split()


# --- faults through the page, judged against the daemon's baseline ----------------------------------------
# These, like the healthy and stall banner tests above, wait for the daemon's baseline (recovery.baseline_min): they
# come after the tests that need none, which run while the daemon learns it. The overload comes last of all: its
# recovery from a backlog is left to the daemon's end, not to a next test.


def test_kill_leader_moves_the_leader_mark_and_tells_the_recovery(arena: _Arena, daemon: Daemon) -> None:
    _settled(daemon)
    old = daemon.get("/api/v1/status")[1]["leader"]
    page = arena.page
    leader = page.locator('.agent[data-leader="true"]')
    expect(leader).to_have_attribute("data-agent", old)
    injected = page.locator("#count-injected")
    expect(injected).not_to_have_text("–")
    before = injected.text_content()
    page.fill("#ttl-kill_leader", "1")  # the standby takes over within the lease (0.5 s)
    arena.button("Kill leader").click()
    expect(leader).to_have_count(1, timeout=5_000)
    expect(leader).not_to_have_attribute("data-agent", old, timeout=5_000)
    expect(arena.log()).to_contain_text(f"✗ kill_leader → {old} killed", timeout=5_000)
    expect(arena.log()).to_contain_text(re.compile(r"✓ orchestrator-\d elected leader \(\d+ ms\)"), timeout=5_000)
    # The service's verdict waits for recovery.confirm of steady service: seconds here, longer when the machine
    # is busy enough to slow the daemon's own loop (bounded by recovery.limit, 60 s, and its confirmation).
    expect(arena.log()).to_contain_text("✓ service recovered after kill_leader", timeout=70_000)
    expect(injected).not_to_have_text(before or "", timeout=5_000)
    expect(page.locator("#count-recovered")).not_to_have_text("0", timeout=5_000)
    # The counters' source: the run's totals, equal to what the fault list says.
    faults = _faults(daemon)
    times = [f["recovery_s"] for f in faults if f["recovery_s"] is not None]
    assert daemon.get("/api/v1/timeseries")[1]["faults"] == {
        "injected": len(faults),
        "recovered": sum(1 for f in faults if f["outcome"] == "recovered"),
        "failed": sum(1 for f in faults if f["outcome"] == "failed"),
        "mean_recovery_s": pytest.approx(sum(times) / len(times), abs=1e-6) if times else None,
    }


def test_a_removed_stage_shows_removed_and_rerouted_then_restored(arena: _Arena, daemon: Daemon) -> None:
    _settled(daemon)
    page = arena.page
    search = page.locator('#dag [data-node="search"]')
    expect(search).to_have_attribute("data-state", "route")
    page.select_option("#target-remove_node", "search")
    page.fill("#ttl-remove_node", "2")
    arena.button("Remove node").click()
    expect(search).to_have_attribute("data-state", "removed", timeout=5_000)
    expect(page.locator('#dag [data-node="search_backup"]')).to_have_attribute("data-state", "route", timeout=5_000)
    expect(page.locator("#dag")).to_have_attribute("data-route", re.compile(r"\bsearch_backup\b"))
    expect(page.locator('#dag [data-edge="plan->search"]')).to_have_attribute("data-state", "removed")
    expect(search).to_have_text(re.compile("remove_node"))
    # The TTL ends: the stage is back and the route goes through it again.
    expect(search).to_have_attribute("data-state", "route", timeout=8_000)
    expect(page.locator("#dag")).to_have_attribute("data-route", re.compile(r"\bsearch\b"))
    expect(arena.log()).to_contain_text("✗ remove_node → search removed")


def test_survival_from_the_page_moves_the_ring_and_the_counters(arena: _Arena, daemon: Daemon) -> None:
    _settled(daemon)
    page = arena.page
    injected = page.locator("#count-injected")
    expect(injected).not_to_have_text("–")
    before = int(injected.text_content() or 0)
    page.fill("#survival-interval", "3")
    page.fill("#survival-duration", "30")
    page.select_option("#survival-actions", ["kill_agent", "pool_exhaustion"])
    arena.button("Start survival").click()
    expect(page.locator("#survival-state")).to_have_text("running", timeout=5_000)
    expect(injected).to_have_text(re.compile(rf"^(?!{before}$)\d+$"), timeout=10_000)
    expect(arena.log()).to_contain_text("▶ survival started")
    # Its progress while it runs: elapsed of the duration, the faults it injected, their verdicts.
    expect(page.locator("#survival-progress")).to_be_visible(timeout=5_000)
    expect(page.locator("#survival-progress-text")).to_have_text(
        re.compile(r"^running: .+ of 30\.0 s · \d+ faults · \d+ recovered, \d+ failed, \d+ pending$"), timeout=5_000
    )
    assert float(page.locator("#survival-bar").get_attribute("max") or 0) == 30
    ring = page.locator("svg.ring").first

    def ring_follows_the_score() -> bool:
        total = daemon.get("/api/v1/score")[1]["total"]
        shown = ring.get_attribute("data-total")
        return bool(shown) and abs(float(shown or 0) - total) < 0.5

    wait_for(ring_follows_the_score, 10, "the ring to show the daemon's score")
    expect(ring).to_have_attribute("aria-label", re.compile(r"^score \d+\.\d, grade [A-F][+-]?$"))
    arena.button("Stop survival").click()
    expect(page.locator("#survival-state")).to_have_text("stopped", timeout=5_000)


def test_an_injected_fault_is_shaded_on_the_charts(arena: _Arena, daemon: Daemon) -> None:
    _settled(daemon)
    page = arena.page
    before = {f["id"] for f in _faults(daemon)}
    page.fill("#ttl-slow_agent", "1")  # a band is drawn at least 2 units wide
    arena.button("Slow agent").click()
    expect(page.locator('.fault-row[data-action="slow_agent"] .note')).to_have_text("✓ done", timeout=5_000)
    new = [f["id"] for f in _faults(daemon) if f["id"] not in before]
    assert len(new) == 1
    band = page.locator('#charts svg.chart[data-chart="queue_depth"] rect.band').filter(
        has_text=f"#{new[0]} slow_agent"
    )
    expect(band).to_have_count(1, timeout=10_000)
    assert float(band.get_attribute("width") or 0) >= 2
    expect(page.locator('#charts svg.chart[data-chart="throughput"] rect.band.fault')).not_to_have_count(0)


def test_an_overload_shows_an_amber_banner_with_the_shedding_and_the_capacity(arena: _Arena, daemon: Daemon) -> None:
    _settled(daemon)
    code, fault = daemon.request("POST", "/api/v1/faults", {"action": "load_spike", "params": {"factor": 8}, "ttl": 20})
    assert code == 201
    try:
        wait_for(lambda: _status(daemon)["detector"] == "overload", 20, "overload", lambda: str(_status(daemon)))
        shown = _wait_banner(
            arena.page, "the overload banner", lambda b: b["state"] == "overload" and "shedding" in b["text"]
        )
        assert shown["cls"] == "banner overload" and not shown["hidden"] and shown["role"] == "alert"
        assert re.fullmatch(
            r"⚠ Overload — shedding \d+ tasks/s of \d+ offered; "
            r"admitting at the measured capacity \d+/s \(at most \d+ waiting\)",
            shown["text"],
        ), shown["text"]
        r, g, b = _rgb(shown["bg"])
        assert r > b and g > b and not _is_red(shown["bg"])  # amber
        assert "warn" in shown["detector"].split()
        expect(arena.log()).to_contain_text("⚠ overload: more offered than served")
    finally:
        daemon.request("DELETE", f"/api/v1/faults/{fault['id']}")


# --- the callers: a retry storm on a daemon of its own ------------------------------------------------------
# Capacity 100/s (2 workers, 20 ms a task), 60 callers/s who wait 0.5 s. A 3 s spike to 180/s leaves a backlog
# older than the callers' patience: with 3 retries each their attempts (4 × 60/s) stay above capacity after the
# spike, and every completion is for a caller who left. Without retries the backlog drains and the service recovers.
STORM = """
[load]
rate = 60.0
deadline = 0.0

[clients]
timeout = 0.5
retries = {retries}

[queue]
capacity = 2000

[workers]
count = 2

[throttle]
enabled = false

[[stages]]
name = "work"
kind = "compute"
service = {{ distribution = "exponential", mean = 0.02 }}
"""

# What the page shows of the callers, read in one go: the detector, attempts per caller (overall and the stage's),
# and the last point of each line of the callers' chart (SVG y: smaller is higher).
_CALLERS_JS = """() => {
  const amp = document.getElementById("amplification");
  const node = document.querySelector('#dag [data-node="work"]');
  const chart = document.querySelector('#charts svg.chart[data-chart="throughput"]');
  const last = (key) => {
    const d = chart.querySelector(`path.line[data-series="${key}"]`).getAttribute("d") || "";
    const xy = d.split(/[ML]/).filter(Boolean).pop();
    return xy ? Number(xy.split(" ")[1]) : null;
  };
  return {state: document.getElementById("banner").dataset.state, banner: document.getElementById("banner").textContent,
          times: amp.textContent, value: amp.dataset.value, stage: node ? node.dataset.amplification : null,
          stageText: node ? node.querySelector(".node-amp").textContent : null,
          stage_attempts: node ? node.dataset.attemptsPerS : null,
          y: {callers: last("offered_per_s"), attempts: last("attempts_per_s"), goodput: last("goodput_per_s"),
              wasted: last("wasted_per_s")},
          bottom: Number(chart.querySelector("rect.plot").getAttribute("y"))
                  + Number(chart.querySelector("rect.plot").getAttribute("height"))};
}"""


def _storm_daemon(tmp: Path, retries: int) -> Daemon:
    config = tmp / f"storm-{retries}.toml"
    config.write_text(STORM.format(retries=retries))
    return Daemon(tmp, env={**ENV, "CHAOSD_API__PORT": str(_free_port())}, config=config)


def _spike(d: Daemon) -> dict[str, Any]:
    code, fault = d.request("POST", "/api/v1/faults", {"action": "load_spike", "params": {"factor": 3}, "ttl": 3})
    assert code == 201, fault
    return fault


def test_a_retry_storm_shows_metastable_and_attempts_per_caller_above_two(browser: Browser, tmp_path: Path) -> None:
    d = _storm_daemon(tmp_path, retries=3)
    tab = None
    try:
        tab = _Arena(browser, d.base, rows=12)
        page = tab.page
        fault = _spike(d)
        seen: list[dict[str, Any]] = []

        def storming() -> bool:
            seen.append(page.evaluate(_CALLERS_JS))
            return seen[-1]["state"] == "metastable" and float(seen[-1]["value"] or 0) > 2

        wait_for(storming, 30, "the page to show a retry storm", lambda: str(seen[-1] if seen else None))
        # The storm outlives its trigger: the spike is over, the callers are back to their rate (the stage serving
        # more attempts than there are callers), and the page still shows it.
        wait_for(lambda: d.get(f"/api/v1/faults/{fault['id']}")[1]["reverted_at"] is not None, 15, "the spike's end")
        seen.clear()
        wait_for(
            lambda: storming() and float(seen[-1]["stage"] or 0) > 1,
            20,
            "the storm after the spike",
            lambda: str(seen[-1] if seen else None),
        )
        shown = seen[-1]
        assert re.fullmatch(r"×\d+\.\d", shown["times"]) and float(shown["times"][1:]) > 2, shown
        assert (
            shown["banner"].startswith("⚠ Retry storm — ")
            and "most work done is for callers who already left" in (shown["banner"])
        )
        # The stage's own attempts per caller: its attempts (at most its capacity, 100/s) over the callers the banner
        # tells, fewer than the callers' attempts (most of which wait in the queue or are abandoned there).
        callers = float(re.findall(r"for (\d+) callers/s", shown["banner"])[0])
        assert float(shown["stage_attempts"]) / float(shown["stage"]) == pytest.approx(callers, abs=1), shown
        assert float(shown["stage"]) < float(shown["value"]), shown
        assert re.fullmatch(r"×\d+\.\d attempts per caller", shown["stageText"]), shown
        # The callers' chart: attempts above the callers, goodput on the floor while wasted work is not.
        y = shown["y"]
        assert y["attempts"] < y["callers"], shown
        assert y["goodput"] == pytest.approx(shown["bottom"], abs=3) and y["wasted"] < y["goodput"] - 3, shown
        expect(tab.log()).to_contain_text("✗ retry storm (metastable): callers retrying", timeout=5_000)
        status = _status(d)
        assert status["detector"] == "metastable" and status["telemetry"]["goodput"] < 10, status["telemetry"]
        assert tab.errors == []
    finally:
        if tab is not None:
            tab.close()
        d.kill()


def test_without_retries_the_same_spike_shows_no_storm_and_one_attempt_per_caller(
    browser: Browser, tmp_path: Path
) -> None:
    """The negative control: the same callers, spike and page, but callers that never retry."""
    d = _storm_daemon(tmp_path, retries=0)
    tab = None
    try:
        tab = _Arena(browser, d.base, rows=12)
        page = tab.page
        _spike(d)
        seen: list[dict[str, Any]] = []
        alarmed: list[str] = []

        def recovered() -> bool:
            seen.append(page.evaluate(_CALLERS_JS))
            state = seen[-1]["state"]
            if state in ("overload", "collapsed", "metastable"):
                alarmed.append(state)
            return bool(alarmed) and state in ("recovering", "healthy")

        wait_for(recovered, 60, "an alarm and its recovery", lambda: str(seen[-1] if seen else None))
        assert "metastable" not in alarmed and {s["state"] for s in seen}.isdisjoint({"metastable"})
        # Every caller made one attempt, before, during and after the spike.
        assert {s["value"] for s in seen if s["value"]} == {"1"}, {s["value"] for s in seen}
        assert {s["times"] for s in seen if s["value"]} == {"×1.0"}
        assert tab.log().locator("li").filter(has_text="retry storm").count() == 0
        assert tab.errors == []
    finally:
        if tab is not None:
            tab.close()
        d.kill()


# A tool that fails half its attempts, retried twice on the spot: 1 + 1/2 + 1/4 = 1.75 attempts per caller at the
# stage, while the callers themselves never retry.
FLAKY_TOOL = """
[load]
rate = 60.0

[workers]
count = 2

[[stages]]
name = "work"
kind = "tool"
service = {{ distribution = "exponential", mean = 0.002 }}
failure_probability = 0.5
retries = {retries}
backoff = {{ base = 0.0 }}
breaker_threshold = 0
"""


@pytest.mark.parametrize(("retries", "expected"), [(2, 1.75), (0, 1.0)])
def test_a_stage_s_own_retries_multiply_its_attempts_per_caller(
    browser: Browser, tmp_path: Path, retries: int, expected: float
) -> None:
    """The stage's figure counts its own retries; the callers' does not. Without the stage's retries (the negative
    control) both read 1."""
    config = tmp_path / "flaky.toml"
    config.write_text(FLAKY_TOOL.format(retries=retries))
    d = Daemon(tmp_path, env={**ENV, "CHAOSD_API__PORT": str(_free_port())}, config=config)
    tab = None
    try:
        tab = _Arena(browser, d.base, rows=13)  # a tool stage: tool_timeout applies too
        page = tab.page
        readings: list[tuple[str, str]] = []  # (the callers', the stage's), one per status the page showed

        def enough() -> bool:
            shown = page.evaluate(_CALLERS_JS)
            reading = (shown["value"], shown["stage"])
            if all(reading) and (not readings or readings[-1] != reading):
                readings.append(reading)
            return len(readings) >= 6

        wait_for(enough, 30, "six readings of attempts per caller", lambda: str(readings))
        assert {callers for callers, _ in readings} == {"1"}, readings
        stage = sorted(float(at_stage) for _, at_stage in readings)[len(readings) // 2]
        assert stage == pytest.approx(expected, rel=0.2), readings
        expect(page.locator('#dag [data-node="work"] .node-amp')).to_have_text(
            re.compile(r"^×\d\.\d attempts per caller$")
        )
        assert tab.errors == []
    finally:
        if tab is not None:
            tab.close()
        d.kill()
