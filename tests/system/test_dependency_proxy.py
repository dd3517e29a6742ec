"""The dependency fault proxy against real services on loopback: an aiohttp app and a raw TCP echo server, called
through the proxy with aiohttp's and httpx's own clients, each fault measured from the client's side."""

from __future__ import annotations

import asyncio
import base64
import datetime
import ipaddress
import logging
import random
import socket
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest
from aiohttp import web

from chaosd.faults.proxy import NO_FAULTS, DependencyFaults, FaultProxy, Upstream, parse_upstream

SECRET = "s3cr3t-Pa55"
LATENCY = 0.25


class _Service:
    """The real upstream: JSON echo, a streamed body, a route needing basic auth; counts what reaches it."""

    def __init__(self) -> None:
        self.hits = 0
        self.peers: set[object] = set()
        self.release = asyncio.Event()  # the streamed route's second half waits for the client to see the first
        self.runner: web.AppRunner | None = None
        self.port = 0

    async def _echo(self, request: web.Request) -> web.Response:
        self.hits += 1
        self.peers.add(request.transport.get_extra_info("peername") if request.transport else None)
        return web.json_response(
            {
                "method": request.method,
                "path_qs": request.path_qs,
                "headers": dict(request.headers),
                "body": (await request.read()).decode(),
            }
        )

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        self.hits += 1
        resp = web.StreamResponse()
        await resp.prepare(request)
        await resp.write(b"first:")
        await self.release.wait()  # only a proxy that relays as it arrives lets the client see "first:" now
        await resp.write(b"second")
        await resp.write_eof()
        return resp

    async def _big(self, request: web.Request) -> web.Response:
        self.hits += 1
        return web.Response(body=b"b" * int(request.query.get("n", "65536")))

    async def _auth(self, request: web.Request) -> web.Response:
        self.hits += 1
        expected = "Basic " + base64.b64encode(f"alice:{SECRET}".encode()).decode()
        if request.headers.get("Authorization") != expected:
            return web.json_response({"error": "unauthorized"}, status=401)
        return web.json_response({"user": "alice"})

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/base/echo", self._echo)
        app.router.add_get("/base/stream", self._stream)
        app.router.add_get("/base/big", self._big)
        app.router.add_get("/base/auth", self._auth)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = self.runner.addresses[0][1]

    async def stop(self) -> None:
        self.release.set()
        if self.runner is not None:
            await self.runner.cleanup()


@asynccontextmanager
async def _http(userinfo: str = "") -> AsyncIterator[tuple[_Service, FaultProxy]]:
    service = _Service()
    await service.start()
    proxy = FaultProxy(
        "billing", parse_upstream(f"http://{userinfo}127.0.0.1:{service.port}/base"), rng=random.Random(7)
    )
    await proxy.start()
    try:
        yield service, proxy
    finally:
        await proxy.stop()
        await service.stop()


@asynccontextmanager
async def _tcp_echo() -> AsyncIterator[FaultProxy]:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    proxy = FaultProxy("ledger", parse_upstream(f"tcp://127.0.0.1:{port}"), rng=random.Random(7))
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.stop()
        server.close()
        await server.wait_closed()


def _run(make: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(make(), 30))


async def _eventually(condition: Callable[[], bool], deadline: float = 5.0) -> None:
    """Until ``condition`` holds, yielding to the loop; fails after ``deadline`` seconds."""
    limit = time.perf_counter() + deadline
    while not condition():
        assert time.perf_counter() < limit, "condition not met in time"
        await asyncio.sleep(0)  # a yield to the loop, not a wait for time to pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


async def _timed_get(session: aiohttp.ClientSession, url: str) -> tuple[float, int, bytes]:
    began = time.perf_counter()
    async with session.get(url) as resp:
        body = await resp.read()
    return time.perf_counter() - began, resp.status, body


# --- values -----------------------------------------------------------------------------------------------------


