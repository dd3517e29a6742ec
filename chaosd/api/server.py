"""The HTTP front door: connection limits, request deadlines, and JSON answers to malformed HTTP.

aiohttp parses and routes. Before that, this module decides who gets a connection (beyond
``max_connections`` a client gets 503), how long a request may take to arrive (``request_timeout``,
then 408: a slow-loris client holds nothing for long), and answers what aiohttp refuses before
routing (a head line or header over ``max_header_bytes``: 431; any other malformed request: 400)
with the API's JSON error body instead of aiohttp's plain text.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping
from http import HTTPStatus
from typing import Literal, TypedDict, get_args

from aiohttp import web
from aiohttp.http_exceptions import LineTooLong

from chaosd.config.settings import ApiConfig
from chaosd.core.humanize import shown
from chaosd.exporters.metrics import REFUSAL_REASONS, ServerRefusal

__all__ = [
    "BROWSER_REFUSALS",
    "ErrorBody",
    "FrontDoor",
    "HostPolicy",
    "HttpStats",
    "Refusal",
    "error_body",
    "own_origin",
    "request_ended",
    "request_started",
]

log = logging.getLogger("chaosd.api")
_LINGER = 1.0  # seconds a refused client gets to read its answer after we stop writing


class HttpStats:
    """What the server refused, by reason, and what it holds now (read by ``/metrics`` at scrape time)."""

    def __init__(self, subscribers: Callable[[], int] = lambda: 0, sse_refused: Callable[[], int] = lambda: 0) -> None:
        self.connections = 0
        self._refused: dict[str, int] = dict.fromkeys((*REFUSAL_REASONS, *BROWSER_REFUSALS), 0)
        self._subscribers = subscribers
        self._sse_refused = sse_refused

    def refuse(self, reason: Refusal) -> None:
        self._refused[reason] += 1

    @property
    def refused(self) -> Mapping[str, int]:
        return {**self._refused, "subscriber_limit": self._refused["subscriber_limit"] + self._sse_refused()}

    @property
    def subscribers(self) -> int:
        return self._subscribers()


# What a browser-borne request is refused for (docs/security.md), counted in chaosd_api_refused_total{reason}:
# a Host this daemon does not answer to (421, DNS rebinding), a mutation from another origin (403), and a
# mutation without a JSON content type (415, the "simple request" a page may send without a preflight).
BrowserRefusal = Literal["wrong_host", "cross_origin", "unsupported_media_type"]
BROWSER_REFUSALS: tuple[BrowserRefusal, ...] = get_args(BrowserRefusal)
Refusal = Literal[ServerRefusal, BrowserRefusal]  # what FrontDoor counts, by reason
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARDS = frozenset({"", "0.0.0.0", "::", "*"})


def _host_name(authority: str) -> str:
    """The name in a Host header (or an allow-list entry): lower case, no port, no brackets, no final dot."""
    name = authority.strip().lower()
    if name.startswith("["):
        name = name[1:].partition("]")[0]
    elif name.count(":") == 1:
        name = name.partition(":")[0]
    return name.rstrip(".")


class HostPolicy:
    """The Host names the daemon answers to: a browser's request names the site it came from, so a page on
    evil.example whose name resolves to 127.0.0.1 (DNS rebinding) says ``Host: evil.example`` and is refused.

    Always loopback (``localhost``, ``127.0.0.1``, ``[::1]``), ``api.host`` unless it is a wildcard, and
    ``api.allowed_hosts``; any port. A daemon bound to a wildcard with no ``allowed_hosts`` answers any Host:
    it is reached by names it cannot know (a container's service name, a DNS name, the address a Prometheus
    target gives), and off loopback a token is required, so a page without it changes nothing.
    """

    def __init__(self, api: ApiConfig) -> None:
        listed = {_host_name(h) for h in api.allowed_hosts}
        bound = _host_name(api.host) if api.host.strip() not in WILDCARDS else None
        self.any = "*" in listed or (bound is None and not api.allowed_hosts)
        self.names = frozenset(LOOPBACK_NAMES | listed | ({bound} if bound else set()))

    def allows(self, host_header: str | None) -> bool:
        """Whether a request with this Host header is answered (none at all: a non-browser HTTP/1.0 client)."""
        if self.any or host_header is None:
            return True
        return _host_name(host_header) in self.names


def own_origin(origin: str, host_header: str | None) -> bool:
    """Whether ``Origin`` is the daemon's own: http or https (a TLS proxy in front) and the request's Host."""
    scheme, sep, authority = origin.strip().lower().partition("://")
    if not sep or scheme not in ("http", "https") or host_header is None:
        return False  # "null" (a sandboxed frame, a file: page) and anything else is another origin
    return authority == host_header.strip().lower()


class ErrorDetail(TypedDict):
    status: int
    field: str | None  # the request's part at fault (a body field, a parameter), if one is
    message: str


class ErrorBody(TypedDict):
    """Every error answer's body (the OpenAPI document's ``Error``)."""

    error: ErrorDetail


def error_body(status: int, message: str, field: str | None = None) -> ErrorBody:
    """An error's JSON body; its message escaped as every line chaosd prints is (a client may print it as is)."""
    return {"error": {"status": status, "field": field, "message": shown(message)}}


