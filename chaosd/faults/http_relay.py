"""HTTP/1.1 relayed for a dependency's fault proxy, framed by h11 on both sides: requests whose framing is ambiguous or
malformed refused, foreign Host and Origin refused, bodies streamed, upstream connections pooled and bounded in time;
a fault acts on one request of a kept-alive connection."""

from __future__ import annotations

import asyncio
import base64
import json
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from http import HTTPStatus

import h11

from chaosd.faults.call_tracing import CallTracer
from chaosd.faults.dependency import NO_FAULTS, PIECE, CallFaults, DependencyFaults
from chaosd.faults.upstream_pool import HEAD_LIMIT, Conn, UpstreamPool

__all__ = ["BadMessage", "HttpRelay"]

_HOP_BY_HOP = frozenset(
    (b"connection", b"keep-alive", b"proxy-connection", b"te", b"trailer", b"upgrade", b"proxy-authorization")
)
_FRAMING = frozenset((b"content-length", b"transfer-encoding"))
_BUFFERED_REQUEST = 1024 * 1024  # request bodies up to this are read first, so a stale pooled connection can retry
# A head's end as h11 finds it (it takes a bare LF for a line end; we refuse those, below).
_HEAD_END = re.compile(rb"\r?\n\r?\n")
# What a head line may hold: no CR or LF of its own, no control byte but HTAB (RFC 9110 §5.5), not a folded line.
_BAD_LINE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]|^[ \t]")


class BadMessage(Exception):
    """A request or response this relay cannot frame."""


