"""The daemon under abuse, as an attacker on the network would try it: a real daemon subprocess on loopback.

Each abuse gets its JSON 4xx/5xx (or a closed connection where HTTP has no answer), the daemon stays
up and answers a normal request, and nothing it holds (faults, lever, plans) changes.
"""

from __future__ import annotations

import json
import resource
import socket
import time
import urllib.request
from collections.abc import Iterator
from typing import Any, get_args

import pytest
from daemon_harness import TOKEN, Daemon, wait_for

from chaosd.views import DetectorStateName

REQUEST_TIMEOUT = 0.5  # it runs from a request's first byte: idle connections are not cut by it


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    tmp = tmp_path_factory.mktemp("abuse")
    (tmp / "secret.yaml").write_text("name: MARKER-not-a-scenario-7f3a\nduration: 10s\n")
    (tmp / "scenarios").mkdir()
    (tmp / "scenarios" / "sneaky.yaml").symlink_to(tmp / "secret.yaml")
    d = Daemon(tmp, env={"CHAOSD_API__REQUEST_TIMEOUT": str(REQUEST_TIMEOUT)})
    yield d
    d.kill()


def _state(d: Daemon) -> dict[str, Any]:
    """What an abuse must not change."""
    status = d.get("/api/v1/status")[1]
    faults = d.get("/api/v1/faults")[1]["faults"]
    return {k: status[k] for k in ("lever", "survival", "scenario", "faults_active", "stopping")} | {
        "faults": [(f["id"], f["action"]) for f in faults]
    }


def _metric(d: Daemon, name: str) -> float:
    with urllib.request.urlopen(d.base + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


def _addr(d: Daemon) -> tuple[str, int]:
    host, port = d.base.removeprefix("http://").split(":")
    return host, int(port)


def _exchange(d: Daemon, raw: bytes, deadline_s: float = 10.0) -> tuple[int, dict[str, Any] | None, bytes]:
    """Send raw bytes on a new connection and read until the server closes it: (status, JSON body, raw)."""
    with socket.create_connection(_addr(d), timeout=deadline_s) as s:
        s.sendall(raw)
        return _read_answer(s)


def _read_answer(s: socket.socket) -> tuple[int, dict[str, Any] | None, bytes]:
    data = b""
    while True:
        try:
            chunk = s.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
        if b"\r\n\r\n" in data:
            head, _, body = data.partition(b"\r\n\r\n")
            length = [int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length:")]
            if length and len(body) >= length[0]:
                break
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1]) if head.startswith(b"HTTP/") else 0
    try:
        parsed = json.loads(body) if body else None
    except json.JSONDecodeError:
        parsed = None
    return status, parsed, data


def _assert_error(answer: tuple[int, dict[str, Any] | None, bytes], status: int) -> dict[str, Any]:
    code, body, raw = answer
    assert code == status, raw[:300]
    assert body is not None and body["error"]["status"] == status, raw[:300]
    assert b"application/json" in raw.partition(b"\r\n\r\n")[0]
    return body["error"]


def _raise_fd_limit(n: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < n:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, n), hard))


def test_five_thousand_idle_connections_are_held_and_a_normal_request_is_answered(daemon: Daemon) -> None:
    before = _state(daemon)
    _raise_fd_limit(12_000)
    idle: list[socket.socket] = []
    try:
        for _ in range(5000):
            idle.append(socket.create_connection(_addr(daemon), timeout=10))
        # Held, not dropped: the daemon counts them open (the normal request below is one more).
        wait_for(lambda: _metric(daemon, "chaosd_api_connections") >= 5000, 30, "5,000 connections held")
        assert _metric(daemon, "process_open_fds") > 5000
        code, status = daemon.get("/api/v1/status")
        # Accepting 5,000 connections can hold the loop up long enough to read as a stall: any state is an answer.
        assert code == 200
        assert status["detector"] in get_args(DetectorStateName)
        code, created = daemon.request("POST", "/api/v1/faults", {"action": "slow_agent", "ttl": 0.5})
        assert code == 201
    finally:
        for s in idle:
            s.close()
    wait_for(lambda: _metric(daemon, "chaosd_api_connections") < 10, 30, "idle connections to be released")
    wait_for(lambda: _state(daemon)["faults_active"] == 0, 15, "the fault to end")
    after = _state(daemon)
    assert after["faults"] == [*before["faults"], (created["id"], "slow_agent")]
    assert {k: v for k, v in after.items() if k != "faults"} == {k: v for k, v in before.items() if k != "faults"}