def _raw_response(status: int, message: str, extra: Mapping[str, str] | None = None) -> bytes:
    """A whole HTTP/1.1 answer, for refusals made before aiohttp has a request to answer."""
    body = json.dumps(error_body(status, message)).encode()
    head = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}", "Content-Type: application/json; charset=utf-8"]
    head += [f"Content-Length: {len(body)}", "Connection: close", *(f"{k}: {v}" for k, v in (extra or {}).items())]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


class _Connection(web.RequestHandler):
    """One client connection: counted; refused beyond the limit; cut when a request is slow to arrive.

    States: ``idle`` (no request in flight) → ``arriving`` (its first byte came; the deadline runs) →
    ``handling`` (a handler has it) → ``idle``. A connection over the limit never reaches aiohttp.
    """

    def __init__(self, manager: web.Server, door: FrontDoor) -> None:
        limits = door.limits
        super().__init__(
            manager,
            loop=door.loop,
            keepalive_timeout=limits.idle_timeout,  # aiohttp arms it at accept too: a silent client is closed
            max_line_size=limits.max_header_bytes,
            max_field_size=limits.max_header_bytes,
            access_log=None,  # type: ignore[arg-type]  # None turns access logging off, as in AppRunner
        )
        self._door = door
        self._state = "idle"
        self._deadline: asyncio.TimerHandle | None = None
        self._raw: asyncio.Transport | None = None  # a refused connection's transport (aiohttp has none)
        self._answered = False  # answered here, outside aiohttp: what the client still sends is discarded
        self._counted = False

    # --- the protocol's events ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        door = self._door
        if door.stats.connections >= door.limits.max_connections:
            door.stats.refuse("connection_limit")
            self._raw = transport  # type: ignore[assignment]
            self._state = "refused"  # aiohttp never sees this connection
            self._arm(door.limits.request_timeout, transport.close)  # a silent client gets no answer
            return
        door.stats.connections += 1
        self._counted = True
        super().connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self._answered:
            return  # the rest of a request already refused
        if self._state == "refused":
            self._answer(503, f"the server holds {self._door.limits.max_connections} connections, its limit", "1")
            return
        if self._state == "idle":
            self._state = "arriving"
            self._arm(self._door.limits.request_timeout, self._too_slow)
        super().data_received(data)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._disarm()
        if not self._counted:
            return
        self._counted = False
        self._door.stats.connections -= 1
        super().connection_lost(exc)

    # --- what the middleware tells us -----------------------------------------------------------------

    def started(self) -> None:
        self._disarm()
        self._state = "handling"

    def ended(self) -> None:
        if self._state == "handling":
            self._state = "idle"

    # --- refusing -------------------------------------------------------------------------------------

    def _too_slow(self) -> None:
        self._deadline = None
        if self._state != "arriving":
            return
        self._door.stats.refuse("request_timeout")
        limit = self._door.limits.request_timeout
        self._answer(408, f"the request did not arrive within {limit:g} s (request_timeout)")

    def _answer(self, status: int, message: str, retry_after: str | None = None) -> None:
        """Write a JSON answer, stop writing, and close once the client is done (or after a short linger).

        Closing with unread input would reset the connection and could discard the answer in flight.
        """
        transport = self._raw if self._raw is not None else self.transport
        if transport is None or transport.is_closing():
            return
        self._answered = True
        transport.write(_raw_response(status, message, {"Retry-After": retry_after} if retry_after else None))
        if transport.can_write_eof():
            transport.write_eof()
        self._arm(_LINGER, transport.close)

    def _arm(self, delay: float, callback: Callable[[], None]) -> None:
        self._disarm()
        self._deadline = self._door.loop.call_later(delay, callback)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    # --- aiohttp's answer to a request it could not parse ----------------------------------------------

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        reason: Refusal | Literal[""]
        if isinstance(exc, LineTooLong):
            status, reason = 431, "header_too_large"
            text = f"a request line or header is longer than {self._door.limits.max_header_bytes} bytes"
        elif status == 400:
            reason, text = "bad_request", "malformed HTTP request"
        else:
            reason, text = "", "internal error (logged)"
        if reason:
            self._door.stats.refuse(reason)
            log.info("refused a request from %s: %s", request.remote, text)
        else:
            log.error("error handling a request from %s", request.remote, exc_info=exc)
        response = web.json_response(error_body(status, text), status=status)
        response.force_close()
        return response


