"""A web page in the user's browser cannot drive a tokenless daemon on loopback: not from another origin (forms,
no-cors fetches, preflighted DELETEs), not by DNS rebinding (a foreign Host), not as a "simple request" without a
JSON content type. Real Chromium, a real daemon and a real second web server on loopback (docs/security.md)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import ROOT, Daemon, wait_for
from playwright.sync_api import Browser, Route, sync_playwright

from chaosd.api.server import HostPolicy, own_origin
from chaosd.chaostoolkit.actions import pull_lever, release_lever
from chaosd.cli.client import Client
from chaosd.config.settings import ApiConfig, load_settings
from chaosd.core.errors import ConfigError

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--host-resolver-rules=MAP evil.example 127.0.0.1",  # DNS rebinding: the attacker's name, our address
    # Chromium's own Local Network Access checks would stop a rebound page too; Firefox and Safari have none.
    # Off here: what is tested is the daemon's defence, which holds whatever the browser.
    "--disable-features=LocalNetworkAccessChecks,BlockInsecurePrivateNetworkRequests,PrivateNetworkAccessSendPreflights",
]
CHANGES = ("post", "put", "patch", "delete")
# A text/plain form whose body is JSON: name={"action": …, "x": " and value "} make {"action": …, "x": "="}.
FORM_FIELD = ('{"action": "kill_leader", "ttl": 30, "reason": "csrf", "name": "csrf", "x": "', '"}')


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    d = Daemon(tmp_path_factory.mktemp("open"), env={"CHAOSD_API__TOKEN": None})  # mutations open to all
    try:
        yield d
    finally:
        d.kill()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=shutil.which("chromium"), args=CHROMIUM_ARGS)
        yield launched
        launched.close()


class _Attacker:
    """Another origin on loopback: serves one empty page; the test's script does the rest."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = b"<!doctype html><title>not chaosd</title><body></body>"
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _state(d: Daemon) -> dict[str, Any]:
    """What a refused change must leave as it was (uptime, telemetry and the score move on their own)."""
    status = d.get("/api/v1/status")[1]
    faults = d.get("/api/v1/faults")[1]
    windows = d.get("/api/v1/windows")[1]["windows"]
    # The DAG's shape, not its per-stage rates (they move with the load).
    dag = {k: v for k, v in status["dag"].items() if k != "stages"}
    return {k: status[k] for k in ("lever", "survival", "scenario", "faults_active", "stopping")} | {
        "dag": dag,
        "faults": [(f["id"], f["action"], f["reverted_at"], f["reverted_by"]) for f in faults["faults"]],
        "injected": faults["injected"],
        "windows": [(w["id"], w["name"], w["state"]) for w in windows],
    }


def _refused(d: Daemon) -> dict[str, float]:
    return {k: v for k, v in d.scrape().items() if k.startswith("chaosd_api_refused_total")}


def _delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    changed = {k.split('"')[1]: after[k] - before.get(k, 0.0) for k in after if after[k] != before.get(k, 0.0)}
    return changed


def _changes(d: Daemon, fault_id: int, window_id: int) -> list[tuple[str, str]]:
    """(METHOD, concrete path) of every mutating route, from the daemon's own OpenAPI document."""
    code, doc = d.get("/api/v1/openapi.json")
    assert code == 200
    out = []
    for path, ops in doc["paths"].items():
        concrete = path.replace("/windows/{id}", f"/windows/{window_id}").replace("{id}", str(fault_id))
        out += [(method.upper(), concrete) for method in ops if method in CHANGES]
    return sorted(out)


def _raw(d: Daemon, head: str, body: bytes = b"") -> tuple[int, dict[str, Any]]:
    """One request as bytes on a socket: headers exactly as given (a browser's Host, no urllib defaults)."""
    host, port = d.base.removeprefix("http://").split(":")
    request = head.replace("\n", "\r\n") + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(request.encode() + body)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    status_line, _, rest = data.partition(b"\r\n")
    return int(status_line.split(b" ")[1]), json.loads(rest.partition(b"\r\n\r\n")[2])


# --- what a page of another origin can send ------------------------------------------------------------------

