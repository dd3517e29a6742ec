"""The API token never leaves the process: not in answers, the event stream, the report, logs, storage or traces."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

from daemon_harness import ROOT, Daemon, Sink, wait_for


def _read_stream(base: str, until: bytes, deadline_s: float = 20.0) -> bytes:
    host, port = base.removeprefix("http://").split(":")
    data = b""
    with socket.create_connection((host, int(port)), timeout=deadline_s) as s:
        s.sendall(b"GET /api/v1/events?replay=1000 HTTP/1.1\r\nHost: x\r\n\r\n")
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
            concrete = concrete.replace("{id}", str(fault["id"]))
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