class FrontDoor:
    """Listens for the app's runner with the limits above; ``close()`` stops listening."""

    def __init__(self, runner: web.AppRunner, limits: ApiConfig, stats: HttpStats) -> None:
        self.limits = limits
        self.stats = stats
        self.loop = asyncio.get_running_loop()
        self._runner = runner
        self._server: asyncio.Server | None = None

    async def bind(self, host: str, port: int, backlog: int = 1024) -> list[tuple[str, int]]:
        """Bind the listening sockets, accepting nothing yet; returns the (host, port) pairs (port 0: a free one).

        The daemon binds before it starts anything, so a busy port or a bad host fails with nothing
        started and nothing written.
        """
        self._server = await self.loop.create_server(
            lambda: _Connection(self._manager(), self),
            host,
            port,
            backlog=backlog,
            reuse_address=True,
            start_serving=False,
        )
        return [sock.getsockname()[:2] for sock in self._server.sockets]

    async def serve(self) -> None:
        """Accept connections on the bound sockets (the runner must be set up by now)."""
        self._manager()
        if self._server is None:
            raise RuntimeError("bind first")
        await self._server.start_serving()

    async def listen(self, host: str, port: int, backlog: int = 1024) -> list[tuple[str, int]]:
        """Bind and start accepting at once (the runner must be set up)."""
        addresses = await self.bind(host, port, backlog)
        await self.serve()
        return addresses

    def _manager(self) -> web.Server:
        manager = self._runner.server
        if manager is None:
            raise RuntimeError("the runner is not set up")
        return manager

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None


def _connection(request: web.BaseRequest) -> _Connection | None:
    protocol = request.protocol
    return protocol if isinstance(protocol, _Connection) else None


def request_started(request: web.BaseRequest) -> None:
    """A handler has the request: its arrival deadline no longer runs."""
    if (conn := _connection(request)) is not None:
        conn.started()


def request_ended(request: web.BaseRequest) -> None:
    if (conn := _connection(request)) is not None:
        conn.ended()
