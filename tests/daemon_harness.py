"""A real chaosd daemon in a subprocess on loopback, for tests that drive it over HTTP."""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from prometheus_client.parser import text_string_to_metric_families

from chaosd.config.settings import load_settings

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "test-token-0123456789"
PROMETHEUS = shutil.which("prometheus")
ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")


def wait_for(
    predicate: Callable[[], bool], deadline_s: float, what: str, explain: Callable[[], str] | None = None
) -> None:
    """Poll a condition until it holds or the deadline passes (never a blind sleep); ``explain`` says, on a
    timeout, what the state was instead."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    state = f": {explain()}" if explain is not None else ""
    raise AssertionError(f"timed out after {deadline_s} s waiting for {what}{state}")


class Daemon:
    def __init__(
        self,
        tmp: Path,
        env: dict[str, str | None] | None = None,
        config: Path | None = None,
        args: tuple[str, ...] = (),
    ) -> None:
        """``env`` adds variables; a value of None removes one (e.g. the default token). ``args``: more options."""
        self.tmp = tmp
        merged: dict[str, str | None] = {
            **os.environ,
            "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
            "CHAOSD_API__HOST": "127.0.0.1",
            "CHAOSD_API__PORT": "0",
            "CHAOSD_API__TOKEN": TOKEN,
            "CHAOSD_API__HEARTBEAT": "0.5",
            "CHAOSD_DAEMON__STATUS_INTERVAL": "1",
            "CHAOSD_DAEMON__REPORT": str(tmp / "daemon-report.json"),
            "CHAOSD_STORAGE__PATH": str(tmp / "data" / "chaosd.db"),
            **(env or {}),
        }
        self.env = {k: v for k, v in merged.items() if v is not None}
        argv = [sys.executable, "-m", "chaosd", *args] + (["--config", str(config)] if config else [])
        self.proc = subprocess.Popen(
            argv, cwd=tmp, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()
        line = self.wait_line("listening on http://127.0.0.1:")
        self.base = line.split("listening on ")[1].split()[0]
        self.run_id = line.split("(run ")[1].rstrip(")")
        wait_for(lambda: self.get("/readyz")[0] == 200, 15, "/readyz")

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def wait_line(self, needle: str, deadline_s: float = 30.0) -> str:
        deadline = time.monotonic() + deadline_s
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            self.seen.append(line)
            if needle in line:
                return line
        raise AssertionError(f"no line with {needle!r}; output so far: {self.seen[-30:]}")

    def drain(self) -> list[str]:
        while not self.lines.empty():
            self.seen.append(self.lines.get())
        return self.seen

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        token: str | None = TOKEN,
        raw: bytes | None = None,
        headers: dict[str, str] | None = None,
        timeout: float = 10.0,
    ) -> tuple[int, Any]:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        req = urllib.request.Request(self.base + path, data=data, method=method)
        if data is not None and not any(k.lower() == "content-type" for k in headers or {}):
            req.add_header("Content-Type", "application/json")  # urllib would say it is a form
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                payload = resp.read()
                return resp.status, json.loads(payload) if payload else None
        except urllib.error.HTTPError as exc:
            payload = exc.read()
            try:
                return exc.code, json.loads(payload)
            except json.JSONDecodeError:
                return exc.code, payload.decode(errors="replace")

    def get(self, path: str) -> tuple[int, Any]:
        return self.request("GET", path, token=None)

    def scrape(self) -> dict[str, float]:
        """GET /metrics as ``{'name{label="value",…}': value}`` (labels sorted; a bare name without labels)."""
        with urllib.request.urlopen(self.base + "/metrics", timeout=10) as resp:
            text = resp.read().decode()
        out = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
                out[f"{sample.name}{{{labels}}}" if labels else sample.name] = float(sample.value)
        return out

    def wait_for_baseline(self, deadline_s: float = 30.0) -> None:
        """Until the daemon has a steady state to judge recoveries against (recovery.baseline_min of
        fault-free time): a fault injected before that is ``unmeasured``, never recovered."""
        needed = load_settings(None).recovery.baseline_min

        def covered() -> bool:
            baseline = self.get("/api/v1/report")[1]["faults_summary"]["baseline"] or {}
            return bool(baseline.get("seconds", 0) >= needed)

        wait_for(covered, deadline_s, "a baseline")

    def terminate(self, deadline_s: float = 20.0) -> int:
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=deadline_s)
        self.drain()
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


def ready_daemon(tmp: Path, env: dict[str, str | None] | None = None) -> Iterator[Daemon]:
    """A daemon with a steady state to judge recoveries against, killed after use (for module fixtures)."""
    daemon = Daemon(tmp, env=env)
    try:
        daemon.wait_for_baseline()
        yield daemon
    finally:
        daemon.kill()


class Sink:
    """A tiny HTTP server that records what is POSTed to it (the webhook and the OTLP receiver)."""

    def __init__(self) -> None:
        self.bodies: list[tuple[str, bytes]] = []
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                sink.bodies.append((self.path, body))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()
                self.wfile.write(b"")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def spans(self) -> list[dict[str, Any]]:
        out = []
        for path, body in list(self.bodies):
            if path != "/v1/traces":
                continue
            request = ExportTraceServiceRequest.FromString(body)
            for rs in request.resource_spans:
                service = {a.key: a.value.string_value for a in rs.resource.attributes}.get("service.name")
                for ss in rs.scope_spans:
                    for span in ss.spans:
                        out.append(
                            {
                                "service": service,
                                "name": span.name,
                                "kind": span.kind,
                                "span_id": span.span_id,
                                "parent": span.parent_span_id,
                                "links": [link.span_id for link in span.links],
                                "events": [e.name for e in span.events],
                                "attributes": {a.key for a in span.attributes},
                            }
                        )
        return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def shortened_rules(tmp: Path, alerts: dict[str, str]) -> Path:
    """The shipped rules with the named alerts' `for:` clauses replaced (promtool proves the shipped timing)."""
    text = (ROOT / "config" / "prometheus" / "rules.yml").read_text()
    for alert, duration in alerts.items():
        pattern = re.compile(rf"(- alert: {alert}\n(?:.*\n)*?\s*for: )\S+")
        text, n = pattern.subn(rf"\g<1>{duration}", text)
        assert n == 1, f"the {alert} alert and its for: clause"
    path = tmp / "rules.yml"
    path.write_text(text)
    return path