def test_parse_upstream_reads_the_three_kinds() -> None:
    assert parse_upstream("http://svc.local:8080/api/v1/") == Upstream("http", "svc.local", 8080, "/api/v1", None, None)
    assert parse_upstream("https://svc.local") == Upstream("https", "svc.local", 443, "", None, None)
    assert parse_upstream("HTTP://svc") == Upstream("http", "svc", 80, "", None, None)
    assert parse_upstream("tcp://10.0.0.5:5432") == Upstream("tcp", "10.0.0.5", 5432, "", None, None)
    up = parse_upstream(f"https://alice:{SECRET}@svc:8443/x")
    assert (up.username, up.password) == ("alice", SECRET)
    assert parse_upstream("http://a%40b:p%2Fw@svc/").password == "p/w"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://svc", 'scheme must be http, https or tcp (got "ftp")'),
        ("svc:8080", 'no "://" in it'),
        ("tcp://svc", "tcp upstream needs host:port"),
        ("tcp://:5432", "tcp upstream needs host:port"),
        ("tcp://svc:5432/db", "tcp upstream takes no path"),
        ("http://svc:0", "port must be 1-65535"),
        ("http://svc:70000", "port must be 1-65535"),
        (f"http://alice:{SECRET}@svc:notaport", "port must be 1-65535"),
        (f"http://alice:{SECRET}/x@svc:80", "percent-encode the user part"),
        (f"http://alice:{SECRET}@:80", "http upstream needs a host"),
        (f"http://alice:{SECRET}@svc/?token=1", "no query or fragment"),
    ],
)
def test_parse_upstream_names_the_problem_never_the_password(url: str, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_upstream(url)
    text = str(caught.value)
    assert message in text
    assert "\n" not in text
    assert SECRET not in text and SECRET[:6] not in text


def test_the_password_is_in_no_repr_and_masked_in_display() -> None:
    up = parse_upstream(f"http://alice:{SECRET}@svc:8080/base")
    assert SECRET not in repr(up) and SECRET not in str(up)
    assert up.display() == "http://alice:***@svc:8080/base"
    proxy = FaultProxy("billing", up, rng=random.Random(1))
    assert SECRET not in repr(proxy)
    assert parse_upstream("tcp://db:5432").display() == "tcp://db:5432"


def test_faults_name_their_actions_and_round_trip_as_json() -> None:
    assert NO_FAULTS.names() == () and NO_FAULTS.as_json() == {}
    every = DependencyFaults(
        latency=0.1, jitter=0.05, error_status=503, error_probability=0.5, reset_probability=0.2, timeout=True,
        slice_bytes=64, slice_delay=0.01,
    )  # fmt: skip
    assert every.names() == (
        "dependency_latency", "dependency_error", "dependency_reset", "dependency_timeout", "dependency_slice",
    )  # fmt: skip
    assert DependencyFaults.from_json(every.as_json()) == every
    assert DependencyFaults(error_status=429).as_json() == {"error_status": 429.0}
    assert DependencyFaults.from_json({"error_status": 503.0, "timeout": 1.0}) == DependencyFaults(
        error_status=503, timeout=True
    )
    combined = DependencyFaults(latency=0.2).merged(DependencyFaults(error_status=500))
    assert combined == DependencyFaults(latency=0.2, error_status=500)


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"latncy": 0.1}, "latncy"),
        ({"latency": "0.1"}, "latency"),
        ({"latency": -1.0}, "latency"),
        ({"latency": float("nan")}, "latency"),
        ({"error_status": 503.5}, "error_status"),
        ({"error_status": 42}, "error_status"),
        ({"error_probability": 1.5}, "error_probability"),
        ({"reset_probability": True}, "reset_probability"),
        ({"timeout": 2}, "timeout"),
        ({"slice_bytes": -5}, "slice_bytes"),
    ],
)
def test_from_json_is_strict_and_names_the_field(data: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        DependencyFaults.from_json(data)


# --- HTTP, no fault ---------------------------------------------------------------------------------------------


def test_http_relays_faithfully_and_keeps_connections_alive() -> None:
    async def go() -> None:
        async with _http() as (service, proxy), aiohttp.ClientSession() as session:
            assert proxy.url == f"http://127.0.0.1:{proxy.port}/base"
            for i in range(5):
                async with session.post(
                    f"{proxy.url}/echo?page={i}&q=a%20b",
                    data=b"payload",
                    headers={"X-Trace": "t1", "Connection": "keep-alive, X-Private", "X-Private": "hop"},
                ) as resp:
                    assert resp.status == 200
                    got = await resp.json()
                assert got["method"] == "POST"
                assert got["path_qs"] == f"/base/echo?page={i}&q=a%20b"
                assert got["body"] == "payload"
                assert got["headers"]["Host"] == f"127.0.0.1:{service.port}"
                assert got["headers"]["X-Trace"] == "t1"
                assert "X-Private" not in got["headers"] and "Connection" not in got["headers"]
            assert proxy.calls == 5 and proxy.faulted == {}
            assert len(service.peers) == 1  # one pooled upstream connection served them all
            async with session.get(f"{proxy.url}/big?n=300000") as resp:
                assert await resp.read() == b"b" * 300_000

        async with _http() as (service, proxy), httpx.AsyncClient() as client:
            for i in range(3):
                r = await client.post(f"{proxy.url}/echo", params={"i": str(i)}, content=b"x" * 10)
                assert r.status_code == 200 and r.json()["path_qs"] == f"/base/echo?i={i}"

            async def chunks() -> AsyncIterator[bytes]:
                yield b"chunked-"
                yield b"body"

            r = await client.post(f"{proxy.url}/echo", content=chunks())  # a request body sent chunked
            assert r.json()["body"] == "chunked-body"
            assert proxy.calls == 4

    _run(go)


def test_http_streams_the_response_as_it_arrives() -> None:
    async def go() -> None:
        async with _http() as (service, proxy):
            async with aiohttp.ClientSession() as session, session.get(f"{proxy.url}/stream") as resp:
                first = await resp.content.readexactly(6)
                assert first == b"first:"  # arrived while the upstream still holds the rest
                service.release.set()
                assert await resp.content.read() == b"second"
            service.release.clear()
            async with httpx.AsyncClient() as client, client.stream("GET", f"{proxy.url}/stream") as r:
                pieces = r.aiter_raw()
                assert await anext(pieces) == b"first:"
                service.release.set()
                assert b"".join([p async for p in pieces]) == b"second"

    _run(go)


_RAW_ANSWERS = {
    b"/once": b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nonce",  # then the upstream closes: a stale pool entry
    b"/eof": b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil-eof",  # no length: ends with the connection
    b"/chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\nX-T: 1\r\n\r\n",
    b"/empty": b"HTTP/1.1 204 No Content\r\n\r\n",
}


def test_http_relays_every_framing_of_a_hand_written_upstream() -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        writer.write(_RAW_ANSWERS[head.split(b" ")[1].removeprefix(b"/base")])
        await writer.drain()
        writer.close()  # one request per connection, whatever the answer said

    async def go() -> None:
        server = await asyncio.start_server(answer, "127.0.0.1", 0)
        up = parse_upstream(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/base")
        proxy = FaultProxy("raw", up, rng=random.Random(1))
        await proxy.start()
        try:
            async with httpx.AsyncClient() as client:
                for _ in range(3):
                    assert (await client.get(f"{proxy.url}/once")).content == b"once"
                    r = await client.get(f"{proxy.url}/eof")
                    assert r.content == b"until-eof" and r.headers["connection"] == "close"
                    assert (await client.get(f"{proxy.url}/chunked")).content == b"abcde"
                    r = await client.get(f"{proxy.url}/empty")
                    assert r.status_code == 204 and r.content == b""
                    assert (await client.head(f"{proxy.url}/once")).status_code == 200
            assert proxy.calls == 15 and proxy.upstream_errors == 0
        finally:
            await proxy.stop()
            server.close()
            await server.wait_closed()

    _run(go)


def test_http_unreachable_upstream_is_a_502_counted() -> None:
    async def go() -> None:
        up = parse_upstream(f"http://alice:{SECRET}@127.0.0.1:{_free_port()}/base")
        proxy = FaultProxy("billing", up, rng=random.Random(1))
        await proxy.start()
        try:
            async with aiohttp.ClientSession() as session, session.get(f"{proxy.url}/echo") as resp:
                assert resp.status == 502
                body = await resp.json()
            assert body["error"] == "upstream unreachable" and body["dependency"] == "billing"
            assert SECRET not in str(body)
            assert proxy.calls == 1 and proxy.upstream_errors == 1
        finally:
            await proxy.stop()

    _run(go)


def test_basic_auth_is_added_and_the_password_never_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)

    async def go() -> None:
        async with _http(f"alice:{SECRET}@") as (service, proxy), aiohttp.ClientSession() as session:
            async with session.get(f"{proxy.url}/auth") as resp:
                assert resp.status == 200 and await resp.json() == {"user": "alice"}
            async with session.get(f"{proxy.url}/auth", headers={"Authorization": "Bearer mine"}) as resp:
                assert resp.status == 401  # the handler's own Authorization is left as it is
            async with session.get(f"{proxy.url}/echo", headers={"Authorization": "Bearer mine"}) as resp:
                assert (await resp.json())["headers"]["Authorization"] == "Bearer mine"
            assert SECRET not in repr(proxy) and SECRET not in proxy.url
            await service.stop()  # now unreachable: the warning names the upstream
            for _ in range(3):
                async with session.get(f"{proxy.url}/echo") as resp:
                    assert resp.status == 502
                    assert SECRET not in await resp.text()
            assert proxy.upstream_errors == 3

    _run(go)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING and "unreachable" in r.getMessage()]
    assert len(warnings) == 1  # once when calls start failing, not once per call
    assert "alice:***@127.0.0.1" in warnings[0].getMessage()
    assert all(SECRET not in r.getMessage() and SECRET not in str(r.args) for r in caplog.records)
    assert SECRET not in caplog.text


