"""Save screenshots of the Arena (docs/arena.png) and of an HTML post-mortem (docs/postmortem.png).

The Arena: starts the daemon on loopback on the default config (its own temporary data directory and token),
waits for a steady state, starts survival (a fault every 5 s) from the page itself, lets it run for --seconds,
then shoots the page in a 1440×900 viewport in headless Chromium (Debian's ``chromium``): the whole page, whose
first 900 px are the first screen.

The post-mortem: runs the ``leader_assassination`` scenario (``chaosd run … --report``), renders its report
(``chaosd report … --html``) and shoots the file, opened from disk.

Usage: python scripts/arena_screenshot.py [--only arena|postmortem] [--out docs/arena.png]
                                          [--pm-out docs/postmortem.png] [--seconds 40]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import Browser, sync_playwright

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "screenshot-token-0123456789"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]
ACTIONS = ("kill_leader", "remove_node", "kill_agent", "pool_exhaustion", "load_spike", "network_partition")


def _start(tmp: Path) -> tuple[subprocess.Popen[str], str]:
    """The daemon the benchmarks start (bench/_daemon.py), with the token the page is given."""
    sys.path.insert(0, str(ROOT / "bench"))
    from _daemon import start_daemon  # noqa: PLC0415 - a sibling directory's helper, not a package

    return start_daemon(tmp, {"CHAOSD_API__TOKEN": TOKEN})


def _ready(base: str, deadline_s: float = 30.0) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(base + "/readyz", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError("the daemon did not become ready")


def _postmortem(browser: Browser, out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "leader_assassination.json"
        chaosd = [sys.executable, "-m", "chaosd"]
        subprocess.run(
            [*chaosd, "run", "leader_assassination", "--report", str(report), "--quiet"], cwd=ROOT, check=True
        )
        html = Path(tmp) / "pm.html"
        subprocess.run([*chaosd, "report", str(report), "--html", "--out", str(html)], cwd=ROOT, check=True)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(html.as_uri())
        page.wait_for_selector("svg.chart path.line")
        page.wait_for_timeout(500)  # the charts fit their width once laid out
        out.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(out), full_page=True)
        page.close()
    print(f"wrote {out}")


def _arena(browser: Browser, out: Path, seconds: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        proc, base = _start(Path(tmp))
        try:
            _ready(base)
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            page.goto(base + "/arena")
            page.wait_for_selector(".fault-row")
            page.fill("#token", TOKEN)
            page.click("#token-save")
            page.wait_for_timeout(12_000)  # a steady state for the recoveries to be judged against
            page.fill("#survival-interval", "5")
            page.fill("#survival-duration", "600")
            page.select_option("#survival-actions", list(ACTIONS))
            page.get_by_role("button", name="Start survival", exact=True).click()
            page.wait_for_timeout(seconds * 1000)
            out.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(out), full_page=True)
            page.close()
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    print(f"wrote {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=("arena", "postmortem"), help="make one of the two (default: both)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "arena.png")
    parser.add_argument("--pm-out", type=Path, default=ROOT / "docs" / "postmortem.png")
    parser.add_argument("--seconds", type=float, default=40.0, help="survival time before the shot")
    opts = parser.parse_args()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=ARGS)
        try:
            if opts.only in (None, "arena"):
                _arena(browser, opts.out, opts.seconds)
            if opts.only in (None, "postmortem"):
                _postmortem(browser, opts.pm_out)
        finally:
            browser.close()


if __name__ == "__main__":
    main()