ATTACK = """
async ({target, changes, field}) => {
  const sent = [];
  for (const [method, path] of changes) {
    const url = target + path;
    if (method === "POST") {
      // no-cors: the page cannot read the answer, but the request is sent; no preflight for these.
      await fetch(url, {method, mode: "no-cors"});
      await fetch(url, {method, mode: "no-cors", body: JSON.stringify({action: "kill_leader", reason: "csrf"})});
      sent.push(path, path);
      for (const enctype of ["text/plain", "application/x-www-form-urlencoded"]) {
        const frame = document.createElement("iframe");
        frame.name = `f${sent.length}`;
        document.body.appendChild(frame);
        const loaded = new Promise((resolve) => frame.addEventListener("load", resolve, {once: true}));
        const form = document.createElement("form");
        Object.assign(form, {method: "POST", action: url, enctype, target: frame.name});
        const input = document.createElement("input");
        Object.assign(input, {type: "hidden", name: field[0], value: field[1]});
        form.appendChild(input);
        document.body.appendChild(form);
        form.submit();
        await loaded;
        sent.push(path);
      }
    } else {
      // Any other method needs a CORS preflight the daemon never grants; no-cors refuses it outright.
      try { await fetch(url, {method, mode: "no-cors"}); sent.push("no-cors " + method); } catch (e) {}
      try { await fetch(url, {method}); sent.push("cors " + method); } catch (e) {}
    }
  }
  return sent;
}
"""


def test_pages_of_other_origins_change_nothing_on_a_tokenless_daemon(browser: Browser, daemon: Daemon) -> None:
    code, fault = daemon.request("POST", "/api/v1/faults", {"action": "slow_agent", "ttl": 300})
    assert code == 201  # a fault and a window for the routes with an {id}: a page must not revert or close them
    code, window = daemon.request("POST", "/api/v1/windows", {"name": "kept"})
    assert code == 201
    changes = _changes(daemon, fault["id"], window["id"])
    posts = [p for m, p in changes if m == "POST"]
    assert len(changes) >= 11 and len(posts) >= 5, changes
    attacker = _Attacker()
    try:
        before, counted = _state(daemon), _refused(daemon)
        sent: list[str] = []
        # 127.0.0.1 on another port is the same site (Sec-Fetch-Site: same-site); localhost is another site.
        for origin in (f"http://127.0.0.1:{attacker.port}", f"http://localhost:{attacker.port}"):
            page = browser.new_page()
            try:
                page.goto(origin + "/")
                sent += page.evaluate(ATTACK, {"target": daemon.base, "changes": changes, "field": list(FORM_FIELD)})
            finally:
                page.close()
        assert sorted(sent) == sorted(posts * 8), sent  # every POST reached the daemon; no other method did
        # Refused, each one counted: the answers were 403 (a no-cors page never reads them).
        wait_for(lambda: _delta(counted, _refused(daemon)).get("cross_origin") == len(sent), 10, "the refusals")
        assert _delta(counted, _refused(daemon)) == {"cross_origin": len(sent)}
        assert _state(daemon) == before
    finally:
        attacker.close()
    # The daemon's own page (same origin, as the Arena) may change things, and the browser says where it came from.
    page = browser.new_page()
    try:
        page.goto(daemon.base + "/arena")
        answer = page.evaluate(
            """async (path) => {
              const r = await fetch(path, {method: "POST", headers: {"Content-Type": "application/json"},
                                            body: JSON.stringify({reason: "own page"})});
              return [r.status, await r.json()];
            }""",
            "/api/v1/lever",
        )
        assert answer[0] == 200 and answer[1]["lever"] == "own page"
        assert daemon.get("/api/v1/status")[1]["lever"] == "own page"
        assert page.evaluate("async () => (await fetch('/api/v1/lever', {method: 'DELETE'})).status") == 200
    finally:
        page.close()
    assert daemon.get("/api/v1/status")[1]["lever"] is None
    assert daemon.get(f"/api/v1/faults/{fault['id']}")[1]["reverted_at"] is not None  # the lever reverted it
    assert daemon.request("DELETE", f"/api/v1/windows/{window['id']}")[0] == 200


