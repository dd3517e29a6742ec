"""The dependency fault proxy against hostile and unlucky clients, on loopback: a real proxy in front of a real
upstream (an aiohttp app that records every request it receives), called with raw sockets.

Each test asserts the status the client gets, what reached the upstream (nothing, where refused) and, for the
resource bounds, the open files of this process (which runs the proxy) before and after.
"""

from __future__ import annotations

import asyncio
import os
import random
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import aiohttp
import pytest
from aiohttp import web

from chaosd.config.settings import load_settings
from chaosd.core.clock import LoopClock
from chaosd.experiment.runner import Experiment
from chaosd.exporters.metrics import ExperimentCollector
from chaosd.faults.proxy import DependencyFaults, FaultProxy, parse_upstream
from chaosd.pipeline import Pipeline

DEADLINE = 5.0  # every exchange is answered or closed within this


@dataclass
class _Seen:
    method: str
    path_qs: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Upstream:
    """An aiohttp app answering every path with what it received; ``seen`` records each request."""

    seen: list[_Seen] = field(default_factory=list)
    hold: asyncio.Event = field(default_factory=asyncio.Event)  # /hold waits for it: an upstream that never answers
    open_requests: int = 0
    port: int = 0

    async def _any(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.seen.append(_Seen(request.method, request.path_qs, dict(request.headers), body))
        if request.path.endswith("/hold"):
            self.open_requests += 1
            try:
                await self.hold.wait()
            finally:
                self.open_requests -= 1
        return web.json_response({"path_qs": request.path_qs, "body": body.decode("latin-1")})


@asynccontextmanager
async def _stack(userinfo: str = "", **options: float) -> AsyncIterator[tuple[Upstream, FaultProxy]]:
    upstream = Upstream()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", upstream._any)
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    upstream.port = runner.addresses[0][1]
    proxy = FaultProxy(
        "billing",
        parse_upstream(f"http://{userinfo}127.0.0.1:{upstream.port}/base"),
        rng=random.Random(3),
        **options,  # type: ignore[arg-type]
    )
    await proxy.start()
    try:
        yield upstream, proxy
    finally:
        upstream.hold.set()
        await proxy.stop()
        await runner.cleanup()


def _run(make: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(make(), 60))


async def _until(condition: Callable[[], bool], deadline: float = DEADLINE) -> None:
    """Until ``condition`` holds, yielding to the loop; fails after ``deadline`` seconds."""
    limit = time.perf_counter() + deadline
    while not condition():
        assert time.perf_counter() < limit, "condition not met in time"
        await asyncio.sleep(0.005)  # a yield to the loop between looks, not a wait for something to happen


async def _exchange(port: int, raw: bytes) -> bytes:
    """Sends ``raw`` on a new connection and reads until the proxy closes it (within the deadline)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(raw)
        return await asyncio.wait_for(reader.read(1 << 20), DEADLINE)
    finally:
        writer.close()


def _status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def _good_get(proxy: FaultProxy, path: str) -> tuple[int, dict[str, str]]:
    async with aiohttp.ClientSession() as session, session.get(f"{proxy.url}{path}") as resp:
        return resp.status, await resp.json()


# --- framing ----------------------------------------------------------------------------------------------------

_HOST = b"Host: 127.0.0.1:%d\r\n"
_MALFORMED = {
    "content-length and transfer-encoding": b"POST /base/a HTTP/1.1\r\n{host}Content-Length: 4\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    "bare LF in a header line": b"GET /base/a HTTP/1.1\r\n{host}X-A: 1\nX-B: 2\r\n\r\n",
    "Content-Length: +3": b"POST /base/a HTTP/1.1\r\n{host}Content-Length: +3\r\n\r\nabc",
    "Content-Length: 0_3": b"POST /base/a HTTP/1.1\r\n{host}Content-Length: 0_3\r\n\r\nabc",
    "Transfer-Encoding: xchunked": b"POST /base/a HTTP/1.1\r\n{host}Transfer-Encoding: xchunked\r\n\r\n0\r\n\r\n",
    "a NUL in the target": b"GET /base/a\x00b HTTP/1.1\r\n{host}\r\n",
    "two Content-Lengths": b"POST /base/a HTTP/1.1\r\n{host}Content-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
    "a folded header line": b"GET /base/a HTTP/1.1\r\n{host}X-A: 1\r\n 2\r\n\r\n",
    "a control byte in a value": b"GET /base/a HTTP/1.1\r\n{host}X-A: 1\x012\r\n\r\n",
    "Transfer-Encoding in HTTP/1.0": b"POST /base/a HTTP/1.0\r\n{host}Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    "a bad chunk size": b"POST /base/a HTTP/1.1\r\n{host}Transfer-Encoding: chunked\r\n\r\n3x\r\nabc\r\n0\r\n\r\n",
    "a space before the colon": b"GET /base/a HTTP/1.1\r\n{host}X-A : 1\r\n\r\n",
}


@pytest.mark.parametrize("name", list(_MALFORMED))
def test_malformed_framing_is_refused_400_closed_and_never_forwarded(name: str) -> None:
    async def go() -> None:
        async with _stack() as (upstream, proxy):
            raw = _MALFORMED[name].replace(b"{host}", _HOST % proxy.port)
            # A good request after it on the same connection: the close must come first, the second never served.
            answer = await _exchange(proxy.port, raw + b"GET /base/after HTTP/1.1\r\n" + _HOST % proxy.port + b"\r\n")
            assert _status(answer) == 400, answer
            assert answer.count(b"HTTP/1.1") == 1 and b"connection: close" in answer.lower()
            assert upstream.seen == []
            assert await _good_get(proxy, "/ok") == (200, {"path_qs": "/base/ok", "body": ""})  # it still serves

    _run(go)


def test_a_smuggled_request_reaches_no_one_and_ten_later_callers_get_their_own_answers() -> None:
    async def go() -> None:
        async with _stack() as (upstream, proxy):
            smuggled = b"GET /base/smuggled HTTP/1.1\r\n" + _HOST % proxy.port + b"\r\n"
            chunked = b"0\r\n\r\n" + smuggled
            raw = (
                b"POST /base/front HTTP/1.1\r\n"
                + _HOST % proxy.port
                + b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n" % len(chunked)
                + chunked
            )
            assert _status(await _exchange(proxy.port, raw)) == 400

            async def caller(i: int) -> tuple[int, dict[str, str]]:
                return await _good_get(proxy, f"/caller?i={i}")

            answers = await asyncio.gather(*(caller(i) for i in range(10)))
            assert answers == [(200, {"path_qs": f"/base/caller?i={i}", "body": ""}) for i in range(10)]
            assert sorted(s.path_qs for s in upstream.seen) == sorted(f"/base/caller?i={i}" for i in range(10))

    _run(go)


# --- Host, Origin, credentials ----------------------------------------------------------------------------------


def test_a_foreign_host_is_421_a_foreign_origin_403_and_the_credentials_stay_home() -> None:
    async def go() -> None:
        async with _stack(userinfo="alice:s3cr3t@") as (upstream, proxy):
            own = _HOST % proxy.port
            answer = await _exchange(proxy.port, b"GET /base/a HTTP/1.1\r\nHost: evil.example\r\n\r\n")
            assert _status(answer) == 421 and b"s3cr3t" not in answer
            origin = b"Origin: http://evil.example\r\n"
            assert _status(await _exchange(proxy.port, b"GET /base/a HTTP/1.1\r\n" + own + origin + b"\r\n")) == 403
            assert upstream.seen == []
            # The negative controls: the proxy's own address, the dependency's name, its own origin, all served.
            for host, extra in (
                (own, b""),
                (b"Host: localhost:%d\r\n" % proxy.port, b""),
                (b"Host: 127.0.0.1:%d\r\n" % upstream.port, b""),
                (own, b"Origin: http://127.0.0.1:%d\r\n" % proxy.port),
            ):
                raw = b"GET /base/a HTTP/1.1\r\n" + host + extra + b"Connection: close\r\n\r\n"
                assert _status(await _exchange(proxy.port, raw)) == 200
            assert len(upstream.seen) == 4
            assert {s.headers["Authorization"] for s in upstream.seen} == {"Basic YWxpY2U6czNjcjN0"}
            assert {s.headers["Host"] for s in upstream.seen} == {f"127.0.0.1:{upstream.port}"}

    _run(go)


# --- time and resources -----------------------------------------------------------------------------------------


def test_an_upstream_that_never_answers_is_a_504_within_the_read_timeout() -> None:
    async def go() -> None:
        async with _stack(read_timeout=0.3) as (upstream, proxy):
            began = time.perf_counter()
            async with aiohttp.ClientSession() as session, session.get(f"{proxy.url}/hold") as resp:
                took = time.perf_counter() - began
                assert resp.status == 504 and (await resp.json())["error"] == "upstream timed out"
            assert 0.3 <= took < 0.3 + 1.0
            assert proxy.upstream_errors == 1 and len(upstream.seen) == 1
            await _until(lambda: upstream.open_requests == 0)  # and the upstream's request was ended with it

    _run(go)


@pytest.mark.parametrize("leave", ["close", "abort"])  # an orderly close (FIN), as a client's timeout does; a reset
def test_clients_that_leave_end_their_upstream_requests_and_their_open_files_return(leave: str) -> None:
    async def go() -> None:
        async with _stack() as (upstream, proxy):
            assert await _good_get(proxy, "/warm") == (200, {"path_qs": "/base/warm", "body": ""})
            baseline = _open_fds()
            clients = []
            for _ in range(200):
                _, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
                writer.write(b"GET /base/hold HTTP/1.1\r\n" + _HOST % proxy.port + b"\r\n")
                clients.append(writer)
            await _until(lambda: upstream.open_requests == 200)
            # The control: while they wait, each holds about four open files here (client, proxy side, upstream link
            # both ends; one reuses the pooled link counted in the baseline), so the count below can see them go.
            assert _open_fds() >= baseline + 3 * 200
            assert proxy.connections == 200
            for writer in clients:
                if leave == "close":
                    writer.close()
                else:
                    writer.transport.abort()
            await _until(lambda: upstream.open_requests == 0 and proxy.connections == 0)
            await _until(lambda: _open_fds() <= baseline + 2)  # the pool may keep an idle upstream connection
            assert proxy.upstream_errors == 0  # a client leaving is not the upstream's failure

    _run(go)


def test_connections_over_the_limit_are_503_and_closed() -> None:
    async def go() -> None:
        async with _stack(max_connections=5) as (upstream, proxy):
            proxy.faults = DependencyFaults(timeout=True)  # each connection is held open
            held = []
            for _ in range(5):
                _, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
                writer.write(b"GET /base/a HTTP/1.1\r\n" + _HOST % proxy.port + b"\r\n")
                held.append(writer)
            await _until(lambda: proxy.calls == 5)
            answer = await _exchange(proxy.port, b"GET /base/a HTTP/1.1\r\n" + _HOST % proxy.port + b"\r\n")
            assert _status(answer) == 503 and b"too many connections" in answer
            assert proxy.connections == 5 and proxy.refused == 1 and proxy.calls == 5
            for writer in held:
                writer.close()
            await _until(lambda: proxy.connections == 0)
            proxy.faults = DependencyFaults()
            assert (await _good_get(proxy, "/a"))[0] == 200  # room again
            assert [s.path_qs for s in upstream.seen] == ["/base/a"]

    _run(go)


def test_a_silent_client_is_let_go_at_the_idle_timeout_and_a_half_sent_head_is_a_408() -> None:
    async def go() -> None:
        async with _stack(idle_timeout=0.3) as (upstream, proxy), _stack() as (_, patient):
            baseline = _open_fds()
            silent, half = [], []
            for _ in range(20):
                silent.append(await asyncio.open_connection("127.0.0.1", proxy.port))
                reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
                writer.write(b"GET /base/a HTTP/1.1\r\n" + _HOST % proxy.port)  # the head never ends
                half.append((reader, writer))
            # The control: the same silent client on a proxy with the default idle timeout (60 s).
            control = await asyncio.open_connection("127.0.0.1", patient.port)
            await _until(lambda: proxy.connections == 40 and patient.connections == 1)
            for reader, _ in silent:
                assert await asyncio.wait_for(reader.read(), DEADLINE) == b""  # closed, nothing said
            for reader, _ in half:
                answer = await asyncio.wait_for(reader.read(), DEADLINE)
                assert _status(answer) == 408 and b"not complete within 0.3 s" in answer, answer
            await _until(lambda: proxy.connections == 0)
            assert patient.connections == 1 and upstream.seen == [] and proxy.calls == 0
            for _, writer in [*silent, *half, control]:
                writer.close()
            await _until(lambda: patient.connections == 0 and _open_fds() <= baseline)

    _run(go)


def test_an_upstream_that_accepts_no_connection_is_a_504_at_the_connect_timeout() -> None:
    async def go() -> None:
        # A listener whose accept queue is full: the kernel drops further SYNs, so a connect hangs (a blackholed host).
        with socket.socket() as full:
            full.bind(("127.0.0.1", 0))
            full.listen(0)
            port = full.getsockname()[1]
            fillers = []
            for _ in range(4):
                filler = socket.socket()
                filler.setblocking(False)
                filler.connect_ex(("127.0.0.1", port))
                fillers.append(filler)
            proxy = FaultProxy(
                "billing", parse_upstream(f"http://127.0.0.1:{port}"), rng=random.Random(1), connect_timeout=0.4
            )
            await proxy.start()
            try:
                began = time.perf_counter()
                async with aiohttp.ClientSession() as session, session.get(f"{proxy.url}/a") as resp:
                    took = time.perf_counter() - began
                    body = await resp.json()
                assert resp.status == 504 and body["error"] == "upstream timed out", body
                assert 0.4 <= took < 0.4 + 2.0, took
                assert proxy.upstream_errors == 1
            finally:
                await proxy.stop()
                for filler in fillers:
                    filler.close()

    _run(go)


def test_a_raw_tcp_connection_over_the_limit_is_reset_unread() -> None:
    async def go() -> None:
        async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while data := await reader.read(1024):
                writer.write(data)
            writer.close()

        server = await asyncio.start_server(echo, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        proxy = FaultProxy("echo", parse_upstream(f"tcp://127.0.0.1:{port}"), rng=random.Random(1), max_connections=3)
        await proxy.start()
        held = []
        try:
            for _ in range(3):
                reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
                writer.write(b"ping")
                assert await asyncio.wait_for(reader.readexactly(4), DEADLINE) == b"ping"
                held.append(writer)
            reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
            writer.write(b"ping")
            with pytest.raises(ConnectionResetError):
                assert await asyncio.wait_for(reader.read(4), DEADLINE) == b""  # an EOF would not be a reset
            assert proxy.refused == 1 and proxy.connections == 3
            writer.close()
            for w in held:
                w.close()
            await _until(lambda: proxy.connections == 0)
            reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)  # room again
            writer.write(b"pong")
            assert await asyncio.wait_for(reader.readexactly(4), DEADLINE) == b"pong"
            writer.close()
        finally:
            await proxy.stop()
            server.close()
            await server.wait_closed()

    _run(go)


def test_a_free_port_as_upstream_is_a_502_and_the_connect_timeout_is_a_setting() -> None:
    async def go() -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        proxy = FaultProxy(
            "billing", parse_upstream(f"http://127.0.0.1:{port}"), rng=random.Random(1), connect_timeout=0.5
        )
        await proxy.start()
        try:
            async with aiohttp.ClientSession() as session, session.get(f"{proxy.url}/a") as resp:
                assert resp.status == 502
        finally:
            await proxy.stop()

    _run(go)


def _calling_svc(port: int, **dependency: float) -> dict[str, object]:
    """A config overlay: one python stage ``call`` whose dependency ``svc`` is the upstream on ``port``."""
    stage = {
        "name": "call",
        "kind": "python",
        "handler": "dependency_handlers:echo",
        "dependencies": ["svc"],
        "service": {"distribution": "exponential", "mean": 0.005},
    }
    return {"stages": [stage], "dependencies": {"svc": {"upstream": f"http://127.0.0.1:{port}/base", **dependency}}}


def test_a_dependencys_read_timeout_setting_reaches_its_proxy() -> None:
    async def go() -> None:
        async with _stack() as (upstream, _):
            overlay = _calling_svc(upstream.port, read_timeout=0.3)
            pipeline = Pipeline(load_settings(None, overlay), LoopClock(asyncio.get_running_loop()))
            async with pipeline.lifespan():
                proxy = pipeline.stages["call"].proxies["svc"]
                timeout = aiohttp.ClientTimeout(total=2.0)
                async with aiohttp.ClientSession(timeout=timeout) as session, session.get(f"{proxy.url}/hold") as r:
                    assert r.status == 504

    _run(go)


def test_the_open_connections_of_each_proxy_are_exported() -> None:
    async def go() -> None:
        async with _stack() as (upstream, _):
            overlay = _calling_svc(upstream.port)
            exp = Experiment(load_settings(None, overlay), LoopClock(asyncio.get_running_loop()), warmup=0.0)
            collector = ExperimentCollector(exp)

            def exported() -> dict[tuple[str, str], float]:
                family = next(m for m in collector.collect_pipeline() if m.name == "chaosd_dependency_connections")
                return {(s.labels["stage"], s.labels["dependency"]): s.value for s in family.samples}

            async with exp.pipeline.lifespan():
                proxy = exp.pipeline.stages["call"].proxies["svc"]
                assert exported() == {("call", "svc"): 0.0}
                held = []
                for _ in range(3):
                    _, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
                    writer.write(b"GET /base/hold HTTP/1.1\r\n" + _HOST % proxy.port + b"\r\n")
                    held.append(writer)
                await _until(lambda: upstream.open_requests == 3)
                assert exported() == {("call", "svc"): 3.0}
                for writer in held:
                    writer.close()
                await _until(lambda: exported() == {("call", "svc"): 0.0})

    _run(go)
