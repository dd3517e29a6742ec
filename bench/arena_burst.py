"""The Arena under an event storm: how long a click takes to answer while 5,000 events arrive at once.

Starts a real daemon on loopback and opens its page in headless Chromium (Debian's ``chromium``) through a
small same-origin proxy: every request goes to the daemon except the event stream, which the proxy serves
itself: empty at first (the page reconnects every 200 ms), then, on demand, one response holding a burst
of 5,000 events, sent over a real socket as the daemon would. A click on a log filter box is timed from the
click until the frame after its effect, first with no burst (the baseline), then right as each burst lands.
Prints both, their ratio, and how long the page took to absorb each burst.

    python bench/arena_burst.py [--bursts 5] [--events 5000]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from _daemon import start_daemon
from playwright.sync_api import Page, sync_playwright

TOKEN = "bench-token-0123456789"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]
_NEXT_FRAME = "() => new Promise((done) => requestAnimationFrame(() => done()))"


def _frames(first_id: int, n: int) -> str:
    """``n`` events of the kinds a fault storm produces, ids from ``first_id``."""
    out = ["retry: 200\n\n"]
    for k in range(n):
        i = first_id + k
        t = 100.0 + k * 0.001
        kind, data = [
            ("fault", {"id": i, "action": "kill_agent", "state": "injected", "targets": [f"worker-{k % 4}"]}),
            ("agent", {"agent": f"worker-{k % 4}", "state": "dead"}),
            ("leader", {"replica": f"orchestrator-{k % 3}", "state": "elected", "redispatched": 0}),
            ("fault", {"id": i, "action": "kill_agent", "state": "recovered", "recovery_s": 0.4}),
            ("detector", {"old": "healthy", "new": "warning", "reason": "queue_growth"}),
        ][k % 5]
        out.append(f"id: {i}\nevent: {kind}\ndata: {json.dumps({'t': t, **data})}\n\n")
    return "".join(out)


class _Feed:
    """The event stream the page sees: nothing until a burst is asked for, then the burst once."""

    def __init__(self, events: int) -> None:
        self.events = events
        self.next_id = 1_000_000
        self.want_burst = False
        self.served_at: float | None = None
        self.last_id = 0
        self.lock = threading.Lock()

    def body(self) -> bytes:
        with self.lock:
            if not self.want_burst:
                return b"retry: 200\n\n"
            self.want_burst = False
            body = _frames(self.next_id, self.events).encode()
            self.last_id = self.next_id + self.events - 1
            self.next_id += self.events
            self.served_at = time.perf_counter()
            return body


def _proxy(feed: _Feed, daemon: str) -> ThreadingHTTPServer:
    """Same origin as the page: GETs go to the daemon, except the event stream, served from ``feed``."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.startswith("/api/v1/events"):
                status, headers, body = 200, {"Content-Type": "text/event-stream"}, feed.body()
            else:
                try:
                    with urllib.request.urlopen(daemon + self.path, timeout=10) as resp:
                        status, headers, body = resp.status, dict(resp.headers), resp.read()
                except urllib.error.HTTPError as exc:
                    status, headers, body = exc.code, dict(exc.headers), exc.read()
            self.send_response(status)
            for key in ("Content-Type", "Content-Security-Policy", "X-Content-Type-Options", "Cache-Control"):
                if key in headers:
                    self.send_header(key, headers[key])
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _click(page: Page, box: Any) -> float:
    """Seconds from the click to the frame after the filter has changed the log."""
    started = time.perf_counter()
    box.click()
    page.evaluate(_NEXT_FRAME)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bursts", type=int, default=5)
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--baseline-clicks", type=int, default=20)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        proc, base = start_daemon(Path(tmp), {"CHAOSD_API__TOKEN": TOKEN})
        browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=ARGS)
        proxy: ThreadingHTTPServer | None = None
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            feed = _Feed(opts.events)
            proxy = _proxy(feed, base)
            page.goto(f"http://127.0.0.1:{proxy.server_address[1]}/arena")
            page.wait_for_selector(".fault-row")
            page.wait_for_function("() => document.getElementById('connection').textContent === '● live'")
            box = page.locator('#log-filter input[data-group="score"]')
            for _ in range(3):  # warm up
                _click(page, box)
            idle = [_click(page, box) for _ in range(opts.baseline_clicks)]
            stormy: list[float] = []
            absorbed: list[float] = []
            for _ in range(opts.bursts):
                feed.want_burst = True
                page.wait_for_function("() => document.getElementById('connection').textContent !== '● live'")
                while feed.served_at is None:
                    time.sleep(0.002)
                served = feed.served_at
                stormy.append(_click(page, box))
                page.wait_for_function(f"() => document.querySelector('#log li')?.dataset.id === '{feed.last_id}'")
                absorbed.append(time.perf_counter() - served)
                lines = page.locator("#log li").count()
                feed.served_at = None
        finally:
            browser.close()
            if proxy is not None:
                proxy.shutdown()
            proc.terminate()
            proc.wait(timeout=30)
    med_idle = statistics.median(idle) * 1000
    med_storm = statistics.median(stormy) * 1000
    print(f"{opts.bursts} bursts of {opts.events} events; log lines kept in the DOM: {lines}")
    print(f"click, no burst     : median {med_idle:6.1f} ms, max {max(idle) * 1000:6.1f} ms ({len(idle)} clicks)")
    print(f"click, during burst : median {med_storm:6.1f} ms, max {max(stormy) * 1000:6.1f} ms (target < 200 ms)")
    print(f"ratio (burst / none): {med_storm / med_idle:.2f}")
    print(f"burst absorbed (served → last line drawn): median {statistics.median(absorbed) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