def test_dns_rebinding_reads_and_changes_nothing(browser: Browser, daemon: Daemon) -> None:
    """evil.example resolves to 127.0.0.1: its page, served first by the attacker, then talks to the daemon as
    the same origin (Origin and Host both say evil.example); only the Host tells, and it is refused."""
    port = daemon.base.rsplit(":", 1)[1]
    rebound = f"http://evil.example:{port}"
    page = browser.new_page()

    def attacker_page(route: Route) -> None:
        route.fulfill(status=200, content_type="text/html", body="<!doctype html><title>evil</title>")

    try:
        page.route(rebound + "/start", attacker_page)  # the page before the name is rebound; the rest is real
        page.goto(rebound + "/start")
        before, counted = _state(daemon), _refused(daemon)
        answers = page.evaluate(
            """async () => {
              const out = [];
              for (const [method, path, body] of [["GET", "/api/v1/status"], ["GET", "/api/v1/runs"],
                  ["GET", "/metrics"], ["POST", "/api/v1/lever", "{}"],
                  ["POST", "/api/v1/faults", JSON.stringify({action: "kill_leader"})]]) {
                const r = await fetch(path, {method, body, headers: body ? {"Content-Type": "application/json"} : {}});
                out.push([r.status, await r.json()]);
              }
              return out;
            }"""
        )
        assert [status for status, _ in answers] == [421] * 5
        assert all(body["error"]["field"] == "Host" for _, body in answers)
        assert "api.allowed_hosts" in answers[0][1]["error"]["message"]
        navigated = page.goto(rebound + "/arena")
        assert navigated is not None and navigated.status == 421  # the Arena page itself is not served either
    finally:
        page.close()
    # Six requests, refused by Host alone; Chromium retries a 421 (Misdirected Request) on a new connection, and
    # may ask for a favicon too, so each is counted at least once.
    refused = _delta(counted, _refused(daemon))
    assert set(refused) == {"wrong_host"} and refused["wrong_host"] >= 6, refused
    assert _state(daemon) == before


# --- the same rules, one request at a time ---------------------------------------------------------------------


def test_a_foreign_host_is_refused_on_every_kind_of_route(daemon: Daemon) -> None:
    port = daemon.base.rsplit(":", 1)[1]
    before, counted = _state(daemon), _refused(daemon)
    for head in (
        "GET /api/v1/status HTTP/1.1\nHost: evil.example\n",
        f"GET /metrics HTTP/1.1\nHost: evil.example:{port}\n",
        "GET /api/v1/nothing-here HTTP/1.1\nHost: 192.168.1.77\n",  # refused before routing: nothing is told
        f"POST /api/v1/lever HTTP/1.1\nHost: localhost.evil.example:{port}\nContent-Type: application/json\n",
    ):
        code, body = _raw(daemon, head)
        assert (code, body["error"]["field"], body["error"]["status"]) == (421, "Host", 421), head
    assert _delta(counted, _refused(daemon)) == {"wrong_host": 4}
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "LocalHost", f"[::1]:{port}", "127.0.0.1"):
        code, body = _raw(daemon, f"GET /api/v1/status HTTP/1.1\nHost: {host}\n")
        assert code == 200 and body["lever"] is None, host
    # urllib with a Host header of its own: the same refusal.
    code, body = daemon.request("POST", "/api/v1/lever", {"reason": "x"}, headers={"Host": "evil.example"})
    assert code == 421 and body["error"]["field"] == "Host"
    assert _state(daemon) == before