# --- HTTP faults ------------------------------------------------------------------------------------------------


def test_http_latency_delays_each_request_then_lifts() -> None:
    async def go() -> None:
        async with _http() as (_, proxy), aiohttp.ClientSession() as session:
            url = f"{proxy.url}/echo"
            control, _, _ = await _timed_get(session, url)
            proxy.faults = DependencyFaults(latency=LATENCY)
            slow = [await _timed_get(session, url) for _ in range(3)]  # the same kept-alive connection each time
            proxy.faults = NO_FAULTS
            fast, _, _ = await _timed_get(session, url)
            assert control < LATENCY / 2 and fast < LATENCY / 2
            assert all(t >= LATENCY and s == 200 for t, s, _ in slow), slow
            assert proxy.faulted == {"dependency_latency": 3}

        async with _http() as (_, proxy), httpx.AsyncClient() as client:
            proxy.faults = DependencyFaults(latency=0.1, jitter=0.1)
            began = time.perf_counter()
            r = await client.get(f"{proxy.url}/echo")
            took = time.perf_counter() - began
            assert r.status_code == 200 and took >= 0.1

    _run(go)


@pytest.mark.parametrize("status", [503, 429, 500])
def test_http_error_answers_without_calling_upstream(status: int) -> None:
    async def go() -> None:
        async with _http() as (service, proxy), aiohttp.ClientSession() as session:
            proxy.faults = DependencyFaults(error_status=status)
            for _ in range(3):
                async with session.post(f"{proxy.url}/echo", data=b"ignored body") as resp:
                    assert resp.status == status
                    assert await resp.json() == {"error": "injected by chaosd", "dependency": "billing"}
                    assert resp.headers["x-chaosd-fault"] == "dependency_error"
                    assert resp.headers.get("Retry-After") == ("1" if status in (429, 503) else None)
            assert service.hits == 0 and proxy.faulted == {"dependency_error": 3}
            async with httpx.AsyncClient() as client:
                r = await client.get(f"{proxy.url}/echo")
                assert r.status_code == status and r.json()["dependency"] == "billing"
            proxy.faults = NO_FAULTS
            async with session.get(f"{proxy.url}/echo") as resp:
                assert resp.status == 200
            assert service.hits == 1

    _run(go)


