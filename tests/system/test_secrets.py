"""The API token and the Redis password never leave the process: not in answers, the event stream, the report,
logs, storage or traces (the password goes to Redis, and to the daemon's own workers in their environment)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import redis
from daemon_harness import ROOT, Daemon, Sink, wait_for
from needs import program
from redis_harness import free_port

from chaosd.config.redact import redact_url, redacted


def _read_stream(base: str, until: bytes, deadline_s: float = 20.0) -> bytes:
    host, port = base.removeprefix("http://").split(":")
    data = b""
    with socket.create_connection((host, int(port)), timeout=deadline_s) as s:
        s.sendall(f"GET /api/v1/events?replay=1000 HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        deadline = time.monotonic() + deadline_s
        while until not in data and time.monotonic() < deadline:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    assert until in data, data[-500:]
    return data


def test_the_token_is_found_nowhere_after_a_run_that_used_it(tmp_path: Path) -> None:
    token = f"tok-{uuid.uuid4().hex}"
    wrong = token[:-1] + ("0" if token[-1] != "0" else "1")  # one character off: a near miss
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    otlp = Sink()
    env: dict[str, str | None] = {
        "CHAOSD_API__TOKEN": None,
        "CHAOSD_API__TOKEN_FILE": str(token_file),
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{otlp.port}",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "CHAOSD_TRACING__SAMPLE_EVERY": "50",
    }
    d = Daemon(tmp_path, env=env)
    answers: list[str] = []
    try:
        # Used, and used wrongly.
        code, fault = d.request("POST", "/api/v1/faults", {"action": "slow_agent", "ttl": 30}, token=token)
        assert code == 201
        for bad in (wrong, token + "x", token[:8]):
            code, refused = d.request("POST", "/api/v1/lever", {"reason": "x"}, token=bad)
            assert code == 401
            answers.append(json.dumps(refused))
        assert d.request("POST", "/api/v1/lever", {"reason": "drill"}, token=token)[0] == 200
        assert d.request("DELETE", "/api/v1/lever", token=token)[0] == 200
        assert (
            d.request("POST", "/api/v1/survival", {"interval": "1s", "duration": "3s", "overlap": True}, token=token)[0]
            == 201
        )
        wait_for(lambda: d.get("/api/v1/survival")[1]["state"] != "running", 20, "survival to finish")
        # Every GET route of the OpenAPI document, with real ids.
        code, doc = d.get("/api/v1/openapi.json")
        assert code == 200
        gets = [p for p, ops in doc["paths"].items() if "get" in ops and p != "/api/v1/events"]
        assert len(gets) >= 14
        code, window = d.request("POST", "/api/v1/windows", {"name": "secrets"}, token=token)
        assert code == 201
        for path in gets:
            concrete = path.replace("/runs/{id}", f"/runs/{d.run_id}").replace(
                "/windows/{id}", f"/windows/{window['id']}"
            )
            concrete = concrete.replace("{id}", str(fault["id"])).replace("{name}", "main.js")
            with urllib.request.urlopen(d.base + concrete, timeout=10) as resp:
                assert resp.status == 200, concrete
                answers.append(resp.read().decode())
        code, run = d.get(f"/api/v1/runs/{d.run_id}")
        assert run["config"]["api"]["token"] == "**********"  # stored redacted, the file path kept
        answers.append(_read_stream(d.base, b'"state": "released"').decode())
        assert d.terminate() == 0
        wait_for(lambda: any(p == "/v1/traces" for p, _ in otlp.bodies), 20, "spans to reach the OTLP sink")
    finally:
        d.kill()
        otlp.close()
    db_files = sorted((tmp_path / "data").glob("chaosd.db*"))
    assert db_files
    places = {
        "answers": "\n".join(answers).encode(),
        "log": "\n".join(d.drain()).encode(),
        "report": (tmp_path / "daemon-report.json").read_bytes(),
        "storage": b"".join(p.read_bytes() for p in db_files),
        "traces": b"".join(body for _, body in otlp.bodies),
    }
    assert all(places.values()), [k for k, v in places.items() if not v]
    assert b"slow_agent" in places["storage"] and b"survival" in places["answers"]  # the run did happen
    for secret in (token, wrong, token + "x"):
        found = [where for where, text in places.items() if secret.encode() in text]
        assert found == [], f"a token was found in {found}"


def test_a_rejected_token_value_is_not_echoed_in_the_config_error(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CHAOSD_API__TOKEN": "shrt-77"}  # under 8 characters
    proc = subprocess.run(
        [sys.executable, "-m", "chaosd"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 2
    assert "api.token" in proc.stderr and "at least 8" in proc.stderr
    assert "shrt-77" not in proc.stderr + proc.stdout


def test_token_file_that_cannot_be_read_is_a_config_error(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CHAOSD_API__TOKEN_FILE": str(tmp_path / "missing")}
    env.pop("CHAOSD_API__TOKEN", None)
    proc = subprocess.run(
        [sys.executable, "-m", "chaosd"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 2
    assert "token_file" in proc.stderr and "cannot read" in proc.stderr


def test_a_daemon_without_a_token_warns_that_mutations_are_open_and_one_with_a_token_does_not(tmp_path: Path) -> None:
    for name in ("open", "guarded"):
        (tmp_path / name).mkdir()
    open_daemon = Daemon(tmp_path / "open", env={"CHAOSD_API__TOKEN": None})
    try:
        open_daemon.wait_line("chaosd: warning: no api.token, so anyone who can reach this address")
        # It says the truth: an unauthenticated POST is accepted on loopback.
        code, _ = open_daemon.request("POST", "/api/v1/lever", {"reason": "drill"}, token=None)
        assert code == 200
    finally:
        open_daemon.kill()
    guarded = Daemon(tmp_path / "guarded")
    try:
        guarded.wait_line("Ctrl-C stops")
        assert guarded.request("POST", "/api/v1/lever", {"reason": "drill"}, token=None)[0] == 401
        # Printed before the first request could be answered: by now the pump has read them all.
        assert not [line for line in guarded.drain() if "warning: no api.token" in line]
    finally:
        guarded.kill()


# --- the Redis password -----------------------------------------------------------------------------------------


def test_urls_are_redacted_to_their_server() -> None:
    assert redact_url("redis://:hunter2@10.0.0.5:6379/0") == "redis://:***@10.0.0.5:6379/0"
    assert redact_url("redis://chaosd:hunter2@redis:6379/0") == "redis://chaosd:***@redis:6379/0"
    assert redact_url("rediss://hunter2@redis") == "rediss://***@redis"  # a user part alone may be the secret
    assert redact_url("redis://redis/0?password=hunter2&db=1") == "redis://redis/0?password=***&db=1"
    assert redact_url("unix://:hunter2@/run/redis.sock?db=0") == "unix://:***@/run/redis.sock?db=0"
    assert redact_url("redis://:hunter2@[::1]:6379") == "redis://:***@[::1]:6379"
    assert redact_url("redis://:hun/ter2@h:6379") == "redis://***"  # an unescaped / in it: nothing shown
    assert redact_url("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"
    stored = redacted({"backend": {"url": "redis://:hunter2@h/0"}, "stages": [{"params": {"u": "https://a:b@c"}}]})
    assert stored == {"backend": {"url": "redis://:***@h/0"}, "stages": [{"params": {"u": "https://a:***@c"}}]}


class _PasswordRedis:
    """A redis-server that asks for a password (``--requirepass``) on a free loopback port; stopped by its PID."""

    def __init__(self, directory: Path, password: str) -> None:
        binary = program("redis-server")
        self.port = free_port()
        self.password = password
        args = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        args += ["--dir", str(directory), "--requirepass", password, "--logfile", str(directory / "redis.log")]
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        wait_for(self._ready, 10, f"redis-server on port {self.port}")

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, password=self.password, decode_responses=True, socket_timeout=5)

    def _ready(self) -> bool:
        try:
            return bool(self.client().ping())
        except redis.ConnectionError:
            return False

    def url(self, password: str | None = None) -> str:
        return f"redis://:{password or self.password}@127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


REDIS_ENV = {  # a small Redis-backed pipeline: 2 worker processes, 2 orchestrator replicas
    "CHAOSD_BACKEND__KIND": "redis",
    "CHAOSD_WORKERS__COUNT": "2",
    "CHAOSD_ORCHESTRATOR__REPLICAS": "2",
    "CHAOSD_LOAD__RATE": "50",
    "CHAOSD_LOAD__PRODUCERS": "2",
}


def _files_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_the_redis_password_is_found_nowhere_but_redis_and_the_workers(tmp_path: Path) -> None:
    password = f"pw-{uuid.uuid4().hex}"
    otlp_secret = f"otlp-{uuid.uuid4().hex}"
    (tmp_path / "redis").mkdir()
    (tmp_path / "tmp").mkdir()
    server = _PasswordRedis(tmp_path / "redis", password)
    otlp = Sink()
    env: dict[str, str | None] = {
        **REDIS_ENV,
        "CHAOSD_BACKEND__URL": server.url(),
        "TMPDIR": str(tmp_path / "tmp"),  # the workers' settings file and logs, where this test can read them
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{otlp.port}",
        "OTEL_EXPORTER_OTLP_HEADERS": f"authorization=Bearer%20{otlp_secret}",
        "CHAOSD_TRACING__SAMPLE_EVERY": "10",
    }
    answers: list[str] = []
    running: dict[str, bytes] = {}
    try:
        d = Daemon(tmp_path, env=env)
        try:
            # It did use the password: ready, its workers serving, and Redis sees their connections.
            wait_for(lambda: d.get("/api/v1/status")[1]["telemetry"]["throughput"] > 0, 30, "tasks served on Redis")
            clients = server.client().client_list()
            assert len(clients) >= 1 + 2 * 2, clients  # the daemon's own, and each worker's two connections
            running = _files_bytes(tmp_path / "tmp")
            assert any(name.endswith("settings.json") for name in running), sorted(running)
            settings_file = next(v for k, v in running.items() if k.endswith("settings.json"))
            assert f"redis://:***@127.0.0.1:{server.port}/0".encode() in settings_file
            code, fault = d.request("POST", "/api/v1/faults", {"action": "slow_agent", "ttl": 2})
            assert code == 201
            code, window = d.request("POST", "/api/v1/windows", {"name": "secrets"})
            assert code == 201
            code, doc = d.get("/api/v1/openapi.json")
            gets = [p for p, ops in doc["paths"].items() if "get" in ops and p != "/api/v1/events"]
            for path in gets:
                concrete = path.replace("/runs/{id}", f"/runs/{d.run_id}").replace(
                    "/windows/{id}", f"/windows/{window['id']}"
                )
                concrete = concrete.replace("{id}", str(fault["id"])).replace("{name}", "main.js")
                with urllib.request.urlopen(d.base + concrete, timeout=10) as resp:
                    assert resp.status == 200, concrete
                    answers.append(resp.read().decode())
            run = d.get(f"/api/v1/runs/{d.run_id}")[1]
            assert run["config"]["backend"]["url"] == f"redis://:***@127.0.0.1:{server.port}/0"
            answers.append(_read_stream(d.base, b"event: backend").decode())
            assert d.terminate() == 0
        finally:
            d.kill()
    finally:
        server.stop()
        otlp.close()
    places = {
        "answers": "\n".join(answers).encode(),
        "log": "\n".join(d.drain()).encode(),
        "report": (tmp_path / "daemon-report.json").read_bytes(),
        "storage": b"".join(p.read_bytes() for p in sorted((tmp_path / "data").glob("chaosd.db*"))),
        "traces": b"".join(body for _, body in otlp.bodies),
        **{f"worker file {name}": data for name, data in running.items()},
    }
    assert all(places[k] for k in ("answers", "log", "report", "storage")), [k for k, v in places.items() if not v]
    assert f"127.0.0.1:{server.port}".encode() in places["storage"]  # the config was stored, the server named
    for secret in (password, otlp_secret):
        found = [where for where, text in places.items() if secret.encode() in text]
        assert found == [], f"a secret was found in {found}"


def test_a_redis_that_refuses_the_password_is_named_without_it(tmp_path: Path) -> None:
    server = _PasswordRedis(tmp_path, f"pw-{uuid.uuid4().hex}")
    wrong = f"wrong-{uuid.uuid4().hex}"
    env = {**os.environ, "PYTHONPATH": str(ROOT), **REDIS_ENV, "CHAOSD_BACKEND__URL": server.url(wrong)}
    env["CHAOSD_API__PORT"] = "0"
    proc = subprocess.Popen(
        [sys.executable, "-m", "chaosd"], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    watchdog = threading.Timer(60, proc.kill)  # a daemon that never says it cannot reach Redis fails the test
    watchdog.start()
    needle = f"cannot reach Redis at redis://:***@127.0.0.1:{server.port}/0".encode()
    output = b""
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            output += line
            if needle in line:
                break
    finally:
        watchdog.cancel()
        proc.kill()
        proc.wait(timeout=10)
        server.stop()
    assert needle in output, output
    assert wrong.encode() not in output and server.password.encode() not in output