def test_a_slow_loris_is_answered_408_and_cut_after_the_request_timeout(daemon: Daemon) -> None:
    before = _state(daemon)
    timeouts = _metric(daemon, 'chaosd_api_refused_total{reason="request_timeout"}')
    with socket.create_connection(_addr(daemon), timeout=10) as s:
        s.sendall(b"GET /api/v1/status HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: ")  # and never the rest of the head
        started = time.monotonic()
        answer = _read_answer(s)
        waited = time.monotonic() - started
        assert s.recv(1) == b""  # closed by the daemon
    error = _assert_error(answer, 408)
    assert "request_timeout" in error["message"]
    assert REQUEST_TIMEOUT * 0.9 <= waited < REQUEST_TIMEOUT + 5  # cut by the deadline, not by the client
    # A body that trickles in: the head arrived, the body never does.
    head = b"POST /api/v1/faults HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + TOKEN.encode()
    head += b'\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"action": '
    error = _assert_error(_exchange(daemon, head), 408)
    assert error["field"] == "body"
    assert _metric(daemon, 'chaosd_api_refused_total{reason="request_timeout"}') == timeouts + 2
    assert daemon.get("/healthz")[0] == 200
    assert _state(daemon) == before


def test_oversized_headers_and_bodies_are_refused_with_431_and_413(daemon: Daemon) -> None:
    before = _state(daemon)
    big_header = b"GET /api/v1/status HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 20_000 + b"\r\n\r\n"
    error = _assert_error(_exchange(daemon, big_header), 431)
    assert "8190" in error["message"]
    long_line = b"GET /api/v1/status?" + b"a=1&" * 5000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    _assert_error(_exchange(daemon, long_line), 431)
    code, body = daemon.request("POST", "/api/v1/faults", raw=b'{"action": "' + b"x" * 200_000 + b'"}')
    assert code == 413 and body["error"]["field"] == "body" and "65536" in body["error"]["message"]
    announced = b"POST /api/v1/faults HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + TOKEN.encode()
    announced += b"\r\nContent-Type: application/json\r\nContent-Length: 50000000\r\n\r\n{"
    _assert_error(_exchange(daemon, announced), 413)
    assert daemon.get("/healthz")[0] == 200
    assert _state(daemon) == before


BOMB = "\n".join(
    ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    + [f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]" for i in range(8)]
    + ["name: bomb", "duration: 10s"]
)


@pytest.mark.parametrize(
    ("name", "body", "content_type", "status", "says"),
    [
        ("invalid UTF-8 YAML", b"name: caf\xe9\nduration: 10s\n", "application/yaml", 422, "UTF-8"),
        ("invalid UTF-8 JSON", b'{"action": "caf\xe9"}', "application/json", 400, "JSON"),
        ("billion laughs", BOMB.encode(), "application/yaml", 422, "alias"),
        ("deep nesting", ("x: " + "[" * 60 + "]" * 60 + "\nname: d\n").encode(), "application/yaml", 422, "deep"),
    ],
)
def test_invalid_utf8_and_yaml_bombs_get_a_4xx_naming_the_problem(
    daemon: Daemon, name: str, body: bytes, content_type: str, status: int, says: str
) -> None:
    before = _state(daemon)
    path = "/api/v1/scenarios/run" if "YAML" in name or content_type == "application/yaml" else "/api/v1/faults"
    code, answer = daemon.request("POST", path, raw=body, headers={"Content-Type": content_type})
    assert code == status, answer
    assert says.lower() in answer["error"]["message"].lower(), answer
    assert daemon.get("/healthz")[0] == 200
    assert _state(daemon) == before