def test_a_change_from_another_origin_is_403_and_one_without_origin_headers_goes_through(daemon: Daemon) -> None:
    port = daemon.base.rsplit(":", 1)[1]
    before, counted = _state(daemon), _refused(daemon)
    for extra, field in (
        ({"Origin": "http://evil.example"}, "Origin"),
        ({"Origin": f"http://localhost:{port}"}, "Origin"),  # same server, another origin (the Host says 127.0.0.1)
        ({"Origin": "null"}, "Origin"),  # a sandboxed frame or a file: page
        ({"Sec-Fetch-Site": "cross-site"}, "Sec-Fetch-Site"),
        ({"Sec-Fetch-Site": "same-site", "Origin": f"http://127.0.0.1:{port}"}, "Sec-Fetch-Site"),
    ):
        for method, path in (("POST", "/api/v1/lever"), ("DELETE", "/api/v1/lever"), ("POST", "/api/v1/survival")):
            code, body = daemon.request(method, path, {} if method == "POST" else None, headers=extra)
            assert (code, body["error"]["field"]) == (403, field), (extra, method, path, body)
    assert _delta(counted, _refused(daemon)) == {"cross_origin": 15}
    assert _state(daemon) == before
    # GETs from anywhere are answered (a page cannot read them without CORS, which is never granted).
    code, _ = daemon.request("GET", "/api/v1/status", headers={"Origin": "http://evil.example"})
    assert code == 200
    # Its own origin, as the Arena sends it (https too: a TLS proxy in front that passes the Host on).
    for extra in (
        {"Origin": f"http://127.0.0.1:{port}", "Sec-Fetch-Site": "same-origin"},
        {"Origin": f"https://127.0.0.1:{port}"},
        {},  # curl, the chaosd client, Chaos Toolkit: neither header
    ):
        code, body = daemon.request("POST", "/api/v1/lever", {"reason": "mine"}, headers=extra)
        assert code == 200 and body["lever"] == "mine", extra
        assert daemon.get("/api/v1/status")[1]["lever"] == "mine"  # the negative control: it did change
        assert daemon.request("DELETE", "/api/v1/lever", headers=extra)[0] == 200
    assert _state(daemon) == before


def test_a_post_must_say_it_is_json_even_without_a_body(daemon: Daemon) -> None:
    before, counted = _state(daemon), _refused(daemon)
    cases = [
        (b"", None),  # what a no-cors fetch with no body sends
        (b"", "text/plain"),
        (b'{"reason": "x"}', "text/plain;charset=UTF-8"),  # a no-cors fetch with a string body
        (b"reason=x", "application/x-www-form-urlencoded"),
        (b"", "multipart/form-data; boundary=x"),
    ]
    for raw, kind in cases:
        for path in ("/api/v1/lever", "/api/v1/windows", "/api/v1/survival", "/api/v1/faults"):
            kind_line = f"Content-Type: {kind}\n" if kind else ""
            code, body = _raw(daemon, f"POST {path} HTTP/1.1\nHost: 127.0.0.1\n{kind_line}", raw)
            assert (code, body["error"]["field"]) == (415, "Content-Type"), (path, kind, body)
            assert "application/json" in body["error"]["message"]
    # A YAML content type is for the scenario upload only; elsewhere the route says so, also 415.
    code, body = daemon.request("POST", "/api/v1/lever", raw=b"", headers={"Content-Type": "application/yaml"})
    assert (code, body["error"]["field"]) == (415, "Content-Type")
    code, body = daemon.request("POST", "/api/v1/scenarios/run", raw=b"", headers={"Content-Type": "text/plain"})
    assert (code, body["error"]["field"]) == (415, "Content-Type")
    assert _delta(counted, _refused(daemon)) == {"unsupported_media_type": len(cases) * 4 + 2}
    assert _state(daemon) == before
    # Declared, an empty body is still fine where the body is optional (the lever, a window, survival).
    code, body = daemon.request("POST", "/api/v1/lever", raw=b"", headers={"Content-Type": "application/json"})
    assert code == 200 and body["lever"], body
    assert daemon.request("DELETE", "/api/v1/lever")[0] == 200  # DELETE takes no body and needs no type


_RECORDED = b'{"reverted": 0, "lever": null}'