def test_http_error_probability_is_a_share_of_requests() -> None:
    async def go() -> None:
        async with _http() as (service, proxy), aiohttp.ClientSession() as session:
            proxy.faults = DependencyFaults(error_status=503, error_probability=0.5)
            statuses = []
            for _ in range(200):
                async with session.get(f"{proxy.url}/echo") as resp:
                    statuses.append(resp.status)
            errors = statuses.count(503)
            assert 70 <= errors <= 130 and statuses.count(200) == service.hits == 200 - errors

    _run(go)


def test_http_reset_is_a_connection_reset_with_no_answer() -> None:
    async def go() -> None:
        async with _http() as (service, proxy):
            proxy.faults = DependencyFaults(reset_probability=1.0)
            async with aiohttp.ClientSession() as session:
                with pytest.raises(aiohttp.ClientOSError) as caught:
                    async with session.get(f"{proxy.url}/echo"):
                        pass
                assert isinstance(caught.value.__cause__ or caught.value, ConnectionResetError) or (
                    caught.value.errno == 104
                )
            async with httpx.AsyncClient() as client:
                with pytest.raises(httpx.ReadError):
                    await client.get(f"{proxy.url}/echo")
            reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
            writer.write(b"GET /base/echo HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % proxy.port)
            with pytest.raises(ConnectionResetError):
                await reader.read(1)  # not one response byte, and an RST rather than an orderly close
            writer.close()
            # a client may retry an idempotent request once on a new connection: each one is reset too
            assert service.hits == 0 and proxy.calls >= 3 and proxy.faulted == {"dependency_reset": proxy.calls}

    _run(go)


def test_http_timeout_holds_until_the_client_gives_up_or_the_proxy_stops() -> None:
    async def go() -> None:
        async with _http() as (service, proxy):
            proxy.faults = DependencyFaults(timeout=True)
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=0.3)) as session:
                began = time.perf_counter()
                with pytest.raises(TimeoutError):
                    async with session.get(f"{proxy.url}/echo"):
                        pass
                assert time.perf_counter() - began >= 0.3
            await _eventually(lambda: proxy.connections == 0)  # the client gave up and closed: the hold ends
            async with httpx.AsyncClient(timeout=0.3) as client:
                with pytest.raises(httpx.ReadTimeout):
                    await client.get(f"{proxy.url}/echo")
            await _eventually(lambda: proxy.connections == 0)
            reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
            writer.write(b"GET /base/echo HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % proxy.port)
            await _eventually(lambda: proxy.calls == 3)
            assert proxy.connections == 1
            began = time.perf_counter()
            await proxy.stop()  # releases the held request: its connection ends without an answer
            assert time.perf_counter() - began < 1.0
            assert await reader.read() == b""
            writer.close()
            assert service.hits == 0 and proxy.faulted == {"dependency_timeout": 3}

    _run(go)


def test_http_slice_streams_the_body_in_pieces_over_time() -> None:
    async def go() -> None:
        async with _http() as (_, proxy), aiohttp.ClientSession() as session:
            proxy.faults = DependencyFaults(slice_bytes=1000, slice_delay=0.05)
            arrivals = []
            async with session.get(f"{proxy.url}/big?n=5000") as resp:
                body = b""
                async for piece in resp.content.iter_any():
                    arrivals.append(time.perf_counter())
                    body += piece
            assert body == b"b" * 5000
            assert len(arrivals) >= 5 and arrivals[-1] - arrivals[0] >= 4 * 0.05 * 0.95, arrivals
            assert proxy.faulted == {"dependency_slice": 1}
            proxy.faults = NO_FAULTS
            took, status, body = await _timed_get(session, f"{proxy.url}/big?n=5000")
            assert status == 200 and len(body) == 5000 and took < 0.1

    _run(go)


# --- TCP ----------------------------------------------------------------------------------------------------------


async def _round_trip(port: int, message: bytes) -> tuple[float, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        began = time.perf_counter()
        writer.write(message)
        got = await reader.readexactly(len(message))
        return time.perf_counter() - began, got
    finally:
        writer.close()


def test_tcp_relays_an_echo_and_delays_each_chunk() -> None:
    async def go() -> None:
        async with _tcp_echo() as proxy:
            assert proxy.url == f"tcp://127.0.0.1:{proxy.port}"
            took, got = await _round_trip(proxy.port, b"ping" * 1000)
            assert got == b"ping" * 1000 and took < LATENCY / 2
            proxy.faults = DependencyFaults(latency=LATENCY)
            reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
            for i in range(3):  # every chunk sent back is delayed, on one connection
                began = time.perf_counter()
                writer.write(b"msg%d" % i)
                assert await reader.readexactly(4) == b"msg%d" % i
                assert time.perf_counter() - began >= LATENCY
            proxy.faults = NO_FAULTS
            began = time.perf_counter()
            writer.write(b"fast")
            assert await reader.readexactly(4) == b"fast"  # after the delayed ones, in order
            writer.close()
            took, _ = await _round_trip(proxy.port, b"again")
            assert took < LATENCY / 2
            assert proxy.calls == 3 and proxy.faulted == {"dependency_latency": 1}

    _run(go)


def test_tcp_reset_timeout_and_slice() -> None:
    async def go() -> None:
        async with _tcp_echo() as proxy:
            proxy.faults = DependencyFaults(reset_probability=1.0)
            reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
            writer.write(b"hello")
            with pytest.raises(ConnectionResetError):
                await reader.read(1)
            writer.close()

            proxy.faults = DependencyFaults(slice_bytes=100, slice_delay=0.05)
            reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
            writer.write(b"z" * 500)
            arrivals, got = [], b""
            while len(got) < 500:
                got += await reader.read(65536)
                arrivals.append(time.perf_counter())
            writer.close()
            assert got == b"z" * 500 and len(arrivals) >= 5 and arrivals[-1] - arrivals[0] >= 4 * 0.05 * 0.95

            proxy.faults = DependencyFaults(timeout=True)
            reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
            writer.write(b"anyone?")
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(reader.read(1), 0.3)
            assert proxy.faulted == {"dependency_reset": 1, "dependency_slice": 1, "dependency_timeout": 1}
            await proxy.stop()
            assert await reader.read() == b""  # released by stop
            writer.close()

    _run(go)


def test_tcp_unreachable_upstream_resets_the_client() -> None:
    async def go() -> None:
        proxy = FaultProxy("ledger", parse_upstream(f"tcp://127.0.0.1:{_free_port()}"), rng=random.Random(1))
        await proxy.start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
            with pytest.raises(ConnectionResetError):
                await reader.read(1)
            writer.close()
            assert proxy.upstream_errors == 1
        finally:
            await proxy.stop()
            await proxy.stop()  # idempotent

    _run(go)


# --- HTTPS upstream -----------------------------------------------------------------------------------------------


def _certificates(folder: Path) -> tuple[Path, Path, Path]:
    """A CA, and a certificate for 127.0.0.1 it signed: (CA file, certificate file, key file)."""
    from cryptography import x509  # noqa: PLC0415 - only this test makes certificates
    from cryptography.hazmat.primitives import hashes, serialization  # noqa: PLC0415
    from cryptography.hazmat.primitives.asymmetric import ec  # noqa: PLC0415
    from cryptography.x509.oid import NameOID  # noqa: PLC0415

    now = datetime.datetime.now(datetime.UTC)
    ca_key, leaf_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())

    def build(subject: str, key: Any, ca: bool) -> Any:
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "chaosd test CA")]))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False
            )
        return builder.sign(ca_key, hashes.SHA256())

    ca_cert = build("chaosd test CA", ca_key, ca=True)
    leaf = build("127.0.0.1", leaf_key, ca=False)
    paths = folder / "ca.pem", folder / "cert.pem", folder / "key.pem"
    paths[0].write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        leaf_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return paths


