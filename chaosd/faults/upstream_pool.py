"""A fault proxy's connections to its upstream: opened (over TLS for https), kept idle for reuse, and a warning when
the upstream cannot be reached."""

from __future__ import annotations

import asyncio
import logging
import ssl
from dataclasses import dataclass, field

import h11

from chaosd.core.urls import Upstream

__all__ = ["HEAD_LIMIT", "Conn", "UpstreamPool"]

_log = logging.getLogger(__name__)

HEAD_LIMIT = 256 * 1024  # the longest message head read (and the streams' buffer limit)
_POOL = 32  # idle upstream connections kept


@dataclass(slots=True)
class Conn:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    http: h11.Connection = field(  # its HTTP/1.1 framing (unused for TCP)
        default_factory=lambda: h11.Connection(h11.CLIENT, max_incomplete_event_size=HEAD_LIMIT)
    )

    def usable(self) -> bool:
        return not self.writer.is_closing() and not self.reader.at_eof()

    def close(self) -> None:
        self.writer.transport.abort()


class UpstreamPool:
    """Connections to one upstream for one proxy; ``errors`` counts the calls it could not be reached for."""

    def __init__(self, name: str, upstream: Upstream, *, connect_timeout: float) -> None:
        self.name = name
        self.connect_timeout = connect_timeout
        self.upstream = upstream
        self.errors = 0
        self._idle: list[Conn] = []
        self._failing = False  # the last call found the upstream unreachable
        self._ssl: ssl.SSLContext | None = ssl.create_default_context() if upstream.scheme == "https" else None

    async def connect(self) -> Conn:
        up = self.upstream
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(
                up.host, up.port, ssl=self._ssl, server_hostname=up.host if self._ssl else None, limit=HEAD_LIMIT
            ),
            self.connect_timeout,
        )
        return Conn(reader, writer)

    def take(self, reuse: bool) -> Conn | None:
        """An idle connection still usable, if ``reuse`` and one is left (those the upstream closed are let go)."""
        while self._idle and not self._idle[-1].usable():
            self._idle.pop().close()
        return self._idle.pop() if reuse and self._idle else None

    def give_back(self, conn: Conn) -> None:
        """Keep the connection for the next call, if its last exchange ended cleanly, it can serve another and the
        pool has room; else close it."""
        http = conn.http
        if http.our_state is h11.DONE and http.their_state is h11.DONE and len(self._idle) < _POOL and conn.usable():
            http.start_next_cycle()
            self._idle.append(conn)
        else:
            conn.close()

    def close_idle(self) -> None:
        for conn in self._idle:
            conn.close()
        self._idle.clear()

    def reached(self) -> None:
        self._failing = False

    def unreachable(self, reason: str) -> None:
        """A call found the upstream unreachable. A warning when calls start failing, not one per call: a handler
        may call a dead upstream 1,000 times/s."""
        self.errors += 1
        level = logging.DEBUG if self._failing else logging.WARNING
        self._failing = True
        _log.log(level, "dependency %s: upstream %s unreachable: %s", self.name, self.upstream.display(), reason)