class _Refused(Exception):
    """A request refused before anything of it is forwarded: answered ``status`` and the connection closed."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


@dataclass(slots=True)
class _Call:
    """One request read from the client: its head as forwarded, and what the relay needs to know of it."""

    method: bytes
    head: h11.Request  # as sent upstream: host, framing and credentials set
    expect_continue: bool
    status: int | None = None  # what the client was answered, once it was


def _answer(status: int, body: Mapping[str, object], extra: Iterable[tuple[bytes, bytes]] = ()) -> h11.Response:
    return h11.Response(
        status_code=status,
        headers=[(b"content-type", b"application/json"), (b"content-length", b"%d" % len(_json(body))), *extra],
        reason=_reason(status).encode(),
    )


def _json(body: Mapping[str, object]) -> bytes:
    return json.dumps(body).encode()


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def _refusal(exc: h11.RemoteProtocolError) -> int:
    """400 for any framing h11 refuses (its 501 for an unknown transfer coding too: a smuggling attempt, not a
    feature request), 431 for a head too large."""
    return 431 if exc.error_status_hint == 431 else 400


def _check_head(raw: bytes) -> None:
    """What h11 lets through that a proxy must not: bare LF line ends, control bytes, folded lines."""
    lines = raw.split(b"\r\n")
    if any(_BAD_LINE.search(line) for line in lines):
        raise _Refused(400, "malformed request head")


class HttpRelay:
    """Relays HTTP/1.1 calls to one upstream, one client connection at a time, the faults acting on each request.

    ``hosts`` are the Host values a request may carry (the proxy's own address, the upstream's name); a request
    naming another is refused 421, an Origin from elsewhere 403, before anything of it reaches the upstream.
    """

    def __init__(self, acts: CallFaults, pool: UpstreamPool, *, read_timeout: float, idle_timeout: float) -> None:
        self._acts = acts
        self._pool = pool
        self._read_timeout = read_timeout
        self._idle_timeout = idle_timeout
        self.tracer: CallTracer | None = None  # set when the daemon exports traces
        upstream = pool.upstream
        default_port = {"http": 80, "https": 443}.get(upstream.scheme)
        host_b = b"[%s]" % upstream.host.encode() if ":" in upstream.host else upstream.host.encode("idna")
        self._host = host_b + (b":%d" % upstream.port if upstream.port != default_port else b"")
        self._hosts = {self._host.lower(), (host_b + b":%d" % upstream.port).lower()}
        self._origins = {upstream.scheme.encode() + b"://" + h for h in self._hosts}
        self._auth: bytes | None = None
        if upstream.username is not None or upstream.password is not None:
            token = base64.b64encode(f"{upstream.username or ''}:{upstream.password or ''}".encode())
            self._auth = b"Basic " + token

    def listening_on(self, host: str, port: int) -> None:
        """The proxy's own address: a Host (and an http Origin) a caller of the proxy may name."""
        own = (f"[{host}]" if ":" in host else host).encode() + b":%d" % port
        self._hosts.add(own.lower())
        self._origins.add(b"http://" + own.lower())

    async def connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        client = h11.Connection(h11.SERVER, max_incomplete_event_size=HEAD_LIMIT)
        while True:
            try:
                call = await self._read_request(client, reader)
                if call is None:
                    return
                go_on = await self._serve(client, reader, writer, call)
            except _Refused as refused:  # before any answer: the head, or a body read before anything is sent
                self._refuse(client, writer, refused)
                return
            if not go_on:
                return
            if client.our_state is not h11.DONE or client.their_state is not h11.DONE:
                return
            client.start_next_cycle()

    async def _serve(
        self, client: h11.Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, call: _Call
    ) -> bool:
        """One request, traced when its caller's trace is sampled; whether the client connection may go on."""
        handle = self._traced(call)
        if handle is None:
            return await self._faulted(client, reader, writer, call)
        assert self.tracer is not None
        acted = dict(self._acts.faulted)
        error: str | None = None
        try:
            return await self._faulted(client, reader, writer, call)
        except BaseException as exc:
            error = type(exc).__name__
            raise
        finally:
            names = tuple(k for k, n in self._acts.faulted.items() if n != acted.get(k, 0))
            self.tracer.call_ended(handle, call.status, names, error)

    def _traced(self, call: _Call) -> object | None:
        """A span for the call when a tracer is set and the call carries a sampled ``traceparent``; the header sent
        upstream then names the call's own span."""
        if self.tracer is None:
            return None
        headers = call.head.headers
        header = next((v for n, v in headers if n == b"traceparent"), None)
        if header is None:
            return None
        path = call.head.target.split(b"?", 1)[0].decode("latin-1")  # never the query: it may hold a secret
        upstream = self._pool.upstream
        handle = self.tracer.call_started(
            header.decode("latin-1"), self._pool.name, call.method.decode("latin-1"), path, upstream.host, upstream.port
        )
        if handle is not None:
            ours = self.tracer.call_header(handle).encode()
            kept = [(n, ours if n.lower() == b"traceparent" else v) for n, v in headers.raw_items()]
            call.head = h11.Request(method=call.head.method, target=call.head.target, headers=kept)
        return handle

    async def _faulted(
        self, client: h11.Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, call: _Call
    ) -> bool:
        """One request, faulted or forwarded; whether the client connection may go on."""
        faults = self._acts.call()
        if faults is not NO_FAULTS:
            if await self._acts.cut(faults, reader, writer):
                return False
            if faults.error_status and self._acts.chance(faults.error_probability):
                self._acts.count("dependency_error")
                return await self._answer_error(client, reader, writer, call, faults.error_status)
            if faults.latency > 0 or faults.jitter > 0:
                self._acts.count("dependency_latency")
                await self._acts.sleep(self._acts.delay(faults))
            if faults.slice_bytes > 0:
                self._acts.count("dependency_slice")
        return await self._forward(client, reader, writer, call, faults)

    # --- the client side ----------------------------------------------------------------------------------------

    async def _read_request(self, client: h11.Connection, reader: asyncio.StreamReader) -> _Call | None:
        """The next request's head, checked; None if the client closed between requests."""
        while True:
            buffered, closed = client.trailing_data
            end = _HEAD_END.search(buffered)
            if end is not None:
                if end.group() != b"\r\n\r\n":
                    raise _Refused(400, "malformed request head")
                _check_head(buffered[: end.end()])
                break
            if closed:
                if buffered.strip():
                    raise _Refused(400, "incomplete request head")
                return None
            if len(buffered) > HEAD_LIMIT:
                raise _Refused(431, "request head too large")
            try:
                client.receive_data(await self._client_bytes(reader))
            except TimeoutError:
                if buffered:  # a head begun and left unfinished (a slow-loris caller): told so, then closed
                    raise _Refused(408, f"request head not complete within {self._idle_timeout:g} s") from None
                return None  # a kept-alive connection idle that long: closed quietly, as servers do
        try:
            event = client.next_event()
        except h11.RemoteProtocolError as exc:
            raise _Refused(_refusal(exc), str(exc)) from None
        if not isinstance(event, h11.Request):  # a whole head was buffered: h11 finds it where we did
            raise _Refused(400, "malformed request head")
        return self._checked(event)

    def _checked(self, request: h11.Request) -> _Call:
        headers = request.headers
        names = {name for name, _ in headers}
        if names >= _FRAMING:
            raise _Refused(400, "both Content-Length and Transfer-Encoding")
        if request.http_version != b"1.1" and b"transfer-encoding" in names:
            raise _Refused(400, "Transfer-Encoding in an HTTP/1.0 request")
        host = next((value for name, value in headers if name == b"host"), b"")
        if host.lower() not in self._hosts:
            raise _Refused(421, "the Host is neither this proxy nor its dependency")
        connection_named = {b"close", b"keep-alive"}
        expect = False
        kept: list[tuple[bytes, bytes]] = [(b"host", self._host)]
        has_auth = False
        for raw_name, value in headers.raw_items():
            name = raw_name.lower()
            if name == b"origin" and value.lower() not in self._origins:
                raise _Refused(403, "the Origin is neither this proxy nor its dependency")
            if name in (b"connection", b"proxy-connection"):
                connection_named.update(t.strip().lower() for t in value.split(b","))
            elif name == b"expect":
                expect = value.lower() == b"100-continue"
            elif name not in _HOP_BY_HOP and name != b"host":
                has_auth = has_auth or name == b"authorization"
                kept.append((raw_name, value))
        kept = [(n, v) for n, v in kept if n.lower() not in connection_named]
        if self._auth is not None and not has_auth:
            kept.append((b"authorization", self._auth))
        head = h11.Request(method=request.method, target=request.target, headers=kept)
        return _Call(request.method, head, expect)

    async def _client_bytes(self, reader: asyncio.StreamReader) -> bytes:
        """The client's next bytes; a client silent for ``idle_timeout`` holds no connection (nor file) longer."""
        async with asyncio.timeout(self._idle_timeout):
            return await reader.read(PIECE)

    def _refuse(self, client: h11.Connection, writer: asyncio.StreamWriter, refused: _Refused) -> None:
        """Answer what the client sent wrong, then close: nothing of the request went upstream."""
        body = {"error": str(refused), "dependency": self._pool.name}
        response = _answer(refused.status, body, [(b"connection", b"close")])
        try:
            out = client.send(response)
        except h11.LocalProtocolError:  # h11 gave up on the connection before a request line: answer it by hand
            lines = [b"HTTP/1.1 %d %s" % (refused.status, _reason(refused.status).encode())]
            lines += [n + b": " + v for n, v in response.headers]
            out = b"\r\n".join(lines) + b"\r\n\r\n"
        writer.write((out or b"") + _json(body))

    async def _body_piece(self, client: h11.Connection, reader: asyncio.StreamReader) -> bytes | None:
        """The next piece of the request body, None at its end."""
        while True:
            try:
                event = client.next_event()
            except h11.RemoteProtocolError as exc:
                raise _Refused(_refusal(exc), str(exc)) from None
            if event is h11.NEED_DATA:
                try:
                    data = await self._client_bytes(reader)
                except TimeoutError:
                    raise _Refused(408, f"request body stalled for {self._idle_timeout:g} s") from None
                if not data:
                    raise BadMessage("the client left mid-body")
                client.receive_data(data)
            elif isinstance(event, h11.Data):
                return bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                return None
            else:
                raise BadMessage(f"unexpected {type(event).__name__}")

    async def _answer_error(
        self,
        client: h11.Connection,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        call: _Call,
        status: int,
    ) -> bool:
        """The injected error, without calling upstream; whether the connection goes on."""
        if not call.expect_continue:  # a client waiting for 100-continue may or may not send: it is closed after
            while await self._body_piece(client, reader) is not None:
                pass
        extra = [(b"x-chaosd-fault", b"dependency_error")]
        if status in (429, 503):
            extra.append((b"retry-after", b"1"))
        if call.expect_continue:
            extra.append((b"connection", b"close"))
        body = {"error": "injected by chaosd", "dependency": self._pool.name}
        call.status = status
        writer.write((client.send(_answer(status, body, extra)) or b"") + (client.send(h11.Data(_json(body))) or b""))
        writer.write(client.send(h11.EndOfMessage()) or b"")
        await writer.drain()
        return not call.expect_continue

    # --- the upstream side --------------------------------------------------------------------------------------

    async def _forward(
        self,
        client: h11.Connection,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        call: _Call,
        faults: DependencyFaults,
    ) -> bool:
        """Relay one request and its response; whether the client connection goes on."""
        if call.expect_continue and client.they_are_waiting_for_100_continue:
            writer.write(client.send(h11.InformationalResponse(status_code=100, headers=[])) or b"")
        body: list[bytes] = []
        size = 0
        streamed = True
        while size <= _BUFFERED_REQUEST:
            piece = await self._body_piece(client, reader)
            if piece is None:
                streamed = False
                break
            body.append(piece)
            size += len(piece)
        watch = _ClientWatch(reader, client)
        try:
            return await self._exchange(client, writer, call, faults, watch, body, streamed)
        finally:
            await watch.stop()

    async def _exchange(
        self,
        client: h11.Connection,
        writer: asyncio.StreamWriter,
        call: _Call,
        faults: DependencyFaults,
        watch: _ClientWatch,
        body: list[bytes],
        streamed: bool,
    ) -> bool:
        for attempt in range(2):  # a pooled connection the upstream has closed meanwhile: one retry on a new one
            conn = self._pool.take(reuse=attempt == 0 and not streamed)
            reused = conn is not None
            try:
                if conn is None:
                    conn = await self._pool.connect()
            except (OSError, TimeoutError) as exc:  # ssl.SSLError is an OSError
                return await self._gateway_error(client, writer, call, exc)
            upstream = conn.http
            try:
                conn.writer.write(self._request_out(upstream, call, body, streamed))
                if streamed:
                    await self._stream_request(client, watch.reader, conn)
                first = await self._upstream_event(conn, watch)
            except (OSError, asyncio.IncompleteReadError, h11.RemoteProtocolError) as exc:
                conn.close()
                if watch.left:  # the answer is for no one now: its request ended with its connection
                    return False
                if reused and not isinstance(exc, TimeoutError):
                    continue
                return await self._gateway_error(client, writer, call, exc)
            except BaseException:
                conn.close()
                raise
            self._pool.reached()
            try:
                return await self._relay_response(client, writer, call, conn, first, faults, watch)
            except BaseException:
                conn.close()
                raise
        raise AssertionError("unreachable: the second attempt returns")  # pragma: no cover

    def _request_out(self, upstream: h11.Connection, call: _Call, body: list[bytes], streamed: bool) -> bytes:
        out = [upstream.send(call.head) or b""]
        out += [upstream.send(h11.Data(piece)) or b"" for piece in body]
        if not streamed:
            out.append(upstream.send(h11.EndOfMessage()) or b"")
        return b"".join(out)

    async def _stream_request(self, client: h11.Connection, reader: asyncio.StreamReader, conn: Conn) -> None:
        upstream = conn.http
        while (piece := await self._body_piece(client, reader)) is not None:
            conn.writer.write(upstream.send(h11.Data(piece)) or b"")
            await conn.writer.drain()
        conn.writer.write(upstream.send(h11.EndOfMessage()) or b"")

    async def _upstream_event(self, conn: Conn, watch: _ClientWatch) -> h11.Event:
        """The upstream's next event, within the read timeout; the client leaving meanwhile ends the wait."""
        upstream = conn.http
        while True:
            event = upstream.next_event()
            if isinstance(event, h11.Event):
                return event
            if event is h11.PAUSED:  # pragma: no cover - only after a message's end, where no event is asked for
                raise BadMessage("the upstream connection is paused")
            watch.start(conn)
            async with asyncio.timeout(self._read_timeout):
                upstream.receive_data(await conn.reader.read(PIECE))

    async def _relay_response(
        self,
        client: h11.Connection,
        writer: asyncio.StreamWriter,
        call: _Call,
        conn: Conn,
        event: h11.Event,
        faults: DependencyFaults,
        watch: _ClientWatch,
    ) -> bool:
        while isinstance(event, h11.InformationalResponse):  # 103 Early Hints go on; a 100 was answered already
            if event.status_code != 100:
                writer.write(client.send(h11.InformationalResponse(status_code=event.status_code, headers=[])) or b"")
            event = await self._upstream_event(conn, watch)
        if not isinstance(event, h11.Response):
            raise BadMessage(f"unexpected {type(event).__name__}")
        writer.write(client.send(self._response_head(event)) or b"")
        call.status = event.status_code
        send: Callable[[bytes], Awaitable[None]] | None = None
        if faults.slice_bytes > 0:
            send = self._acts.sender(writer, faults)
        while True:
            event = await self._upstream_event(conn, watch)
            if isinstance(event, h11.Data):
                out = client.send(h11.Data(event.data)) or b""
                if send is not None:
                    await send(out)
                else:
                    writer.write(out)
                    if writer.transport.get_write_buffer_size() > PIECE:
                        await writer.drain()
            elif isinstance(event, h11.EndOfMessage):
                writer.write(client.send(h11.EndOfMessage()) or b"")
                break
            else:
                raise BadMessage(f"unexpected {type(event).__name__}")
        await writer.drain()
        self._pool.give_back(conn)
        return client.our_state is h11.DONE and client.their_state is h11.DONE

    def _response_head(self, response: h11.Response) -> h11.Response:
        named = {b"close", b"keep-alive"}
        for name, value in response.headers:
            if name in (b"connection", b"proxy-connection"):
                named.update(t.strip().lower() for t in value.split(b","))
        headers = [
            (n, v) for n, v in response.headers.raw_items() if n.lower() not in _HOP_BY_HOP and n.lower() not in named
        ]
        if not any(
            n.lower() in _FRAMING for n, _ in headers
        ):  # a body that ends with the upstream's connection: ours too
            headers.append((b"connection", b"close"))
        return h11.Response(status_code=response.status_code, headers=headers, reason=response.reason)

    async def _gateway_error(
        self, client: h11.Connection, writer: asyncio.StreamWriter, call: _Call, exc: BaseException
    ) -> bool:
        """502 for an upstream that could not be reached or answered nonsense, 504 for one that did not answer in
        time; the connection closed if the request's body was not all read."""
        timed_out = isinstance(exc, TimeoutError)
        reason = type(exc).__name__ if timed_out else (str(exc) or type(exc).__name__)
        self._pool.unreachable(reason)
        status = call.status = 504 if timed_out else 502
        error = "upstream timed out" if timed_out else "upstream unreachable"
        close = client.their_state is not h11.DONE
        body: dict[str, object] = {"error": error, "dependency": self._pool.name, "reason": reason}
        extra = [(b"connection", b"close")] if close else []
        writer.write((client.send(_answer(status, body, extra)) or b"") + (client.send(h11.Data(_json(body))) or b""))
        writer.write(client.send(h11.EndOfMessage()) or b"")
        await writer.drain()
        return not close


class _ClientWatch:
    """While a request is with the upstream: reads what the client sends (kept for h11: a pipelined request), and
    the moment the client leaves, aborts the upstream connection, which ends the wait on it at once."""

    def __init__(self, reader: asyncio.StreamReader, client: h11.Connection) -> None:
        self.left = False
        self.reader = reader
        self._client = client
        self._task: asyncio.Task[None] | None = None

    def start(self, conn: Conn) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._watch(conn))

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _watch(self, conn: Conn) -> None:
        while len(self._client.trailing_data[0]) <= HEAD_LIMIT:  # past a head's worth: noticed at the next write
            try:
                data = await self.reader.read(PIECE)
            except OSError:
                data = b""
            if not data:
                self.left = True
                conn.close()
                return
            self._client.receive_data(data)
