"""The fault proxy in front of a python stage's dependency: relays its real calls, and breaks them on demand.

HTTP/1.1 is framed by h11 on both sides over asyncio streams (bodies copied as they arrive, upstream connections
pooled), so a fault acts on one request of a kept-alive connection and no framing is guessed at. h11 is pure Python:
a small local GET through the proxy takes about three times as long as the direct call (about 0.3 ms added, some
four times what the hand-written parser it replaced added; ``bench/dependency_proxy.py``): the price of refusing
what that parser forwarded. Raw TCP is a byte relay. Faults are a :class:`DependencyFaults` value read at each
request (HTTP) or connection and chunk (TCP).
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Awaitable, Callable

import h11

from chaosd.core.clock import LoopClock
from chaosd.core.urls import Upstream, parse_upstream
from chaosd.faults.call_tracing import CallTracer
from chaosd.faults.dependency import NO_FAULTS, CallFaults, DependencyFaults
from chaosd.faults.http_relay import BadMessage, HttpRelay
from chaosd.faults.tcp_relay import TcpRelay
from chaosd.faults.upstream_pool import HEAD_LIMIT, UpstreamPool

# DependencyFaults and NO_FAULTS live in chaosd.faults.dependency, Upstream and parse_upstream in chaosd.core.urls;
# imported from here too.
__all__ = [
    "IDLE_TIMEOUT",
    "MAX_CONNECTIONS",
    "NO_FAULTS",
    "DependencyFaults",
    "FaultProxy",
    "Upstream",
    "parse_upstream",
]

MAX_CONNECTIONS = 1024  # client connections open at once, per proxy
IDLE_TIMEOUT = 60.0  # the longest an HTTP client may keep a connection silent, between requests or within one


class FaultProxy:
    """One proxy on ``host`` (loopback) in front of one upstream, for one stage's calls to one dependency.

    It listens, and owns each client connection as a task ``stop()`` ends; a relay (:class:`HttpRelay`, or
    :class:`TcpRelay` for a ``tcp://`` upstream) serves the connection, the faults acting through
    :class:`CallFaults`, the upstream reached through an :class:`UpstreamPool`.

    ``faults`` is read at each request (HTTP) or at each connection and chunk (TCP), so assigning a new value
    acts on the next. ``calls`` counts requests (HTTP) or connections (TCP); ``faulted`` the calls each fault
    action acted on; ``upstream_errors`` the calls the upstream could not be reached for (answered 502) or did not
    answer within ``read_timeout`` (504). An HTTP client silent for ``idle_timeout`` is let go: closed between
    requests, answered 408 within one. At most ``max_connections`` client connections are open at once: one
    more is answered 503 (HTTP) or reset (TCP) and closed, so the proxy's open files stay bounded.
    """

    def __init__(
        self,
        name: str,
        upstream: Upstream,
        *,
        rng: random.Random,
        host: str = "127.0.0.1",
        connect_timeout: float = 5.0,
        read_timeout: float = 30.0,
        idle_timeout: float = IDLE_TIMEOUT,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self.name = name
        self.upstream = upstream
        self.max_connections = max_connections
        self.refused = 0  # client connections refused for being one too many
        self._acts = CallFaults(rng)
        self._pool = UpstreamPool(name, upstream, connect_timeout=connect_timeout)
        self._http: HttpRelay | None = None
        self._relay: HttpRelay | TcpRelay
        if upstream.scheme == "tcp":
            self._relay = TcpRelay(self._acts, self._pool)
        else:
            self._relay = self._http = HttpRelay(
                self._acts, self._pool, read_timeout=read_timeout, idle_timeout=idle_timeout
            )
        self._host = host
        self._server: asyncio.Server | None = None
        self._closing = False
        self._port = 0
        self._tasks: set[asyncio.Task[object]] = set()  # one per client connection: what stop() ends

    def __repr__(self) -> str:
        return f"<FaultProxy {self.name} {self.url} -> {self.upstream.display()}>"

    @property
    def faults(self) -> DependencyFaults:
        return self._acts.faults

    @faults.setter
    def faults(self, faults: DependencyFaults) -> None:
        self._acts.faults = faults

    def trace_with(self, tracer: CallTracer | None) -> None:
        """HTTP calls that carry a sampled ``traceparent`` get a span of their own in the caller's trace."""
        if self._http is not None:
            self._http.tracer = tracer

    @property
    def calls(self) -> int:
        return self._acts.calls

    @property
    def faulted(self) -> dict[str, int]:
        return self._acts.faulted

    @property
    def upstream_errors(self) -> int:
        return self._pool.errors

    async def start(self) -> None:
        """Listen on a free port of ``host``."""
        if self._server is not None:
            return
        self._acts.serve_on(LoopClock(asyncio.get_running_loop()))
        self._closing = False
        self._server = await asyncio.start_server(self._serve, self._host, 0, limit=HEAD_LIMIT)
        self._port = self._server.sockets[0].getsockname()[1]
        if self._http is not None:
            self._http.listening_on(self._host, self._port)
            if self._host in ("127.0.0.1", "::1"):
                self._http.listening_on("localhost", self._port)

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
        self._closing = True
        if server is not None:
            server.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._pool.close_idle()
        if server is not None:
            await server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self._owned(self._relay.connection, reader, writer)

    async def _owned(
        self,
        serve: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        """Runs one client connection as a task ``stop()`` can end; a broken connection ends quietly."""
        task = asyncio.current_task()
        if self._closing or task is None:
            writer.transport.abort()
            return
        if len(self._tasks) >= self.max_connections:
            self._refuse(writer)
            return
        self._tasks.add(task)
        try:
            await serve(reader, writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, BadMessage, h11.ProtocolError):
            writer.transport.abort()
        except asyncio.CancelledError:
            writer.transport.abort()
            if not self._closing:
                raise
            # stop() cancelled it: end normally, as Python 3.11's stream callback reads a cancelled task's exception()
        finally:
            self._tasks.discard(task)
            if not writer.is_closing():
                writer.close()

    def _refuse(self, writer: asyncio.StreamWriter) -> None:
        """One connection too many: a 503 (HTTP) or a reset (TCP), and closed at once, unread."""
        self.refused += 1
        if self._http is None:
            writer.transport.abort()
            return
        body = json.dumps({"error": "too many connections", "dependency": self.name}).encode()
        writer.write(
            b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
            b"Retry-After: 1\r\nConnection: close\r\n\r\n%s" % (len(body), body)
        )
        writer.close()