class AlertStack:
    """Prometheus (scrape and rule evaluation every second, ``rules``) scraping ``targets`` (host:port) as job
    chaosd → Alertmanager (group_wait 1 s) → a webhook :class:`Sink`, all on loopback; ``close`` stops both
    programs by their PIDs. Prometheus takes a few seconds before its first scrape: see :meth:`wait_scraped`."""

    def __init__(self, tmp: Path, targets: list[str], rules: Path) -> None:
        assert PROMETHEUS and ALERTMANAGER, "prometheus and prometheus-alertmanager (Debian packages)"
        tmp.mkdir(parents=True, exist_ok=True)
        self.webhook = Sink()
        am_port, prom_port = free_port(), free_port()
        (tmp / "am.yml").write_text(
            "route:\n  receiver: hook\n  group_by: [alertname, instance]\n  group_wait: 1s\n"
            "  group_interval: 1s\n  repeat_interval: 1h\nreceivers:\n  - name: hook\n    webhook_configs:\n"
            f"      - url: http://127.0.0.1:{self.webhook.port}/alerts\n        send_resolved: true\n"
        )
        (tmp / "prom.yml").write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            f"rule_files: [{rules}]\n"
            f"alerting:\n  alertmanagers:\n    - static_configs:\n        - targets: ['127.0.0.1:{am_port}']\n"
            f"scrape_configs:\n  - job_name: chaosd\n    static_configs:\n      - targets: {json.dumps(targets)}\n"
        )
        self.procs: list[subprocess.Popen[bytes]] = []
        try:
            self.procs.append(
                subprocess.Popen(
                    [
                        ALERTMANAGER,
                        f"--config.file={tmp / 'am.yml'}",
                        f"--storage.path={tmp / 'am'}",
                        f"--web.listen-address=127.0.0.1:{am_port}",
                        "--cluster.listen-address=",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
            self.procs.append(
                subprocess.Popen(
                    [
                        PROMETHEUS,
                        f"--config.file={tmp / 'prom.yml'}",
                        f"--storage.tsdb.path={tmp / 'prom'}",
                        f"--web.listen-address=127.0.0.1:{prom_port}",
                        "--rules.alert.resend-delay=1s",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        except BaseException:
            self.close()
            raise
        self.prom = f"http://127.0.0.1:{prom_port}"

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result vector (each ``{"metric": {…}, "value": [t, "v"]}``)."""
        url = f"{self.prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=10) as resp:
            body = json.loads(resp.read())
        assert body["status"] == "success", body
        return list(body["data"]["result"])

    def value(self, expr: str) -> float:
        """The single value of an instant query that must return exactly one series."""
        result = self.query(expr)
        assert len(result) == 1, (expr, result)
        return float(result[0]["value"][1])

    def wait_scraped(self, target: str, deadline_s: float = 60.0) -> None:
        def up() -> bool:
            try:
                return bool(self.query(f'up{{job="chaosd", instance="{target}"}} == 1'))
            except OSError:
                return False  # Prometheus not listening yet

        wait_for(up, deadline_s, f"Prometheus to scrape {target}")

    def alerts(self, alertname: str, instance: str | None = None) -> list[dict[str, Any]]:
        """The alerts named so (firing or resolved) in every notification that reached the webhook."""
        out = []
        for _, body in list(self.webhook.bodies):
            for alert in json.loads(body)["alerts"]:
                labels = alert["labels"]
                if labels["alertname"] == alertname and instance in (None, labels.get("instance")):
                    out.append(alert)
        return out

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        self.webhook.close()