class _Recorder:
    """Answers every change as the lever does and keeps the headers it came with (names lower-cased)."""

    def __init__(self) -> None:
        seen = self.seen = list[tuple[str, dict[str, str]]]()

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                seen.append((self.command, {k.lower(): v for k, v in self.headers.items()}))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(_RECORDED)))
                self.end_headers()
                self.wfile.write(_RECORDED)

            do_POST = do_DELETE = _answer

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_the_client_and_chaos_toolkit_declare_json_on_every_change(daemon: Daemon) -> None:
    client = Client(daemon.base, None)
    window = client.request("POST", "/api/v1/windows")  # no body: accepted because the type is still declared
    assert window["state"] == "open"
    client.request("DELETE", f"/api/v1/windows/{window['id']}")
    recorder = _Recorder()
    try:
        Client(recorder.base, None).request("DELETE", "/api/v1/lever")
        Client(recorder.base, None).request("POST", "/api/v1/windows")
        release_lever(configuration={"chaosd_addr": recorder.base})
        pull_lever(configuration={"chaosd_addr": recorder.base})
    finally:
        recorder.close()
    assert [(m, h["content-type"]) for m, h in recorder.seen] == [
        ("DELETE", "application/json"),
        ("POST", "application/json"),
        ("DELETE", "application/json"),
        ("POST", "application/json"),
    ]
    assert not [h for _, h in recorder.seen if "origin" in h or "sec-fetch-site" in h]


# --- configuration ----------------------------------------------------------------------------------------------


def test_allowed_hosts_adds_names_and_a_wildcard_bind_answers_any_host(tmp_path: Path) -> None:
    d = Daemon(tmp_path, env={"CHAOSD_API__ALLOWED_HOSTS": '["chaosd.test", "10.9.8.7", "[fd00::1]"]'})
    try:
        port = d.base.rsplit(":", 1)[1]
        for host in (f"chaosd.test:{port}", "CHAOSD.test.", "10.9.8.7", f"[fd00::1]:{port}", f"localhost:{port}"):
            code, body = _raw(d, f"GET /api/v1/status HTTP/1.1\nHost: {host}\n")
            assert code == 200 and "uptime_s" in body, host
        for host in (f"other.test:{port}", f"sub.chaosd.test:{port}", "10.9.8.70"):
            code, body = _raw(d, f"GET /metrics HTTP/1.1\nHost: {host}\n")
            assert (code, body["error"]["field"]) == (421, "Host"), host
    finally:
        d.kill()
    # The policy as the daemon builds it: a wildcard bind with no list answers any Host (it cannot know the
    # names it is reached by: Prometheus in docker-compose scrapes chaosd:8686); with a list, only those.
    anywhere = HostPolicy(ApiConfig(host="0.0.0.0", token="t" * 16))
    assert anywhere.any and anywhere.allows("chaosd:8686") and anywhere.allows("10.1.2.3:8686")
    listed = HostPolicy(ApiConfig(host="::", token="t" * 16, allowed_hosts=("chaosd",)))
    assert listed.allows("chaosd:8686") and listed.allows("[::1]:8686") and not listed.allows("10.1.2.3:8686")
    bound = HostPolicy(ApiConfig(host="10.0.0.5", token="t" * 16))
    assert bound.allows("10.0.0.5:8686") and bound.allows("localhost") and not bound.allows("evil.example")
    assert HostPolicy(ApiConfig(allowed_hosts=("*",))).allows("evil.example")
    assert HostPolicy(ApiConfig()).allows(None)  # HTTP/1.0 without a Host: no browser sends that
    assert own_origin("http://127.0.0.1:8686", "127.0.0.1:8686") and not own_origin("http://x:1", "127.0.0.1:1")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ('"chaosd"', "must be a list of host names"),
        ('["http://chaosd"]', "a host name, not a URL"),
        ('["chaosd:8686"]', "no port"),
        ('["*.example.com"]', 'the only wildcard is "*" alone'),
        ('[""]', "empty"),
        ('["bad host"]', "not a host name"),
        ('["[zz::]"]', "not an IPv6 address"),
    ],
)
def test_allowed_hosts_entries_are_checked(value: str, message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load_settings(None, {"api": {"allowed_hosts": json.loads(value)}})
    (line,) = exc.value.lines()
    assert "api.allowed_hosts" in line and message in line, line


def test_a_bad_allowed_hosts_stops_the_daemon_with_exit_2_naming_the_key(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CHAOSD_API__ALLOWED_HOSTS": '["chaosd:8686"]'}
    proc = subprocess.run(
        [sys.executable, "-m", "chaosd"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 2
    assert "api.allowed_hosts" in proc.stderr and "no port" in proc.stderr, proc.stderr
    assert not (tmp_path / "chaosd-data").exists()  # refused before anything started
