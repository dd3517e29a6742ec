"""Request framing fuzzed against a real fault proxy in front of a real upstream (a strict h11 server counting the
bytes it receives and recording the requests it parses), on loopback: generated requests, each well-formed or
broken in one known way.

Every request is answered or closed within a deadline (no hang); a well-formed one reaches the upstream as sent, a
broken one is refused and reaches nothing (no forwarded malformed request); the proxy serves a good request after
them all with no connection left open (no crash).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import h11
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chaosd.faults.proxy import FaultProxy, parse_upstream

DEADLINE = 5.0


@dataclass
class _Stack:
    proxy: FaultProxy
    seen: list[tuple[str, bytes]]  # the requests the upstream parsed: path and query, body
    received: list[int]  # bytes that reached the upstream at all, parsed or not
    loop: asyncio.AbstractEventLoop


async def _upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, box: _Stack) -> None:
    """A strict HTTP/1.1 server (h11) that counts every byte it is sent and records each request it parses."""
    conn = h11.Connection(h11.SERVER)
    target, body = b"", b""
    try:
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await reader.read(65536)
                box.received[0] += len(data)
                conn.receive_data(data)
            elif isinstance(event, h11.Request):
                target, body = event.target, b""
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                box.seen.append((target.decode(), body))
                writer.write(conn.send(h11.Response(status_code=200, headers=[("content-length", "2")])) or b"")
                writer.write((conn.send(h11.Data(b"ok")) or b"") + (conn.send(h11.EndOfMessage()) or b""))
                await writer.drain()
                conn.start_next_cycle()
            else:
                return
    except (h11.ProtocolError, ConnectionError):
        return
    finally:
        writer.close()


@pytest.fixture(scope="module")
def stack() -> Iterator[_Stack]:
    """The upstream and the proxy, served by a loop of their own in a thread, for blocking test clients."""
    ready = threading.Event()
    box: list[_Stack] = []
    stop: list[asyncio.Event] = []

    async def serve() -> None:
        holder: list[_Stack] = []
        server = await asyncio.start_server(lambda r, w: _upstream(r, w, holder[0]), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        proxy = FaultProxy("fuzz", parse_upstream(f"http://127.0.0.1:{port}"), rng=random.Random(1))
        await proxy.start()
        holder.append(_Stack(proxy, [], [0], asyncio.get_running_loop()))
        stop.append(asyncio.Event())
        box.append(holder[0])
        ready.set()
        try:
            await stop[0].wait()
        finally:
            await proxy.stop()
            server.close()
            await server.wait_closed()

    thread = threading.Thread(target=asyncio.run, args=(serve(),), daemon=True)
    thread.start()
    assert ready.wait(10)
    yield box[0]
    box[0].loop.call_soon_threadsafe(stop[0].set)
    thread.join(10)


def _exchange(port: int, raw: bytes) -> bytes:
    """Sends ``raw`` and reads until the proxy closes; a hang fails at the deadline (socket.timeout)."""
    with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE) as sock:
        with contextlib.suppress(ConnectionError):  # refused and closed before all of it was sent
            sock.sendall(raw)
        answer = b""
        try:
            while data := sock.recv(65536):
                answer += data
        except ConnectionResetError:
            pass
        return answer


# --- a request, in parts --------------------------------------------------------------------------------------

_TOKEN = st.text("abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=12).map(lambda s: "x-" + s)
_VALUE = st.text("abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!#$%&'*+.^_`|~/=;,", max_size=30)


@dataclass
class _Request:
    method: bytes
    target: bytes
    version: bytes
    host: bytes
    headers: list[bytes]  # whole lines, without their CRLF
    framing: list[bytes]  # the Content-Length / Transfer-Encoding lines
    body: bytes  # as framed on the wire
    payload: bytes  # what the upstream should receive

    def raw(self) -> bytes:
        lines = [self.method + b" " + self.target + b" " + self.version, self.host, *self.headers, *self.framing]
        return b"\r\n".join([*lines, b"Connection: close", b"", b""]) + self.body


@st.composite
def _good(draw: st.DrawFn) -> _Request:
    method = draw(st.sampled_from([b"GET", b"POST", b"PUT", b"DELETE", b"PATCH"]))
    path = draw(st.text("abcdefghijklmnopqrstuvwxyz0123456789-._~", max_size=16))
    query = draw(st.text("abcdefghijklmnopqrstuvwxyz0123456789=&", max_size=12))
    target = ("/" + path + ("?" + query if query else "")).encode()
    names = draw(st.lists(_TOKEN, max_size=4, unique=True))
    headers = [f"{n}: {draw(_VALUE).strip()}".encode() for n in names]
    payload = draw(st.binary(max_size=200))
    if draw(st.booleans()):
        framing, body = [b"Content-Length: %d" % len(payload)], payload
    else:
        cuts = sorted(draw(st.lists(st.integers(0, len(payload)), max_size=3)))
        pieces = [payload[a:b] for a, b in zip([0, *cuts], [*cuts, len(payload)], strict=True) if b > a]
        body = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
        framing = [b"Transfer-Encoding: chunked"]
    return _Request(method, target, b"HTTP/1.1", b"", headers, framing, body, payload)


def _head_lines(r: _Request) -> int:
    return 1 + len(r.headers) + len(r.framing)


_Draw = Callable[[st.SearchStrategy[Any]], Any]
_Mutation = Callable[[_Request, _Draw], None]


def _both_framings(r: _Request, draw: _Draw) -> None:
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(r.payload), r.payload) if r.payload else b"0\r\n\r\n"
    r.framing, r.body = [b"Content-Length: %d" % len(chunked), b"Transfer-Encoding: chunked"], chunked
    if draw(st.booleans()):
        r.framing.reverse()


def _bad_length(r: _Request, draw: _Draw) -> None:
    n = len(r.payload)
    shape = draw(st.sampled_from(["+%d", "0_%d", "%d.0", "0x%x", "-%d", "%d %d", "%d,%d1", " %dx"]))
    r.framing, r.body = (
        [b"Content-Length: " + (shape.replace("%d", str(n)).replace("%x", f"{n:x}")).encode()],
        r.payload,
    )


def _conflicting_lengths(r: _Request, draw: _Draw) -> None:
    n = len(r.payload)
    r.framing, r.body = [b"Content-Length: %d" % n, b"Content-Length: %d" % (n + 1)], r.payload + b"x"


def _bad_coding(r: _Request, draw: _Draw) -> None:
    coding = draw(
        st.sampled_from([b"xchunked", b"chunkedx", b"gzip", b"gzip, chunked", b"identity", b"chunked, chunked"])
    )
    r.framing = [b"Transfer-Encoding: " + coding]
    r.body = b"0\r\n\r\n"


def _bare_lf(r: _Request, draw: _Draw) -> None:
    where = draw(st.integers(0, _head_lines(r) - 1))
    lines = [r.host, *r.headers, *r.framing]
    lines[where] = lines[where] + b"\nX-Injected: 1"
    r.host, r.headers, r.framing = lines[0], lines[1 : 1 + len(r.headers)], lines[1 + len(r.headers) :]


def _control_in_target(r: _Request, draw: _Draw) -> None:
    byte = draw(st.sampled_from([b"\x00", b"\x01", b"\x7f", b" ", b"\t", b"\r"]))
    at = draw(st.integers(1, len(r.target)))
    r.target = r.target[:at] + byte + r.target[at:]


def _control_in_value(r: _Request, draw: _Draw) -> None:
    byte = bytes([draw(st.sampled_from([*range(0, 9), *range(11, 32), 127]))])
    value = draw(st.binary(max_size=5))
    r.headers = [*r.headers, b"X-Bad: a" + byte + value.replace(b"\n", b"").replace(b"\r", b"") + b"z"]


def _folded(r: _Request, draw: _Draw) -> None:
    r.headers = [*r.headers, b"X-Folded: a", draw(st.sampled_from([b" b", b"\tb"]))]


def _space_before_colon(r: _Request, draw: _Draw) -> None:
    r.headers = [*r.headers, b"X-Spaced" + draw(st.sampled_from([b" ", b"\t"])) + b": 1"]


def _bad_chunk(r: _Request, draw: _Draw) -> None:
    size = draw(st.sampled_from([b"zz", b"0x3", b"-1", b"", b"3 3", b"+3"]))
    r.framing, r.body = [b"Transfer-Encoding: chunked"], size + b"\r\nabc\r\n0\r\n\r\n"


def _http10_chunked(r: _Request, draw: _Draw) -> None:
    r.version = b"HTTP/1.0"
    _both_framings(r, draw)
    r.framing = [b"Transfer-Encoding: chunked"]


def _foreign_host(r: _Request, draw: _Draw) -> None:
    r.host = b"Host: " + draw(st.sampled_from([b"evil.example", b"127.0.0.1", b"127.0.0.1:1", b"localhost"]))


def _two_hosts(r: _Request, draw: _Draw) -> None:
    r.headers = [*r.headers, b"Host: evil.example"]


_MUTATIONS: dict[str, _Mutation] = {
    f.__name__.lstrip("_"): f
    for f in (
        _both_framings,
        _bad_length,
        _conflicting_lengths,
        _bad_coding,
        _bare_lf,
        _control_in_target,
        _control_in_value,
        _folded,
        _space_before_colon,
        _bad_chunk,
        _http10_chunked,
        _foreign_host,
        _two_hosts,
    )
}


def _status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0


@settings(
    max_examples=400, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(request=_good(), mutation=st.sampled_from([None, *_MUTATIONS]), data=st.data())
def test_fuzzed_framing_is_relayed_whole_or_refused_whole(
    stack: _Stack, request: _Request, mutation: str | None, data: st.DataObject
) -> None:
    request.host = b"Host: 127.0.0.1:%d" % stack.proxy.port
    if mutation is not None:
        _MUTATIONS[mutation](request, data.draw)
    before, received = len(stack.seen), stack.received[0]
    answer = _exchange(stack.proxy.port, request.raw())
    status = _status(answer)
    if mutation is None:
        assert status == 200, answer
        assert stack.seen[before:] == [(request.target.decode(), request.payload)]
    else:
        assert status in (400, 421), (mutation, request.raw(), answer)
        assert stack.received[0] == received, (mutation, request.raw())  # not one byte of it went upstream


def test_after_the_fuzz_a_good_request_is_served_and_nothing_is_left_open(stack: _Stack) -> None:
    raw = b"GET /after HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n\r\n" % stack.proxy.port
    assert _status(_exchange(stack.proxy.port, raw)) == 200
    assert stack.seen[-1] == ("/after", b"")
    limit = time.perf_counter() + DEADLINE
    while stack.proxy.connections:  # the last connection's task ends just after it closes
        assert time.perf_counter() < limit, "a connection stayed open"
        time.sleep(0.01)  # a pause between looks at a condition with a deadline


@pytest.mark.parametrize(
    "raw",
    [
        b"\r\n\r\n",
        b"\r\nGET /x HTTP/1.1\r\nHost: {host}\r\n\r\n",
        b"\n\n",
        b"GET\r\n\r\n",
        b"\x00\r\n\r\n",
        b" \r\n\r\n",
    ],
)
def test_heads_that_are_hardly_heads_are_400_and_reach_nothing(stack: _Stack, raw: bytes) -> None:
    received = stack.received[0]
    answer = _exchange(stack.proxy.port, raw.replace(b"{host}", b"127.0.0.1:%d" % stack.proxy.port))
    assert _status(answer) == 400, answer
    assert stack.received[0] == received
