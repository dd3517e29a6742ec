"""The fault proxy in front of a python stage's dependency: relays its real calls, and breaks them on demand.

HTTP/1.1 is relayed by hand over asyncio streams (request heads parsed, bodies copied as they arrive, upstream
connections pooled) rather than with aiohttp's server and client: that adds several times less per call
(``bench/dependency_proxy.py``) and lets a fault act on one request of a kept-alive connection. Raw TCP is a byte
relay. Faults are a :class:`DependencyFaults` value read at each request (HTTP) or connection and chunk (TCP).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import math
import random
import socket
import ssl
import struct
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, fields
from http import HTTPStatus

from chaosd.core.clock import LoopClock
from chaosd.core.urls import Upstream, parse_upstream

__all__ = ["NO_FAULTS", "DependencyFaults", "FaultProxy", "Upstream", "parse_upstream"]

_log = logging.getLogger(__name__)

_INTS = ("error_status", "slice_bytes")
_PROBABILITIES = ("error_probability", "reset_probability")


@dataclass(frozen=True, slots=True)
class DependencyFaults:
    """What acts on the calls through one proxy now; immutable, swapped whole (``proxy.faults = new``)."""

    latency: float = 0.0  # seconds added: HTTP before each request is forwarded; TCP to each chunk sent back
    jitter: float = 0.0  # plus a uniform draw in [0, jitter]
    error_status: int = 0  # HTTP only: answer with this status instead of calling upstream (0 = off)
    error_probability: float = 1.0  # share of requests answered with error_status while it is on
    reset_probability: float = 0.0  # share of requests (HTTP) / connections (TCP) reset with a TCP RST
    timeout: bool = False  # hold: accept the request or connection and never answer
    slice_bytes: int = 0  # relay the response (HTTP body, TCP data sent back) in slices of this many bytes
    slice_delay: float = 0.0  # seconds between slices

    def __post_init__(self) -> None:
        for name in ("latency", "jitter", "slice_delay"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number of seconds >= 0 (got {value!r})")
        for name in _PROBABILITIES:
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1] (got {getattr(self, name)!r})")
        if self.error_status != 0 and not 100 <= self.error_status <= 599:
            raise ValueError(f"error_status must be 0 (off) or an HTTP status 100-599 (got {self.error_status!r})")
        if self.slice_bytes < 0:
            raise ValueError(f"slice_bytes must be >= 0 (got {self.slice_bytes!r})")

    def names(self) -> tuple[str, ...]:
        """The catalogue actions acting now, in catalogue order."""
        on = (
            ("dependency_latency", self.latency > 0 or self.jitter > 0),
            ("dependency_error", self.error_status > 0),
            ("dependency_reset", self.reset_probability > 0),
            ("dependency_timeout", self.timeout),
            ("dependency_slice", self.slice_bytes > 0),
        )
        return tuple(name for name, acting in on if acting)

    def merged(self, other: DependencyFaults) -> DependencyFaults:
        """These faults with every field ``other`` sets (differs from the default in) taken from ``other``."""
        return DependencyFaults.from_json({**self.as_json(), **other.as_json()})

    def as_json(self) -> dict[str, float]:
        """The fields that differ from the default, as numbers (``timeout`` as 1.0): for a stage document."""
        return {
            f.name: float(getattr(self, f.name))
            for f in fields(DependencyFaults)
            if getattr(self, f.name) != getattr(NO_FAULTS, f.name)
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> DependencyFaults:
        """Strict: an unknown field, a value of the wrong type or out of range is a ValueError naming the field.

        Integral floats are taken for the integer fields and 0/1 for ``timeout``, as :meth:`as_json` writes them.
        """
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown dependency fault field {unknown[0]!r} (known: {', '.join(sorted(known))})")
        values: dict[str, float | int | bool] = {}
        for name, value in data.items():
            if (isinstance(value, bool) and name != "timeout") or not isinstance(value, int | float):
                raise ValueError(f"{name} must be a number (got {type(value).__name__})")
            if name == "timeout":
                if value not in (0, 1):
                    raise ValueError(f"timeout must be true/false or 1/0 (got {value!r})")
                values[name] = bool(value)
            elif name in _INTS:
                if not (math.isfinite(value) and value == int(value)):
                    raise ValueError(f"{name} must be a whole number (got {value!r})")
                values[name] = int(value)
            else:
                values[name] = float(value)
        return cls(**values)  # type: ignore[arg-type]  # names and types checked above


NO_FAULTS = DependencyFaults()


# --- HTTP/1.1 framing -----------------------------------------------------------------------------------------

_HOP_BY_HOP = frozenset(
    (b"connection", b"keep-alive", b"proxy-connection", b"te", b"trailer", b"upgrade", b"proxy-authorization")
)
_HEAD_END = b"\r\n\r\n"
_CRLF = b"\r\n"
_PIECE = 256 * 1024  # the most read at once while copying a body
_WHOLE = 64 * 1024  # a body this small is read whole and written with its head (one send)
_BUFFERED_REQUEST = 1024 * 1024  # request bodies up to this are read first, so a stale pooled connection can retry
_POOL = 32  # idle upstream connections kept
_CONNECT_TIMEOUT = 10.0
_HEAD_LIMIT = 256 * 1024
_NO_BODY_STATUS = (204, 304)


class _BadMessage(Exception):
    """A request or response this relay cannot frame."""


@dataclass(slots=True)
class _Head:
    """One parsed message head: its first line, the header lines kept, and the framing read from them."""

    first: bytes
    lines: list[bytes]
    length: int | None  # Content-Length, if given
    chunked: bool
    close: bool  # the sender asked to close after this message
    has_auth: bool
    expect_continue: bool
    http10: bool


def _parse_head(raw: bytes) -> _Head:
    lines = raw[:-4].split(_CRLF)
    first = lines[0]
    kept: list[bytes] = []
    length: int | None = None
    chunked = close = has_auth = expect = False
    keep_alive = False
    connection_tokens: list[bytes] = []
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not name or name != name.strip():
            raise _BadMessage("malformed header line")
        lname = name.lower()
        if lname in _HOP_BY_HOP:
            if lname in (b"connection", b"proxy-connection"):
                connection_tokens += [t.strip().lower() for t in value.split(b",")]
            continue
        if lname == b"content-length":
            try:
                n = int(value.strip())
            except ValueError:
                raise _BadMessage("bad Content-Length") from None
            if n < 0 or (length is not None and length != n):
                raise _BadMessage("bad Content-Length")
            length = n
        elif lname == b"transfer-encoding":
            chunked = value.strip().lower().endswith(b"chunked")
        elif lname == b"host":
            continue  # rewritten (requests) or never sent back (responses have none)
        elif lname == b"authorization":
            has_auth = True
        elif lname == b"expect":
            expect = value.strip().lower() == b"100-continue"
            continue
        kept.append(line)
    close = b"close" in connection_tokens
    keep_alive = b"keep-alive" in connection_tokens
    http10 = first.endswith(b"HTTP/1.0") or first.startswith(b"HTTP/1.0")
    if http10 and not keep_alive:
        close = True
    if connection_tokens:  # headers the sender named as hop-by-hop go too
        named = {t for t in connection_tokens if t not in (b"close", b"keep-alive")}
        if named:
            kept = [line for line in kept if line.partition(b":")[0].lower() not in named]
    if chunked:
        length = None
    return _Head(first, kept, length, chunked, close, has_auth, expect, http10)


async def _copy_exact(src: asyncio.StreamReader, n: int, send: Callable[[bytes], Awaitable[None]]) -> None:
    while n > 0:
        data = await src.read(min(n, _PIECE))
        if not data:
            raise asyncio.IncompleteReadError(b"", n)
        n -= len(data)
        await send(data)


async def _copy_chunked(src: asyncio.StreamReader, send: Callable[[bytes], Awaitable[None]]) -> None:
    """Relays a chunked body with its framing as it is, chunk by chunk (an SSE event goes on as it comes)."""
    while True:
        line = await src.readuntil(_CRLF)
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise _BadMessage("bad chunk size") from None
        if size == 0:
            trailer = line
            while True:  # trailer fields, then the empty line
                more = await src.readuntil(_CRLF)
                trailer += more
                if more == _CRLF:
                    break
            await send(trailer)
            return
        if size + 2 <= _WHOLE:
            await send(line + await src.readexactly(size + 2))
        else:
            await send(line)
            await _copy_exact(src, size + 2, send)


async def _discard_body(src: asyncio.StreamReader, head: _Head) -> None:
    async def drop(_: bytes) -> None:
        return None

    if head.chunked:
        await _copy_chunked(src, drop)
    elif head.length:
        await _copy_exact(src, head.length, drop)


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP RST (SO_LINGER 0): the peer sees a connection reset, not an orderly end."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def _hold(reader: asyncio.StreamReader) -> None:
    """Never answer: read and drop what the client sends until it gives up (or the proxy stops)."""
    while await reader.read(_PIECE):
        pass


def _simple_response(status: int, body: dict[str, object], extra: tuple[bytes, ...] = (), close: bool = False) -> bytes:
    data = json.dumps(body).encode()
    lines = [
        f"HTTP/1.1 {status} {_reason(status)}".encode(),
        b"Content-Type: application/json",
        b"Content-Length: %d" % len(data),
        *extra,
    ]
    if close:
        lines.append(b"Connection: close")
    return _CRLF.join(lines) + _HEAD_END + data


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


@dataclass(slots=True)
class _Conn:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter

    def usable(self) -> bool:
        return not self.writer.is_closing() and not self.reader.at_eof()

    def close(self) -> None:
        self.writer.transport.abort()


class FaultProxy:
    """One proxy on ``host`` (loopback) in front of one upstream, for one stage's calls to one dependency.

    ``faults`` is read at each request (HTTP) or at each connection and chunk (TCP), so assigning a new value
    acts on the next. ``calls`` counts requests (HTTP) or connections (TCP); ``faulted`` the calls each fault
    action acted on; ``upstream_errors`` the calls the upstream could not be reached for (answered 502).
    """

    def __init__(self, name: str, upstream: Upstream, *, rng: random.Random, host: str = "127.0.0.1") -> None:
        self.name = name
        self.upstream = upstream
        self.faults = NO_FAULTS
        self.calls = 0
        self.faulted: dict[str, int] = {}
        self.upstream_errors = 0
        self._rng = rng
        self._host = host
        self._server: asyncio.Server | None = None
        self._stopping = False
        self._failing = False  # the last call found the upstream unreachable
        self._port = 0
        self._clock: LoopClock | None = None
        self._tasks: set[asyncio.Task[object]] = set()  # one per client connection: what stop() ends
        self._idle: list[_Conn] = []
        self._ssl: ssl.SSLContext | None = ssl.create_default_context() if upstream.scheme == "https" else None
        default_port = {"http": 80, "https": 443}.get(upstream.scheme)
        host_b = b"[%s]" % upstream.host.encode() if ":" in upstream.host else upstream.host.encode("idna")
        self._host_line = b"Host: " + host_b + (b":%d" % upstream.port if upstream.port != default_port else b"")
        self._auth_line: bytes | None = None
        if upstream.username is not None or upstream.password is not None:
            token = base64.b64encode(f"{upstream.username or ''}:{upstream.password or ''}".encode()).decode()
            self._auth_line = b"Authorization: Basic " + token.encode()

    def __repr__(self) -> str:
        return f"<FaultProxy {self.name} {self.url} -> {self.upstream.display()}>"

    async def start(self) -> None:
        """Listen on a free port of ``host``."""
        if self._server is not None:
            return
        self._clock = LoopClock(asyncio.get_running_loop())
        self._stopping = False
        serve = self._serve_tcp if self.upstream.scheme == "tcp" else self._serve_http
        self._server = await asyncio.start_server(serve, self._host, 0, limit=_HEAD_LIMIT)
        self._port = self._server.sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        host = f"[{self._host}]" if ":" in self._host else self._host
        if self.upstream.scheme == "tcp":
            return f"tcp://{host}:{self._port}"
        return f"http://{host}:{self._port}{self.upstream.path}"

    @property
    def port(self) -> int:
        return self._port

    @property
    def connections(self) -> int:
        """Client connections open now (held ones included)."""
        return len(self._tasks)

    async def stop(self) -> None:
        """Close the listener and every connection, held ones included. Idempotent."""
        server, self._server = self._server, None
        self._stopping = True
        if server is not None:
            server.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for conn in self._idle:
            conn.close()
        self._idle.clear()
        if server is not None:
            await server.wait_closed()

    # --- shared ----------------------------------------------------------------------------------------------

    def _unreachable(self, reason: str) -> None:
        """A warning when calls start failing, not one per call: a handler may call a dead upstream 1,000 times/s."""
        level = logging.DEBUG if self._failing else logging.WARNING
        self._failing = True
        _log.log(level, "dependency %s: upstream %s unreachable: %s", self.name, self.upstream.display(), reason)

    def _count(self, action: str) -> None:
        self.faulted[action] = self.faulted.get(action, 0) + 1

    def _chance(self, probability: float) -> bool:
        return probability >= 1.0 or self._rng.random() < probability

    def _delay(self, faults: DependencyFaults) -> float:
        return faults.latency + (self._rng.uniform(0.0, faults.jitter) if faults.jitter > 0 else 0.0)

    async def _sleep(self, seconds: float) -> None:
        assert self._clock is not None
        await self._clock.sleep(seconds)

    def _slicer(self, writer: asyncio.StreamWriter, faults: DependencyFaults) -> Callable[[bytes], Awaitable[None]]:
        """What writes a response body to the client: at once, or in slices of ``slice_bytes`` apart in time."""
        if faults.slice_bytes <= 0:

            async def send(data: bytes) -> None:
                writer.write(data)
                await writer.drain()

            return send
        step, pause = faults.slice_bytes, faults.slice_delay
        started = False

        async def send_sliced(data: bytes) -> None:
            nonlocal started
            view = memoryview(data)
            for i in range(0, len(view), step):
                if started and pause > 0:
                    await self._sleep(pause)
                started = True
                writer.write(view[i : i + step])
                await writer.drain()

        return send_sliced

    async def _owned(
        self,
        serve: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        """Runs one client connection as a task ``stop()`` can end; a broken connection ends quietly."""
        task = asyncio.current_task()
        if self._stopping or task is None:
            writer.transport.abort()
            return
        self._tasks.add(task)
        try:
            await serve(reader, writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, _BadMessage):
            writer.transport.abort()
        except asyncio.CancelledError:
            writer.transport.abort()
            if not self._stopping:
                raise
            # stop() cancelled it: end normally, as Python 3.11's stream callback reads a cancelled task's exception()
        finally:
            self._tasks.discard(task)
            if not writer.is_closing():
                writer.close()

    # --- HTTP ------------------------------------------------------------------------------------------------

    async def _serve_http(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self._owned(self._http_connection, reader, writer)

    async def _http_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                raw = await reader.readuntil(_HEAD_END)
            except asyncio.IncompleteReadError:
                return  # the client closed between requests
            except asyncio.LimitOverrunError:
                writer.write(_simple_response(431, {"error": "request head too large"}, close=True))
                return
            try:
                head = _parse_head(raw)
            except _BadMessage as exc:
                writer.write(_simple_response(400, {"error": str(exc)}, close=True))
                return
            if head.first.count(b" ") < 2:
                writer.write(_simple_response(400, {"error": "malformed request line"}, close=True))
                return
            self.calls += 1
            faults = self.faults
            if faults is not NO_FAULTS:
                if await self._cut(faults, reader, writer):
                    return
                if faults.error_status and self._chance(faults.error_probability):
                    self._count("dependency_error")
                    if not await self._answer_error(reader, writer, head, faults.error_status):
                        return
                    continue
                if faults.latency > 0 or faults.jitter > 0:
                    self._count("dependency_latency")
                    await self._sleep(self._delay(faults))
                if faults.slice_bytes > 0:
                    self._count("dependency_slice")
            if not await self._forward(reader, writer, head, faults):
                return

    async def _answer_error(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: _Head, status: int
    ) -> bool:
        """The injected error, without calling upstream; whether the connection goes on."""
        close = head.close or head.expect_continue  # a client waiting for 100-continue may or may not send
        if not head.expect_continue:
            await _discard_body(reader, head)
        extra = [b"x-chaosd-fault: dependency_error"]
        if status in (429, 503):
            extra.append(b"Retry-After: 1")
        writer.write(
            _simple_response(status, {"error": "injected by chaosd", "dependency": self.name}, tuple(extra), close)
        )
        await writer.drain()
        return not close

    def _request_head(self, head: _Head) -> bytes:
        method, _, rest = head.first.partition(b" ")
        target = rest.rpartition(b" ")[0]
        lines = [method + b" " + target + b" HTTP/1.1", self._host_line, *head.lines]
        if self._auth_line is not None and not head.has_auth:
            lines.append(self._auth_line)
        return _CRLF.join(lines) + _HEAD_END

    async def _connect(self) -> _Conn:
        up = self.upstream
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(
                up.host, up.port, ssl=self._ssl, server_hostname=up.host if self._ssl else None, limit=_HEAD_LIMIT
            ),
            _CONNECT_TIMEOUT,
        )
        return _Conn(reader, writer)

    async def _forward(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: _Head, faults: DependencyFaults
    ) -> bool:
        """Relay one request and its response; whether the client connection goes on."""
        if head.expect_continue:
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        out = self._request_head(head)
        body = b""
        streamed = head.chunked or (head.length or 0) > _BUFFERED_REQUEST
        if not streamed and head.length:
            body = await reader.readexactly(head.length)
        for attempt in range(2):  # a pooled connection the upstream has closed meanwhile: one retry on a new one
            while self._idle and not self._idle[-1].usable():
                self._idle.pop().close()
            reused = attempt == 0 and bool(self._idle) and not streamed
            try:
                conn = self._idle.pop() if reused else await self._connect()
            except (OSError, TimeoutError) as exc:  # ssl.SSLError is an OSError
                return await self._bad_gateway(writer, head, exc, body_read=not streamed)
            try:
                conn.writer.write(out + body if body else out)
                if streamed:
                    await self._stream_request(reader, conn, head)
                response = await conn.reader.readuntil(_HEAD_END)
            except (OSError, asyncio.IncompleteReadError) as exc:  # ConnectionError, ssl.SSLError
                conn.close()
                if reused:
                    continue
                return await self._bad_gateway(writer, head, exc, body_read=not streamed)
            except BaseException:
                conn.close()
                raise
            self._failing = False
            try:
                return await self._relay_response(writer, head, conn, response, faults)
            except BaseException:
                conn.close()
                raise
        raise AssertionError("unreachable: the second attempt returns")  # pragma: no cover

    async def _stream_request(self, reader: asyncio.StreamReader, conn: _Conn, head: _Head) -> None:
        async def send(data: bytes) -> None:
            conn.writer.write(data)
            await conn.writer.drain()

        if head.chunked:
            await _copy_chunked(reader, send)
        elif head.length:
            await _copy_exact(reader, head.length, send)

    async def _relay_response(
        self, writer: asyncio.StreamWriter, request: _Head, conn: _Conn, raw: bytes, faults: DependencyFaults
    ) -> bool:
        head = _parse_head(raw)
        status = _status(head.first)
        while 100 <= status < 200:  # interim answers (100 Continue, 103 Early Hints) go on as they are
            if status != 100 or not request.expect_continue:
                writer.write(raw)
            raw = await conn.reader.readuntil(_HEAD_END)
            head = _parse_head(raw)
            status = _status(head.first)
        bodiless = request.first.startswith(b"HEAD ") or status in _NO_BODY_STATUS
        until_eof = not bodiless and not head.chunked and head.length is None
        close = request.close or until_eof
        lines = [head.first, *head.lines]
        if close:
            lines.append(b"Connection: close")
        out = _CRLF.join(lines) + _HEAD_END
        if bodiless:
            writer.write(out)
        elif head.length is not None and head.length <= _WHOLE and faults.slice_bytes <= 0:
            writer.write(out + await conn.reader.readexactly(head.length) if head.length else out)
        else:
            writer.write(out)
            send = self._slicer(writer, faults)
            if head.chunked:
                await _copy_chunked(conn.reader, send)
            elif head.length is not None:
                await _copy_exact(conn.reader, head.length, send)
            else:
                while data := await conn.reader.read(_PIECE):
                    await send(data)
        await writer.drain()
        if until_eof or head.close or len(self._idle) >= _POOL or not conn.usable():
            conn.close()
        else:
            self._idle.append(conn)
        return not close

    async def _bad_gateway(
        self,
        writer: asyncio.StreamWriter,
        head: _Head,
        exc: BaseException,
        *,
        body_read: bool,
    ) -> bool:
        self.upstream_errors += 1
        reason = type(exc).__name__ if isinstance(exc, TimeoutError) else (str(exc) or type(exc).__name__)
        self._unreachable(reason)
        close = head.close or not body_read
        body: dict[str, object] = {"error": "upstream unreachable", "dependency": self.name, "reason": reason}
        writer.write(_simple_response(502, body, close=close))
        await writer.drain()
        return not close

    async def _cut(self, faults: DependencyFaults, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """The faults that end a call before it reaches the upstream, HTTP or TCP alike: a timeout holds it open
        unanswered until the caller gives up, a reset drops it. True if one did."""
        if faults.timeout:
            self._count("dependency_timeout")
            await _hold(reader)
            return True
        if faults.reset_probability > 0 and self._chance(faults.reset_probability):
            self._count("dependency_reset")
            _reset(writer)
            return True
        return False

    # --- TCP -------------------------------------------------------------------------------------------------

    async def _serve_tcp(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self._owned(self._tcp_connection, reader, writer)

    async def _tcp_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.calls += 1
        if await self._cut(self.faults, reader, writer):
            return
        try:
            conn = await self._connect()
        except (OSError, TimeoutError) as exc:
            self.upstream_errors += 1
            self._unreachable(str(exc) or type(exc).__name__)
            _reset(writer)
            return
        self._failing = False
        upward = asyncio.create_task(self._pump_up(reader, conn))
        try:
            await self._pump_down(conn, writer)
        finally:
            conn.close()  # first: stop() may cancel the wait below
            upward.cancel()
            await asyncio.gather(upward, return_exceptions=True)

    async def _pump_up(self, reader: asyncio.StreamReader, conn: _Conn) -> None:
        try:
            while data := await reader.read(_PIECE):
                conn.writer.write(data)
                await conn.writer.drain()
            if conn.writer.can_write_eof():
                conn.writer.write_eof()
        except ConnectionError:
            conn.close()  # the client reset: so does the upstream side, and the downward pump ends

    async def _pump_down(self, conn: _Conn, writer: asyncio.StreamWriter) -> None:
        """Upstream to client, where the faults act; chunks delayed by latency keep their order and spacing."""
        src = conn.reader
        delayed: asyncio.Queue[tuple[float, bytes] | None] | None = None
        sender: asyncio.Task[None] | None = None
        counted: set[str] = set()
        try:
            while data := await src.read(_PIECE):
                faults = self.faults
                if faults is NO_FAULTS and delayed is None:
                    writer.write(data)
                    await writer.drain()
                    continue
                for action in ("dependency_latency", "dependency_slice"):
                    if action not in counted and action in faults.names():
                        counted.add(action)
                        self._count(action)
                if delayed is None and faults.latency <= 0 and faults.jitter <= 0:
                    await self._slicer(writer, faults)(data)
                    continue
                if delayed is None:  # from the first delayed chunk on, every chunk goes through the queue, in order
                    delayed = asyncio.Queue(maxsize=64)
                    sender = asyncio.create_task(self._send_delayed(delayed, conn, writer))
                assert self._clock is not None
                await delayed.put((self._clock.now() + self._delay(faults), data))
            if delayed is not None and sender is not None:
                await delayed.put(None)
                await sender
                sender = None
            if writer.can_write_eof() and not writer.is_closing():
                writer.write_eof()
                await writer.drain()
        finally:
            if sender is not None:
                sender.cancel()
                await asyncio.gather(sender, return_exceptions=True)

    async def _send_delayed(
        self, queue: asyncio.Queue[tuple[float, bytes] | None], conn: _Conn, writer: asyncio.StreamWriter
    ) -> None:
        assert self._clock is not None
        try:
            while (item := await queue.get()) is not None:
                due, data = item
                await self._clock.sleep_until(due)
                await self._slicer(writer, self.faults)(data)
        except ConnectionError:  # the client went: end the upstream side, and take what the pump still puts
            writer.transport.abort()
            conn.close()
            while await queue.get() is not None:
                pass


def _status(first: bytes) -> int:
    try:
        return int(first.split(b" ", 2)[1])
    except (IndexError, ValueError):
        raise _BadMessage("bad status line") from None
