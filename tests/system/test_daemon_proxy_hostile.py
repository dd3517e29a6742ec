"""Hostile clients against the fault proxy the real daemon runs in front of a python stage's dependency.

The daemon (`python -m chaosd`) calls an upstream of this test (a threaded HTTP server recording every request) through
its proxy, whose address the stage's setup records. The test then talks to that proxy with raw sockets, as a
hostile client on the same host would, and checks each refusal's status, that nothing of a refused request reached
the upstream, the daemon's open files before and after, and its log lines.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from daemon_harness import ROOT, Daemon, wait_for
from dependency_handlers import CALLS_VARIABLE, recorded
from recording_upstream import Received, recording_upstream

pytestmark = pytest.mark.slow

SECRET = "Upstream-pw-7f3a"  # the upstream's password: sent to the upstream, nowhere else
MARK = "HOSTILE"  # in every path a hostile request names: the upstream must never see it


def _config(tmp: Path, port: int) -> Path:
    path = tmp / "chaosd.toml"
    path.write_text(
        f"""
[load]
rate = 10.0
arrival = "constant"
[dependencies.svc]
upstream = "http://chaosd:{SECRET}@127.0.0.1:{port}/base"

[[stages]]
name = "fetch"
kind = "python"
handler = "dependency_handlers:get"
setup = "dependency_handlers:setup"
teardown = "dependency_handlers:teardown"
dependencies = ["svc"]
service = {{ distribution = "exponential", mean = 0.005 }}
timeout = 1.0
next = []
"""
    )
    return path


def _exchange(port: int, raw: bytes) -> bytes:
    """``raw`` on a new connection; what comes back until the proxy closes it."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(raw)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


HOSTILE = {
    # status, request (``{host}`` is the proxy's own address)
    "smuggled: Content-Length and Transfer-Encoding": (
        400,
        b"POST /base/HOSTILE-1 HTTP/1.1\r\n{host}Content-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"0\r\n\r\nGET /base/HOSTILE-2 HTTP/1.1\r\n{host}\r\n",
    ),
    "a bare LF": (400, b"GET /base/HOSTILE-3 HTTP/1.1\r\n{host}X-A: 1\nX-B: 2\r\n\r\n"),
    "Content-Length: +3": (400, b"POST /base/HOSTILE-4 HTTP/1.1\r\n{host}Content-Length: +3\r\n\r\nabc"),
    "Transfer-Encoding: xchunked": (
        400,
        b"POST /base/HOSTILE-5 HTTP/1.1\r\n{host}Transfer-Encoding: xchunked\r\n\r\n0\r\n\r\n",
    ),
    "a NUL in the target": (400, b"GET /base/HOSTILE-6\x00x HTTP/1.1\r\n{host}\r\n"),
    "a foreign Host": (421, b"GET /base/HOSTILE-7 HTTP/1.1\r\nHost: evil.example\r\n\r\n"),
    "a foreign Origin": (403, b"GET /base/HOSTILE-8 HTTP/1.1\r\n{host}Origin: http://evil.example\r\n\r\n"),
}


def test_the_daemons_proxy_refuses_hostile_requests_forwards_nothing_and_keeps_its_files(tmp_path: Path) -> None:
    with recording_upstream() as (upstream_port, seen):
        _hostile(tmp_path, upstream_port, seen)


def _hostile(tmp_path: Path, upstream_port: int, seen: list[Received]) -> None:
    calls = tmp_path / "calls.jsonl"
    env = {CALLS_VARIABLE: str(calls), "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}"}
    daemon = Daemon(tmp_path, env=env, config=_config(tmp_path, upstream_port))
    try:
        [setup] = [c for c in recorded(calls) if c["event"] == "setup"]
        proxy = setup["dependencies"]["svc"]  # http://127.0.0.1:PORT/base
        port = int(proxy.rsplit(":", 1)[1].split("/")[0])
        host = b"Host: 127.0.0.1:%d\r\n" % port
        # The control: the stage's own calls go through, with the upstream's credentials added by the proxy.
        wait_for(lambda: len(seen) >= 5, 30, "the stage's calls to reach the upstream")
        first = seen[0]
        assert first.path.startswith("/base/search"), first.path
        assert first.headers["authorization"].startswith("Basic ")
        assert first.headers["host"] == f"127.0.0.1:{upstream_port}"
        baseline = _fds(daemon.proc.pid)
        seen_before = len(daemon.drain())

        for name, (status, raw) in HOSTILE.items():
            answer = _exchange(port, raw.replace(b"{host}", host))
            assert answer.startswith(b"HTTP/1.1 %d " % status), (name, answer[:200])
            assert b'"dependency": "svc"' in answer and SECRET.encode() not in answer, (name, answer)
        # 300 clients that connect, send half a head and leave: each held file goes back.
        for _ in range(300):
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                s.sendall(b"GET /base/HOSTILE-9 HTTP/1.1\r\n")
        # And a well-formed call from here still goes through (the upstream saw it: nothing is stuck).
        good = _exchange(port, b"GET /base/fine HTTP/1.1\r\n" + host + b"Connection: close\r\n\r\n")
        assert good.startswith(b"HTTP/1.1 200 "), good[:200]
        assert any(r.path == "/base/fine" for r in seen)

        assert not [r.path for r in seen if MARK in r.path]  # nothing of a refused request went on
        wait_for(lambda: _fds(daemon.proc.pid) <= baseline + 2, 15, "the daemon's open files to return")
        logged = daemon.drain()[seen_before:]
        # Refusals are answers, not errors: no traceback, no line repeating what the client sent.
        assert not [line for line in logged if "Traceback" in line or MARK in line or "evil" in line], logged
        assert daemon.terminate() == 0
        output = "\n".join(daemon.drain())
        assert SECRET not in output
    finally:
        daemon.kill()