def test_https_upstream_is_called_with_tls_and_default_verification(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ca, cert, key = _certificates(tmp_path)
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(cert, key)

    async def go(trusted: bool) -> None:
        app = web.Application()

        async def hello(request: web.Request) -> web.Response:
            return web.json_response({"tls": request.secure, "host": request.headers["Host"]})

        app.router.add_get("/base/hello", hello)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_tls).start()
        port = runner.addresses[0][1]
        proxy = FaultProxy("secure", parse_upstream(f"https://127.0.0.1:{port}/base"), rng=random.Random(1))
        await proxy.start()
        try:
            assert proxy.url.startswith("http://127.0.0.1:")  # plain HTTP to the handler, TLS to the upstream
            async with aiohttp.ClientSession() as session, session.get(f"{proxy.url}/hello") as resp:
                if trusted:
                    assert resp.status == 200
                    assert await resp.json() == {"tls": True, "host": f"127.0.0.1:{port}"}
                else:  # a certificate no default CA signed: refused, as any verifying client would
                    assert resp.status == 502
                    assert "CERTIFICATE_VERIFY_FAILED" in (await resp.json())["reason"]
        finally:
            await proxy.stop()
            await runner.cleanup()

    asyncio.run(go(trusted=False))
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))  # the default trust store, as OpenSSL reads it, now holds the CA
    asyncio.run(go(trusted=True))