@pytest.mark.parametrize(
    ("scenario", "status"),
    [
        ("../secret", 422),
        ("/etc/passwd", 422),
        ("secret.yaml/../secret", 422),
        ("..", 422),
        ("secret", 404),  # a file in the daemon's directory, not in a scenario directory
        ("sneaky", 404),  # a symlink in ./scenarios that points outside it
    ],
)
def test_scenario_names_resolve_only_inside_the_scenario_directories(
    daemon: Daemon, scenario: str, status: int
) -> None:
    before = _state(daemon)
    code, answer = daemon.request("POST", "/api/v1/scenarios/run", {"name": scenario})
    assert code == status, answer
    assert answer["error"]["field"] == "name"
    assert "MARKER" not in json.dumps(answer)  # the file's contents are never echoed
    assert _state(daemon) == before


def test_two_hundred_sse_subscribers_that_never_read(daemon: Daemon) -> None:
    before = _state(daemon)
    refused = _metric(daemon, 'chaosd_api_refused_total{reason="subscriber_limit"}')
    streams: list[socket.socket] = []
    try:
        for _ in range(200):
            s = socket.create_connection(_addr(daemon), timeout=10)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.sendall(b"GET /api/v1/events?replay=1000 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            streams.append(s)
        wait_for(
            lambda: _metric(daemon, 'chaosd_api_refused_total{reason="subscriber_limit"}') == refused + 100,
            30,
            "100 subscribers refused",
        )
        assert _metric(daemon, "chaosd_api_sse_subscribers") == 100
        # The daemon goes on serving while 100 streams are stuck: events flow, requests are answered.
        for _ in range(3):
            code, _created = daemon.request("POST", "/api/v1/faults", {"action": "slow_agent", "ttl": 0.2})
            assert code == 201
            wait_for(lambda: daemon.get("/api/v1/status")[1]["faults_active"] == 0, 15, "the fault to end")
        assert daemon.get("/api/v1/status")[0] == 200
        # Now read what each got: a stream, or a 429 with a JSON body.
        answers = []
        for s in streams:
            head = s.recv(200, socket.MSG_PEEK)
            answers.append(int(head.split(b" ")[1]))
        assert sorted(answers) == [200] * 100 + [429] * 100
        for s, code in zip(streams, answers, strict=True):
            if code == 429:
                _assert_error(_read_answer(s), 429)
    finally:
        for s in streams:
            s.close()
    wait_for(lambda: _metric(daemon, "chaosd_api_sse_subscribers") == 0, 30, "the streams to be released")
    after = _state(daemon)
    assert after["faults_active"] == 0 and after["lever"] == before["lever"]
    assert len(after["faults"]) == len(before["faults"]) + 3


@pytest.mark.parametrize("credential", [b"\xff", b"\xc3\xa9t\xc3\xa9", b"\x80abc", b"Bearer", b""])
def test_a_malformed_or_non_ascii_credential_is_401_and_counted(daemon: Daemon, credential: bytes) -> None:
    before, refused = _state(daemon), _metric(daemon, 'chaosd_api_refused_total{reason="unauthorized"}')
    body = b'{"action": "kill_agent"}'
    raw = (
        b"POST /api/v1/faults HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Authorization: Bearer " + credential + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n"
        b"Connection: close\r\n\r\n" + body
    )
    seen = len(daemon.drain())
    error = _assert_error(_exchange(daemon, raw), 401)
    assert error["field"] == "Authorization"
    daemon.wait_line("missing or wrong bearer token")
    logged = [line for line in daemon.drain()[seen:] if "bearer token" in line]
    # One short line naming the request and the caller, never the bytes sent.
    assert len(logged) == 1 and len(logged[0]) < 200, logged
    assert "POST /api/v1/faults from 127.0.0.1" in logged[0], logged
    assert credential.decode("latin-1") not in logged[0] or not credential, logged
    assert _metric(daemon, 'chaosd_api_refused_total{reason="unauthorized"}') == refused + 1
    assert _state(daemon) == before
