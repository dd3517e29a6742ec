"""Save a screenshot of the Arena (docs/arena.png): a real daemon with survival mode running.

Starts the daemon on loopback on the default config (its own temporary data directory and token), waits for
a steady state, starts survival (a fault every 5 s) from the page itself, lets it run for --seconds, then
shoots the whole page in headless Chromium (Debian's ``chromium``).

Usage: python scripts/arena_screenshot.py [--out docs/arena.png] [--seconds 40]
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

from playwright.sync_api import sync_playwright

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "arena.png")
    parser.add_argument("--seconds", type=float, default=40.0, help="survival time before the shot")
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        proc, base = _start(Path(tmp))
        browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=ARGS)
        try:
            _ready(base)
            page = browser.new_page(viewport={"width": 1440, "height": 1000})
            page.goto(base + "/arena")
            page.wait_for_selector(".fault-row")
            page.fill("#token", TOKEN)
            page.click("#token-save")
            page.wait_for_timeout(12_000)  # a steady state for the recoveries to be judged against
            page.fill("#survival-interval", "5")
            page.fill("#survival-duration", "600")
            page.select_option("#survival-actions", list(ACTIONS))
            page.get_by_role("button", name="Start survival", exact=True).click()
            page.wait_for_timeout(opts.seconds * 1000)
            opts.out.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(opts.out), full_page=True)
        finally:
            browser.close()
            proc.terminate()
            proc.wait(timeout=30)
    print(f"wrote {opts.out}")


if __name__ == "__main__":
    main()
