"""HTTP/1.1 relayed by hand over asyncio streams for a dependency's fault proxy: request heads parsed, bodies
copied as they arrive, upstream connections pooled; a fault acts on one request of a kept-alive connection."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from http import HTTPStatus

from chaosd.faults.dependency import NO_FAULTS, PIECE, CallFaults, DependencyFaults
from chaosd.faults.upstream_pool import Conn, UpstreamPool

__all__ = ["BadMessage", "HttpRelay"]

# --- HTTP/1.1 framing -----------------------------------------------------------------------------------------

_HOP_BY_HOP = frozenset(
    (b"connection", b"keep-alive", b"proxy-connection", b"te", b"trailer", b"upgrade", b"proxy-authorization")
)
_HEAD_END = b"\r\n\r\n"
_CRLF = b"\r\n"
_WHOLE = 64 * 1024  # a body this small is read whole and written with its head (one send)
_BUFFERED_REQUEST = 1024 * 1024  # request bodies up to this are read first, so a stale pooled connection can retry
_NO_BODY_STATUS = (204, 304)


class BadMessage(Exception):
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
            raise BadMessage("malformed header line")
        lname = name.lower()
        if lname in _HOP_BY_HOP:
            if lname in (b"connection", b"proxy-connection"):
                connection_tokens += [t.strip().lower() for t in value.split(b",")]
            continue
        if lname == b"content-length":
            try:
                n = int(value.strip())
            except ValueError:
                raise BadMessage("bad Content-Length") from None
            if n < 0 or (length is not None and length != n):
                raise BadMessage("bad Content-Length")
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
        data = await src.read(min(n, PIECE))
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
            raise BadMessage("bad chunk size") from None
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


def _status(first: bytes) -> int:
    try:
        return int(first.split(b" ", 2)[1])
    except (IndexError, ValueError):
        raise BadMessage("bad status line") from None


class HttpRelay:
    """Relays HTTP/1.1 calls to one upstream, one client connection at a time, the faults acting on each request:
    request heads parsed, bodies copied as they arrive, upstream connections pooled."""

    def __init__(self, acts: CallFaults, pool: UpstreamPool) -> None:
        self._acts = acts
        self._pool = pool
        upstream = pool.upstream
        default_port = {"http": 80, "https": 443}.get(upstream.scheme)
        host_b = b"[%s]" % upstream.host.encode() if ":" in upstream.host else upstream.host.encode("idna")
        self._host_line = b"Host: " + host_b + (b":%d" % upstream.port if upstream.port != default_port else b"")
        self._auth_line: bytes | None = None
        if upstream.username is not None or upstream.password is not None:
            token = base64.b64encode(f"{upstream.username or ''}:{upstream.password or ''}".encode()).decode()
            self._auth_line = b"Authorization: Basic " + token.encode()

    async def connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
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
            except BadMessage as exc:
                writer.write(_simple_response(400, {"error": str(exc)}, close=True))
                return
            if head.first.count(b" ") < 2:
                writer.write(_simple_response(400, {"error": "malformed request line"}, close=True))
                return
            faults = self._acts.call()
            if faults is not NO_FAULTS:
                if await self._acts.cut(faults, reader, writer):
                    return
                if faults.error_status and self._acts.chance(faults.error_probability):
                    self._acts.count("dependency_error")
                    if not await self._answer_error(reader, writer, head, faults.error_status):
                        return
                    continue
                if faults.latency > 0 or faults.jitter > 0:
                    self._acts.count("dependency_latency")
                    await self._acts.sleep(self._acts.delay(faults))
                if faults.slice_bytes > 0:
                    self._acts.count("dependency_slice")
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
            _simple_response(
                status, {"error": "injected by chaosd", "dependency": self._pool.name}, tuple(extra), close
            )
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
            idle = self._pool.take(reuse=attempt == 0 and not streamed)
            reused = idle is not None
            try:
                conn = idle if idle is not None else await self._pool.connect()
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
            self._pool.reached()
            try:
                return await self._relay_response(writer, head, conn, response, faults)
            except BaseException:
                conn.close()
                raise
        raise AssertionError("unreachable: the second attempt returns")  # pragma: no cover

    async def _stream_request(self, reader: asyncio.StreamReader, conn: Conn, head: _Head) -> None:
        async def send(data: bytes) -> None:
            conn.writer.write(data)
            await conn.writer.drain()

        if head.chunked:
            await _copy_chunked(reader, send)
        elif head.length:
            await _copy_exact(reader, head.length, send)

    async def _relay_response(
        self, writer: asyncio.StreamWriter, request: _Head, conn: Conn, raw: bytes, faults: DependencyFaults
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
            send = self._acts.sender(writer, faults)
            if head.chunked:
                await _copy_chunked(conn.reader, send)
            elif head.length is not None:
                await _copy_exact(conn.reader, head.length, send)
            else:
                while data := await conn.reader.read(PIECE):
                    await send(data)
        await writer.drain()
        self._pool.give_back(conn, reusable=not (until_eof or head.close))
        return not close

    async def _bad_gateway(
        self,
        writer: asyncio.StreamWriter,
        head: _Head,
        exc: BaseException,
        *,
        body_read: bool,
    ) -> bool:
        reason = type(exc).__name__ if isinstance(exc, TimeoutError) else (str(exc) or type(exc).__name__)
        self._pool.unreachable(reason)
        close = head.close or not body_read
        body: dict[str, object] = {"error": "upstream unreachable", "dependency": self._pool.name, "reason": reason}
        writer.write(_simple_response(502, body, close=close))
        await writer.drain()
        return not close