def test_tcp_latency_delays_each_chunk_from_its_arrival_keeping_the_spacing() -> None:
    gap = 0.1

    async def ticker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for piece in (b"a", b"b", b"c"):  # the service's own pace, a chunk every 0.1 s
            writer.write(piece)
            await writer.drain()
            await asyncio.sleep(gap)
        writer.close()

    async def go() -> None:
        server = await asyncio.start_server(ticker, "127.0.0.1", 0)
        up = parse_upstream(f"tcp://127.0.0.1:{server.sockets[0].getsockname()[1]}")
        proxy = FaultProxy("ticker", up, rng=random.Random(1))
        await proxy.start()
        proxy.faults = DependencyFaults(latency=LATENCY)
        try:
            began = time.perf_counter()
            reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
            arrivals = []
            while data := await reader.read(1):
                arrivals.append((data, time.perf_counter() - began))
            writer.close()
        finally:
            await proxy.stop()
            server.close()
            await server.wait_closed()
        assert [d for d, _ in arrivals] == [b"a", b"b", b"c"]
        assert arrivals[0][1] >= LATENCY
        # Each chunk is delayed from when it came (Toxiproxy's latency), not queued behind the previous delay:
        # 2 gaps apart in all, where one delay after another would put them 2 latencies apart.
        spread = arrivals[-1][1] - arrivals[0][1]
        assert 2 * gap * 0.9 <= spread < 2 * gap + LATENCY, arrivals

    _run(go)
