"""The client commands against a real HTTP server speaking docs/api.md: what they send, print and return."""

from __future__ import annotations

import argparse
import io
import json
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from daemon_harness import TOKEN, Daemon, wait_for

from chaosd.cli import plan_watch, transport
from chaosd.cli.client import Client, ClientError, add_client_commands, run_client_command
from chaosd.cli.exits import (
    EXIT_EXPECTATION,
    EXIT_OK,
    EXIT_PLAN_FAILED,
    EXIT_REJECTED,
    EXIT_SERVER,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
)


@dataclass(frozen=True)
class Seen:
    """One request as the daemon received it."""

    method: str
    path: str  # with the query string
    headers: dict[str, str]  # names lower-cased
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


Route = Callable[[Seen], tuple[int, Any]]


def _fault(fault_id: int, action: str, **extra: Any) -> dict[str, Any]:
    fault: dict[str, Any] = {
        "id": fault_id,
        "action": action,
        "target": "worker",
        "targets": ["worker-1", "worker-2"],
        "params": {},
        "ttl": 30.0,
        "injected_at": 12.5,
        "reverted_at": None,
        "reverted_by": None,
        "mechanism_recovered_at": None,
        "service_recovered_at": None,
        "recovery_s": None,
        "recovered": False,
        "outcome": "active",
    }
    fault.update(extra)
    return fault


def _report() -> dict[str, Any]:
    # kill_worker recovered 20 times in 1..20 s (listed out of order) and failed once: mean 10.5, p95 19 (not the max).
    faults = [
        _fault(i, "kill_worker", recovery_s=float(21 - i), recovered=True, outcome="recovered") for i in range(1, 21)
    ]
    faults.append(_fault(21, "kill_worker", outcome="failed"))
    faults.append(_fault(22, "latency_spike", recovery_s=0.5, recovered=True, outcome="recovered"))
    faults.append(_fault(23, "partition_mcp", outcome="failed"))
    return {
        "score": {"total": 83.27, "grade": "B", "availability": 90.0, "recovery": 80.0, "consistency": 78.0},
        "faults": faults,
        "faults_summary": {"injected": 23, "recovered": 21, "failed": 2, "pending": 0, "lever": None},
        "diagnostics": [
            {"cause": "failed:timeout", "count": 30, "share": 0.6},
            {"cause": "lost", "count": 20, "share": 0.4},
        ],
    }


@dataclass
class FakeDaemon:
    """Just enough of docs/api.md, with canned answers; records every request it receives."""

    addr: str = ""
    requests: list[Seen] = field(default_factory=list)
    routes: dict[tuple[str, str], Route] = field(default_factory=dict)
    polls: int = 0
    scenario_passed: bool | None = True
    end_state: str = (
        "finished"  # how the plans end: finished, stopped or failed (chaosd/daemon/control.py PlanRun.state)
    )
    end_reason: str | None = None
    # GET /api/v1/faults/{id}: the answers for each id, in turn (the last one repeats).
    fault_answers: dict[int, list[dict[str, Any]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.routes.update(
            {
                ("POST", "/api/v1/faults"): self._inject,
                ("GET", "/api/v1/faults"): self._faults,
                ("DELETE", "/api/v1/faults/7"): lambda _: (200, _fault(7, "kill_worker", reverted_at=40.0)),
                ("POST", "/api/v1/lever"): lambda seen: (
                    200,
                    {"lever": seen.json().get("reason", "operator"), "reverted": 2},
                ),
                ("DELETE", "/api/v1/lever"): lambda _: (200, {"lever": None}),
                ("POST", "/api/v1/survival"): lambda _: (201, self._plan("running", 0.0)),
                ("GET", "/api/v1/survival"): self._survival,
                ("DELETE", "/api/v1/survival"): lambda _: (
                    200,
                    self._plan("stopped", 6.0 * self.polls, "stopped by api"),
                ),
                ("GET", "/api/v1/report"): lambda _: (200, _report()),
                ("POST", "/api/v1/scenarios/run"): lambda _: (201, self._scenario("running")),
                ("GET", "/api/v1/scenarios/current"): self._scenario_current,
                ("DELETE", "/api/v1/scenarios/current"): lambda _: (
                    200,
                    {**self._scenario("stopped"), "reason": "stopped by request"},
                ),
            }
        )

    def route(self, method: str, path: str) -> Route | None:
        if method == "GET" and path.startswith("/api/v1/faults/") and (method, path) not in self.routes:
            fault_id = int(path.rsplit("/", 1)[1])
            if fault_id in self.fault_answers:
                return lambda _: (200, self._fault_answer(fault_id))
        return self.routes.get((method, path))

    def _fault_answer(self, fault_id: int) -> dict[str, Any]:
        answers = self.fault_answers[fault_id]
        return answers.pop(0) if len(answers) > 1 else answers[0]

    def sent(self, method: str | None = None) -> list[Seen]:
        return [r for r in self.requests if method is None or r.method == method]

    def _inject(self, seen: Seen) -> tuple[int, Any]:
        body = seen.json()
        return 201, _fault(7, body["action"], target=body.get("target"), params=body.get("params", {}))

    def _faults(self, seen: Seen) -> tuple[int, Any]:
        recovered = _fault(3, "latency_spike", outcome="recovered", recovered=True, recovery_s=1.25, reverted_at=42.5)
        active = _fault(4, "kill_worker", targets=["worker-3"], injected_at=50.0)
        return 200, {"faults": [active] if "active=true" in seen.path else [recovered, active]}

    def _plan(self, state: str, elapsed: float, reason: str | None = None) -> dict[str, Any]:
        actions = int(elapsed // 6)
        score = {"total": 91.0, "grade": "A"} if actions else {}
        return {"state": state, "elapsed_s": elapsed, "actions": actions, "score": score, "reason": reason}

    def _survival(self, seen: Seen) -> tuple[int, Any]:
        self.polls += 1
        if self.polls >= 3:
            return 200, self._plan(self.end_state, 6.0 * self.polls, self.end_reason)
        return 200, self._plan("running", 6.0 * self.polls)

    def _scenario(self, state: str) -> dict[str, Any]:
        done = state == "finished"
        expectations: list[dict[str, Any]] = [
            {"check": "min_grade", "expected": "A", "measured": "A" if self.scenario_passed else "C"},
            {"check": "lost_tasks", "expected": 0, "measured": 0, "passed": True},
        ]
        expectations[0]["passed"] = bool(self.scenario_passed)
        return {
            "state": state,
            "name": "my_storm",
            "elapsed_s": 6.0 * self.polls,
            "actions": [{"at": 1.0, "action": "kill_leader", "ok": True}] * self.polls,
            "expectations": expectations if done else [],
            "passed": self.scenario_passed if done else None,
            "score": {"total": 75.0, "grade": "C"},
            "reason": None if state in ("running", "finished") else self.end_reason,
        }

    def _scenario_current(self, seen: Seen) -> tuple[int, Any]:
        self.polls += 1
        return 200, self._scenario(self.end_state if self.polls >= 2 else "running")


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, fake: FakeDaemon) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.fake = fake


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self._answer()

    def do_DELETE(self) -> None:
        self._answer()

    def _answer(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        seen = Seen(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
        fake = self.server.fake
        fake.requests.append(seen)
        route = fake.route(self.command, urlsplit(self.path).path)
        status, payload = (
            route(seen) if route else (404, {"error": {"status": 404, "field": None, "message": "no route"}})
        )
        if isinstance(payload, bytes):
            data, kind = payload, "text/plain; charset=utf-8"
        else:
            data, kind = json.dumps(payload).encode(), "application/json; charset=utf-8"
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def daemon(request: pytest.FixtureRequest) -> FakeDaemon:
    fake = FakeDaemon()
    server = _Server(fake)
    fake.addr = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join()

    request.addfinalizer(stop)
    return fake


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("CHAOSD_URL", "CHAOSD_ADDR", "CHAOSD_API__TOKEN", "CHAOSD_TOKEN", "CHAOSD_API__TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(plan_watch, "_POLL_S", 0.01)  # the fake daemon answers at once; no need to wait 1 s


@pytest.fixture
def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def _cli(*argv: str) -> tuple[int, list[str], list[str]]:
    parser = argparse.ArgumentParser(prog="chaosd")
    add_client_commands(parser.add_subparsers(dest="command"))
    out: list[str] = []
    err: list[str] = []
    code = run_client_command(parser.parse_args(list(argv)), out.append, err.append)
    return code, out, err


def test_inject_sends_action_target_params_ttl_and_the_bearer_token(daemon: FakeDaemon) -> None:
    code, out, err = _cli(
        "inject", "latency_spike", "--addr", daemon.addr, "--token", "s3cret",
        "--target", "worker-1", "--param", "delay=0.25", "--param", "factor=3", "--param", "jitter=lots", "--ttl", "2m",
    )  # fmt: skip
    assert (code, err) == (EXIT_OK, [])
    [seen] = daemon.requests
    assert (seen.method, seen.path) == ("POST", "/api/v1/faults")
    assert seen.headers["authorization"] == "Bearer s3cret"
    assert seen.headers["content-type"] == "application/json"
    assert seen.json() == {
        "action": "latency_spike",
        "target": "worker-1",
        "params": {"delay": 0.25, "factor": 3.0, "jitter": "lots"},  # not a number: sent for the server to name
        "ttl": 120.0,
    }
    assert out == ["fault 7 injected: latency_spike on worker-1, worker-2 · ttl 30 s"]


def test_inject_json_prints_the_fault_the_daemon_answered(daemon: FakeDaemon) -> None:
    code, out, _ = _cli("inject", "kill_worker", "--addr", daemon.addr, "--json")
    assert code == EXIT_OK
    assert json.loads("\n".join(out)) == _fault(7, "kill_worker", target=None)
    assert daemon.requests[0].json() == {"action": "kill_worker"}  # nothing the user did not ask for
    assert "authorization" not in daemon.requests[0].headers


def test_address_and_token_come_from_the_environment(daemon: FakeDaemon, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHAOSD_ADDR", daemon.addr.removeprefix("http://"))  # host:port is enough
    monkeypatch.setenv("CHAOSD_TOKEN", "fallback")
    assert _cli("release")[0] == EXIT_OK
    monkeypatch.setenv("CHAOSD_API__TOKEN", "primary")
    assert _cli("release")[0] == EXIT_OK
    assert _cli("release", "--token", "flag")[0] == EXIT_OK
    assert [r.headers["authorization"] for r in daemon.requests] == ["Bearer fallback", "Bearer primary", "Bearer flag"]
    assert all((r.method, r.path) == ("DELETE", "/api/v1/lever") for r in daemon.requests)


def test_host_and_port_instead_of_addr(daemon: FakeDaemon) -> None:
    port = daemon.addr.rsplit(":", 1)[1]
    assert _cli("release", "--host", "127.0.0.1", "--port", port) == (
        EXIT_OK,
        ["lever released: faults may be injected again"],
        [],
    )
    assert _cli("release", "--port", port)[0] == EXIT_OK  # the host defaults to 127.0.0.1
    assert _cli("release", "--host", "[127.0.0.1]", "--port", port)[0] == EXIT_OK  # brackets, as in a URL, are fine
    assert [(r.method, r.path) for r in daemon.requests] == [("DELETE", "/api/v1/lever")] * 3
    assert {r.headers["host"] for r in daemon.requests} == {f"127.0.0.1:{port}"}


def test_chaosd_url_is_read_when_no_address_is_given(daemon: FakeDaemon, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHAOSD_URL", daemon.addr)
    monkeypatch.setenv("CHAOSD_ADDR", "127.0.0.1:1")  # the older name: CHAOSD_URL wins
    assert _cli("release")[0] == EXIT_OK
    assert len(daemon.requests) == 1


def test_addr_beats_host_and_port_which_beat_chaosd_url(
    daemon: FakeDaemon, closed_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = daemon.addr.rsplit(":", 1)[1]
    monkeypatch.setenv("CHAOSD_URL", f"http://127.0.0.1:{closed_port}")
    assert _cli("release", "--port", port)[0] == EXIT_OK  # --host/--port over CHAOSD_URL
    assert _cli("release", "--addr", daemon.addr, "--port", str(closed_port))[0] == EXIT_OK  # --addr over both
    assert len(daemon.requests) == 2
    code, _, err = _cli("release")  # and CHAOSD_URL when neither is given
    assert code == EXIT_UNREACHABLE and f"127.0.0.1:{closed_port}" in err[0]


def test_the_help_gives_the_order_in_which_the_address_is_chosen() -> None:
    parser = argparse.ArgumentParser(prog="chaosd")
    sub = parser.add_subparsers(dest="command")
    add_client_commands(sub)
    text = " ".join(sub.choices["inject"].format_help().split())
    assert "first of: --addr, --host/--port, $CHAOSD_URL, http://127.0.0.1:8686" in text
    assert "--host HOST" in text and "--port PORT" in text


@pytest.mark.parametrize(
    ("how", "origin"),
    [
        ("--addr", ""),
        ("--port", " (from --host/--port)"),
        ("CHAOSD_URL", " (from CHAOSD_URL)"),
        ("default", " (the default address)"),
    ],
)
def test_an_unreachable_daemon_names_the_address_tried_and_how_to_give_another(
    closed_port: int, monkeypatch: pytest.MonkeyPatch, how: str, origin: str
) -> None:
    addr = f"http://127.0.0.1:{closed_port}"
    argv = ["faults"]
    if how == "--addr":
        argv += ["--addr", addr]
    elif how == "--port":
        argv += ["--port", str(closed_port)]
    elif how == "CHAOSD_URL":
        monkeypatch.setenv("CHAOSD_URL", addr)
    else:  # never the real default: a daemon may be listening there
        monkeypatch.setattr(transport, "DEFAULT_ADDR", addr)
    code, out, err = _cli(*argv)
    assert (code, out) == (EXIT_UNREACHABLE, [])
    assert err == [
        f"chaosd: error: cannot reach chaosd at {addr}{origin}: connection refused (is the daemon running?); "
        "give the daemon's address with --addr URL (or --host/--port) or set CHAOSD_URL"
    ]


def test_a_bad_chaosd_url_exits_2_naming_it(daemon: FakeDaemon, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHAOSD_URL", "ftp://127.0.0.1:1")
    code, _, err = _cli("faults")
    assert code == EXIT_USAGE and err[0].startswith("chaosd: error: CHAOSD_URL: not a daemon address")


def test_a_rejected_request_exits_5_with_the_field_and_message(daemon: FakeDaemon) -> None:
    error = {"error": {"status": 422, "field": "ttl", "message": "must be at most 600 s (got 3600)"}}
    daemon.routes["POST", "/api/v1/faults"] = lambda _: (422, error)
    code, out, err = _cli("inject", "kill_worker", "--addr", daemon.addr, "--ttl", "1h")
    assert (code, out) == (EXIT_REJECTED, [])
    assert err == ["chaosd: error: rejected (422): ttl: must be at most 600 s (got 3600)"]


def test_a_missing_token_is_rejected_with_a_hint_and_a_plain_text_error_still_reads(daemon: FakeDaemon) -> None:
    daemon.routes["POST", "/api/v1/lever"] = lambda _: (401, {"error": {"status": 401, "message": "bearer token"}})
    code, _, err = _cli("abort", "--addr", daemon.addr)
    assert code == EXIT_REJECTED
    assert "401" in err[0] and "bearer token" in err[0] and "--token" in err[0]
    daemon.routes["DELETE", "/api/v1/faults/9"] = lambda _: (404, b"404: Not Found")
    code, _, err = _cli("revert", "9", "--addr", daemon.addr)
    assert (code, err) == (EXIT_REJECTED, ["chaosd: error: rejected (404): 404: Not Found"])


def test_a_server_error_exits_6(daemon: FakeDaemon) -> None:
    error = {"error": {"status": 500, "field": None, "message": "internal error"}}
    daemon.routes["GET", "/api/v1/report"] = lambda _: (500, error)
    code, out, err = _cli("inspect", "--addr", daemon.addr)
    assert (code, out) == (EXIT_SERVER, [])
    assert "500" in err[0] and "internal error" in err[0] and daemon.addr in err[0]


def test_an_answer_in_the_wrong_shape_exits_6_without_a_traceback(daemon: FakeDaemon) -> None:
    daemon.routes["GET", "/api/v1/faults"] = lambda _: (200, {"items": []})
    code, _, err = _cli("faults", "--addr", daemon.addr)
    assert code == EXIT_SERVER
    assert "unexpected answer" in err[0] and "faults" in err[0]


def test_an_unreachable_daemon_exits_4_naming_the_address(closed_port: int) -> None:
    addr = f"127.0.0.1:{closed_port}"
    code, out, err = _cli("faults", "--addr", addr)
    assert (code, out) == (EXIT_UNREACHABLE, [])
    assert f"http://{addr}" in err[0] and "connection refused" in err[0]


def test_a_daemon_that_never_answers_times_out_with_exit_4() -> None:
    with socket.socket() as listener:  # accepts connections (backlog) but never reads or answers
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        addr = f"127.0.0.1:{listener.getsockname()[1]}"
        with pytest.raises(ClientError) as info:
            Client(addr, None, timeout=0.1).request("GET", "/api/v1/status")
    assert info.value.code == EXIT_UNREACHABLE
    assert info.value.message == f"no answer from chaosd at http://{addr} within 0.1 s"


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["inject", "kill_worker", "--param", "rate"], "--param"),
        (["inject", "kill_worker", "--param", "=3"], "--param"),
        (["inject", "kill_worker", "--param", "a=1", "--param", "a=2"], "--param"),
        (["inject", "kill_worker", "--ttl", "soon"], "--ttl"),
        (["survival", "--duration", "forever"], "--duration"),
        (["survival", "--interval", "0s"], "--interval"),
        (["survival", "--actions", " , "], "--actions"),
        (["scenario", "run", "baseline", "--speed", "fast"], "--speed"),
        (["scenario", "run", "missing/storm.yaml"], "FILE_OR_NAME"),
        (["revert", "seven"], "ID"),
        (["faults", "--addr", "ftp://127.0.0.1:1"], "--addr"),
        (["faults", "--addr", "127.0.0.1:99999"], "--addr"),
        (["faults", "--port", "http"], "--port"),
        (["faults", "--port", "0"], "--port"),  # a client needs the daemon's real port
        (["faults", "--port", "65536"], "--port"),
        (["faults", "--host", "http://127.0.0.1"], "--host"),
        (["faults", "--host", ""], "--host"),
    ],
)
def test_bad_input_exits_2_naming_the_flag_and_sends_nothing(daemon: FakeDaemon, argv: list[str], flag: str) -> None:
    if "--addr" not in argv:
        argv = [*argv, "--addr", daemon.addr]
    code, out, err = _cli(*argv)
    assert (code, out) == (EXIT_USAGE, [])
    assert err[0].startswith(f"chaosd: error: {flag}: ")
    assert daemon.requests == []


def test_faults_prints_a_table_and_active_asks_for_active_faults(daemon: FakeDaemon) -> None:
    code, out, _ = _cli("faults", "--addr", daemon.addr)
    assert code == EXIT_OK
    assert out[0].split() == ["id", "action", "targets", "outcome", "injected_at", "recovery_s"]
    assert out[1].split() == ["3", "latency_spike", "worker-1,", "worker-2", "recovered", "12.50", "1.25"]
    assert out[2].split() == ["4", "kill_worker", "worker-3", "active", "50.00", "-"]
    assert len({len(line) for line in out[:2]}) == 1  # columns line up
    code, out, _ = _cli("faults", "--active", "--addr", daemon.addr)
    assert [r.path for r in daemon.requests] == ["/api/v1/faults", "/api/v1/faults?active=true"]
    assert [line.split()[0] for line in out] == ["id", "4"]


def test_revert_abort_and_release_send_the_documented_requests(daemon: FakeDaemon) -> None:
    assert _cli("revert", "7", "--addr", daemon.addr, "--token", "t") == (
        EXIT_OK,
        ["fault 7 reverted: kill_worker on worker-1, worker-2 (active)"],
        [],
    )
    code, out, _ = _cli("abort", "--reason", "pager went off", "--addr", daemon.addr, "--token", "t")
    assert (code, out) == (EXIT_OK, ["lever pulled (pager went off): 2 fault(s) reverted; new faults are refused"])
    assert _cli("release", "--addr", daemon.addr, "--token", "t")[0] == EXIT_OK
    assert [(r.method, r.path) for r in daemon.requests] == [
        ("DELETE", "/api/v1/faults/7"),
        ("POST", "/api/v1/lever"),
        ("DELETE", "/api/v1/lever"),
    ]
    assert daemon.requests[1].json() == {"reason": "pager went off"}
    assert {r.headers["authorization"] for r in daemon.requests} == {"Bearer t"}


def test_inspect_prints_the_score_counts_and_mean_and_p95_per_action(daemon: FakeDaemon) -> None:
    code, out, _ = _cli("inspect", "--addr", daemon.addr)
    assert code == EXIT_OK
    assert daemon.requests[0].path == "/api/v1/report"
    assert out[0] == "score      83.3 (B)"
    assert out[1] == "recovery   recovered 21 of 23 judged, 91.3%"
    assert out[2] == "faults     23 total · 21 recovered · 2 failed · 0 pending"
    rows = {line.split()[0]: line.split()[1:] for line in out if line.startswith("  ")}
    assert rows["action"] == ["faults", "recovered", "mean", "p95"]
    assert rows["kill_worker"] == ["21", "20", "10.5", "s", "19.0", "s"]  # nearest rank: the 19th of 20
    assert rows["latency_spike"] == ["1", "1", "0.5", "s", "0.5", "s"]
    assert rows["partition_mcp"] == ["1", "0", "-", "-"]
    assert rows["failed:timeout"] == ["30", "60.0%"]
    assert rows["lost"] == ["20", "40.0%"]
    assert out[out.index("what to fix") + 1].startswith("  - lost tasks (lost 20)")


def test_inspect_counts_pending_faults_apart_and_time_causes_in_seconds(daemon: FakeDaemon) -> None:
    """The score's rate is over judged faults: pending ones are not 'not recovered'; seconds are not a count."""
    report = {
        "score": {"total": 97.0, "grade": "A+"},
        "faults": [
            _fault(1, "kill_worker", recovery_s=3.11697, recovered=True, outcome="recovered"),
            _fault(2, "kill_worker", recovery_s=0.015033, recovered=True, outcome="recovered"),
            _fault(3, "kill_leader", recovery_s=1.0, recovered=True, outcome="recovered"),
            _fault(4, "kill_leader", outcome="active"),
            _fault(5, "kill_leader", outcome="recovering"),
        ],
        "faults_summary": {"injected": 5, "recovered": 3, "failed": 0, "pending": 2, "unmeasured": 0, "lever": None},
        "diagnostics": [
            {"cause": "collapsed_s", "count": 69, "share": 0.69, "episodes": 1, "final_state": "healthy"},
            {"cause": "late", "count": 31, "share": 0.31},
        ],
    }
    daemon.routes["GET", "/api/v1/report"] = lambda _: (200, report)
    code, out, _ = _cli("inspect", "--addr", daemon.addr)
    assert code == EXIT_OK
    assert out[1] == "recovery   recovered 3 of 3 judged, 100.0% (2 pending)"
    assert out[2] == "faults     5 total · 3 recovered · 0 failed · 2 pending"
    rows = {line.split()[0]: line.split()[1:] for line in out if line.startswith("  ")}
    assert rows["kill_worker"] == ["2", "2", "1.6", "s", "3.1", "s"]  # 0.1 s from 1 s up
    assert rows["kill_leader"] == ["3", "1", "1.0", "s", "1.0", "s"]
    assert rows["late"] == ["31", "100.0%"]  # the share of the counted problems: seconds are not among them
    assert "collapsed_s" not in rows
    assert "  time collapsed 69 s (1 episode(s), final state healthy)" in out
    assert not any("3.11697" in line or "0.015033" in line for line in out)


def test_inspect_says_the_table_by_action_covers_only_the_listed_faults(daemon: FakeDaemon) -> None:
    """A long run's report lists its newest faults: the table must not pass for all that the header counts."""
    report: dict[str, Any] = {
        "score": {"total": 90.0, "grade": "A"},
        "faults": [_fault(i, "kill_worker", recovery_s=1.0, recovered=True, outcome="recovered") for i in (249, 250)],
        "faults_summary": {
            "injected": 250,
            "recovered": 250,
            "failed": 0,
            "pending": 0,
            "unmeasured": 0,
            "lever": None,
            "faults_listed": 2,
        },
        "diagnostics": [],
    }
    daemon.routes["GET", "/api/v1/report"] = lambda _: (200, report)
    code, out, _ = _cli("inspect", "--addr", daemon.addr)
    assert code == EXIT_OK
    assert out[2] == "faults     250 total · 250 recovered · 0 failed · 0 pending"
    assert "recovery time by action (the newest 2 of 250 faults)" in out
    rows = {line.split()[0]: line.split()[1:] for line in out if line.startswith("  ")}
    assert rows["kill_worker"][:2] == ["2", "2"]
    # All listed: the table covers every fault and says nothing more.
    report["faults_summary"] = {**report["faults_summary"], "injected": 2, "recovered": 2}
    code, out, _ = _cli("inspect", "--addr", daemon.addr)
    assert "recovery time by action" in out


def test_inspect_json_prints_the_report(daemon: FakeDaemon) -> None:
    code, out, _ = _cli("inspect", "--json", "--addr", daemon.addr)
    assert code == EXIT_OK
    assert json.loads("\n".join(out)) == _report()


def test_scenario_file_is_posted_as_yaml_and_a_failed_expectation_exits_3(daemon: FakeDaemon, tmp_path: Path) -> None:
    daemon.scenario_passed = False
    scenario = tmp_path / "storm.yaml"
    scenario.write_text("name: my_storm\nduration: 60\nexpect:\n  min_grade: A\n  lost_tasks: 0\n")
    code, out, _ = _cli("scenario", "run", str(scenario), "--speed", "5", "--addr", daemon.addr, "--token", "t")
    assert code == EXIT_EXPECTATION
    post, *polls = daemon.requests
    assert (post.method, post.path) == ("POST", "/api/v1/scenarios/run?speed=5")
    assert post.headers["content-type"] == "application/yaml"
    assert post.body == scenario.read_bytes()
    assert [(r.method, r.path) for r in polls] == [("GET", "/api/v1/scenarios/current")] * 2
    assert out == [
        "scenario my_storm started (speed 5×)",
        "  expect     FAIL: min_grade A (measured C)",
        "  expect     pass: lost_tasks 0 (measured 0)",
        "scenario my_storm finished: FAILED · elapsed 0:00:12 · actions 2 · score 75.0 (C)",
    ]


def test_scenario_by_name_posts_json_and_a_pass_exits_0(daemon: FakeDaemon) -> None:
    code, out, _ = _cli("scenario", "run", "leader_assassination", "--addr", daemon.addr)
    assert code == EXIT_OK
    assert daemon.requests[0].json() == {"name": "leader_assassination", "speed": 1}
    assert out[-1].startswith("scenario my_storm finished: passed")


def test_scenario_no_wait_returns_once_started(daemon: FakeDaemon) -> None:
    code, out, _ = _cli("scenario", "run", "baseline", "--speed", "2.5", "--no-wait", "--addr", daemon.addr)
    assert (code, out) == (EXIT_OK, ["scenario my_storm started (speed 2.5×)"])
    assert [(r.method, r.json()) for r in daemon.requests] == [("POST", {"name": "baseline", "speed": 2.5})]


def test_survival_polls_until_finished_printing_a_line_per_10_s(daemon: FakeDaemon) -> None:
    code, out, _ = _cli(
        "survival", "--duration", "1m", "--interval", "2s", "--actions", "kill_worker, latency_spike",
        "--addr", daemon.addr, "--token", "t",
    )  # fmt: skip
    assert code == EXIT_OK
    post, *polls = daemon.requests
    assert (post.method, post.path, post.headers["authorization"]) == ("POST", "/api/v1/survival", "Bearer t")
    assert post.json() == {"interval": "2s", "duration": "1m", "actions": ["kill_worker", "latency_spike"]}
    assert [(r.method, r.path) for r in polls] == [("GET", "/api/v1/survival")] * 3
    assert out == [  # elapsed 0, 6, 12, 18 s: only 0 and 12 are 10 s apart, then the final status
        "survival running: elapsed 0:00:00 · actions 0 · score -",
        "survival running: elapsed 0:00:12 · actions 2 · score 91.0 (A)",
        "survival finished: elapsed 0:00:18 · actions 3 · score 91.0 (A)",
    ]


def test_survival_ctrl_c_stops_it_on_the_daemon(daemon: FakeDaemon, monkeypatch: pytest.MonkeyPatch) -> None:
    pauses = iter([None])

    def pause() -> None:
        if next(pauses, "interrupt"):
            raise KeyboardInterrupt

    monkeypatch.setattr(plan_watch, "_pause", pause)
    code, out, _ = _cli("survival", "--addr", daemon.addr)
    assert code == EXIT_OK
    assert [(r.method, r.path) for r in daemon.requests] == [
        ("POST", "/api/v1/survival"),
        ("GET", "/api/v1/survival"),
        ("DELETE", "/api/v1/survival"),
    ]
    assert daemon.requests[0].json() == {"interval": "10s", "duration": "30m"}
    assert out[-2:] == [
        "interrupted: stopping survival",
        "survival stopped: elapsed 0:00:06 · actions 1 · score 91.0 (A) · stopped by api",
    ]


def test_survival_on_a_terminal_redraws_one_line(daemon: FakeDaemon, monkeypatch: pytest.MonkeyPatch) -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    monkeypatch.setattr("sys.stdout", terminal)
    code, out, _ = _cli("survival", "--addr", daemon.addr)
    assert code == EXIT_OK
    drawn = terminal.getvalue()
    assert drawn.count("\r") == 4 and drawn.endswith("\n") and drawn.count("\n") == 1
    assert drawn.split("\r")[-1].rstrip() == "survival finished: elapsed 0:00:18 · actions 3 · score 91.0 (A)"
    assert out == ["survival finished: elapsed 0:00:18 · actions 3 · score 91.0 (A)"]


def test_a_survival_that_vanishes_is_a_server_error_not_an_endless_poll(daemon: FakeDaemon) -> None:
    daemon.routes["GET", "/api/v1/survival"] = lambda _: (200, {"state": "idle"})
    code, _, err = _cli("survival", "--addr", daemon.addr)
    assert code == EXIT_SERVER
    assert "idle" in err[0]
    assert len(daemon.requests) == 2


@pytest.mark.parametrize(
    ("state", "reason", "code"),
    [
        ("finished", None, EXIT_OK),  # the negative control: a run that reached its end
        ("failed", "RuntimeError: plan crashed", EXIT_PLAN_FAILED),
        ("stopped", "daemon shutting down", EXIT_PLAN_FAILED),  # not by this client
    ],
)
def test_survival_ends_on_every_end_state_with_a_code_that_says_which(
    daemon: FakeDaemon, state: str, reason: str | None, code: int
) -> None:
    daemon.end_state, daemon.end_reason = state, reason
    got, out, err = _cli("survival", "--addr", daemon.addr)
    assert got == code
    assert [(r.method, r.path) for r in daemon.requests[1:]] == [("GET", "/api/v1/survival")] * 3  # then it stops
    assert out[-1].startswith(f"survival {state}: elapsed 0:00:18")
    assert err == ([] if code == EXIT_OK else [f"chaosd: the run {state} before its end: {reason}"])


@pytest.mark.parametrize(
    ("state", "code"), [("finished", EXIT_OK), ("failed", EXIT_PLAN_FAILED), ("stopped", EXIT_PLAN_FAILED)]
)
def test_scenario_wait_ends_on_every_end_state_with_a_code_that_says_which(
    daemon: FakeDaemon, state: str, code: int
) -> None:
    daemon.end_state, daemon.end_reason = state, None if state == "finished" else f"{state} for the test"
    got, out, err = _cli("scenario", "run", "baseline", "--addr", daemon.addr)
    assert got == code
    assert [(r.method, r.path) for r in daemon.requests[1:]] == [("GET", "/api/v1/scenarios/current")] * 2
    verdict = "passed" if state == "finished" else "no verdict"
    assert out[-1].startswith(f"scenario my_storm {state}: {verdict}")
    assert (err == []) == (code == EXIT_OK)


def test_an_unknown_plan_state_is_a_server_error_not_an_endless_poll(daemon: FakeDaemon) -> None:
    daemon.routes["GET", "/api/v1/survival"] = lambda _: (200, {"state": "exploded"})
    code, _, err = _cli("survival", "--addr", daemon.addr)
    assert code == EXIT_SERVER
    assert "unknown plan state 'exploded'" in err[0]
    assert len(daemon.requests) == 2


def test_the_plan_exit_codes_are_in_the_help() -> None:
    parser = argparse.ArgumentParser(prog="chaosd")
    sub = parser.add_subparsers(dest="command")
    add_client_commands(sub)
    survival = sub.choices["survival"].format_help()
    assert "7 the run did not reach its end" in " ".join(survival.split())


def test_a_real_daemon_survival_stopped_by_another_client_ends_this_one_with_exit_7(tmp_path: Path) -> None:
    daemon = Daemon(tmp_path)
    try:
        argv = [sys.executable, "-m", "chaosd", "survival", "--addr", daemon.base, "--token", TOKEN, "--duration", "5m"]
        client = subprocess.Popen(argv, env=daemon.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            wait_for(lambda: daemon.get("/api/v1/survival")[1]["state"] == "running", 15, "survival to start")
            assert client.poll() is None  # the negative control: it polls while the run goes on
            stop = [sys.executable, "-m", "chaosd", "survival", "stop", "--addr", daemon.base, "--token", TOKEN]
            stopped = subprocess.run(stop, env=daemon.env, capture_output=True, text=True, timeout=30, check=False)
            assert stopped.returncode == EXIT_OK, (stopped.stdout, stopped.stderr)
            assert stopped.stdout.startswith("survival stopped: ") and "stopped by request" in stopped.stdout
            out, err = client.communicate(timeout=15)
        finally:
            if client.poll() is None:
                client.kill()
                client.wait()
        assert client.returncode == EXIT_PLAN_FAILED, (out, err)
        assert "survival stopped" in out and "stopped by request" in err
    finally:
        daemon.kill()


def test_survival_prints_each_fault_and_its_verdict_as_they_happen(daemon: FakeDaemon) -> None:
    """The fault ids come from the status's log, each verdict from the fault's record, rounded for reading."""
    injected = {"at": 12.04, "action": "kill_worker", "target": "worker-2", "ok": True, "fault": 1}
    skipped = {"at": 22.0, "action": "skip", "ok": False, "reason": "skipped: previous fault still recovering"}
    second = {"at": 32.0, "action": "kill_leader", "target": "orchestrator-0", "ok": True, "fault": 2}
    logs = [[injected], [injected, skipped, second], [injected, skipped, second]]

    def survival(seen: Seen) -> tuple[int, Any]:
        code, status = daemon._survival(seen)
        return code, {**status, "started_at": 2.0, "log": logs[min(daemon.polls, 3) - 1]}

    daemon.routes["GET", "/api/v1/survival"] = survival
    daemon.fault_answers = {
        1: [_fault(1, "kill_worker"), _fault(1, "kill_worker", outcome="recovered", recovery_s=3.11697)],
        2: [_fault(2, "kill_leader", outcome="failed")],
    }
    code, out, _ = _cli("survival", "--addr", daemon.addr)
    assert code == EXIT_OK
    events = [line for line in out if not line.startswith("survival ")]
    assert events == [
        "t=10.0 s  fault 1 injected: kill_worker on worker-2",
        "t=20.0 s  skipped: previous fault still recovering",
        "t=30.0 s  fault 2 injected: kill_leader on orchestrator-0",
        "fault 1 recovered in 3.1 s (kill_worker)",
        "fault 2 failed (kill_leader): the service did not come back within recovery.limit of the fault's end",
    ]
    asked = [r.path for r in daemon.requests if r.path.startswith("/api/v1/faults/")]
    assert asked == ["/api/v1/faults/1", "/api/v1/faults/1", "/api/v1/faults/2"]  # none once it has its verdict


def test_survival_ending_before_a_verdict_says_so(daemon: FakeDaemon) -> None:
    entry = {"at": 3.0, "action": "kill_worker", "target": "worker-1", "ok": True, "fault": 9}
    daemon.routes["GET", "/api/v1/survival"] = lambda seen: (200, {**daemon._survival(seen)[1], "log": [entry]})
    daemon.fault_answers = {9: [_fault(9, "kill_worker", outcome="recovering")]}
    code, out, _ = _cli("survival", "--addr", daemon.addr)
    assert code == EXIT_OK
    assert "fault 9 (kill_worker): no verdict yet when the run ended" in out


def test_survival_stop_and_scenario_stop_send_delete_with_the_token(daemon: FakeDaemon) -> None:
    daemon.routes["DELETE", "/api/v1/survival"] = lambda _: (
        200,
        {**daemon._plan("stopped", 30.0, "stopped by request"), "log": [{"action": "stop", "reverted": [4, 5]}]},
    )
    code, out, _ = _cli("survival", "stop", "--addr", daemon.addr, "--token", "t")
    assert code == EXIT_OK
    assert out == [
        "survival stopped: elapsed 0:00:30 · actions 5 · score 91.0 (A) · stopped by request · reverted fault(s) 4, 5"
    ]
    code, out, _ = _cli("scenario", "stop", "--addr", daemon.addr, "--token", "t")
    assert code == EXIT_OK
    assert out == ["scenario my_storm stopped: elapsed 0:00:00 · actions 0 · score 75.0 (C) · stopped by request"]
    assert [(r.method, r.path, r.headers["authorization"]) for r in daemon.requests] == [
        ("DELETE", "/api/v1/survival", "Bearer t"),
        ("DELETE", "/api/v1/scenarios/current", "Bearer t"),
    ]


def test_survival_stop_with_nothing_to_stop_is_rejected(daemon: FakeDaemon) -> None:
    daemon.routes["DELETE", "/api/v1/survival"] = lambda _: (
        404,
        {"error": {"status": 404, "field": "survival", "message": "no survival has run"}},
    )
    code, _, err = _cli("survival", "stop", "--addr", daemon.addr)
    assert code == EXIT_REJECTED
    assert err == ["chaosd: error: rejected (404): survival: no survival has run"]


def test_survival_with_an_unknown_verb_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        _cli("survival", "halt")
    assert exited.value.code == EXIT_USAGE
    assert "invalid choice: 'halt'" in capsys.readouterr().err


def test_scenario_run_prints_each_fault_and_its_verdict_too(daemon: FakeDaemon) -> None:
    log = [
        {"at": 1.5, "action": "kill_leader", "target": None, "targets": ["orchestrator-0"], "ok": True, "fault": 4},
        {"at": 2.0, "action": "kill_agent", "target": "nobody", "ok": False, "error": "target: no agent 'nobody'"},
    ]
    daemon.routes["GET", "/api/v1/scenarios/current"] = lambda seen: (
        200,
        {**daemon._scenario_current(seen)[1], "started_at": 0.5, "log": log},
    )
    daemon.fault_answers = {4: [_fault(4, "kill_leader", outcome="recovered", recovery_s=0.04213)]}
    code, out, _ = _cli("scenario", "run", "leader_assassination", "--addr", daemon.addr)
    assert code == EXIT_OK
    assert out[1:4] == [
        "t=1.0 s  fault 4 injected: kill_leader on orchestrator-0",
        "t=1.5 s  kill_agent not injected: target: no agent 'nobody'",
        "fault 4 recovered in 0.0421 s (kill_leader)",
    ]
