"""The Redis backend's health: whether Redis answers, since when it does not, and which server process answers."""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable

from redis.asyncio import Redis

from chaosd.core.clock import Clock
from chaosd.events.log import EventLog

__all__ = ["Health", "server_id"]


def _where(url: str) -> str:
    """The server an URL names, without its credentials (a status line and readiness name it)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "unix":
        return parts.path
    return f"{parts.hostname or 'localhost'}:{parts.port or 6379}"


async def server_id(client: Redis) -> str:
    """Which Redis process answers: INFO server's run_id, new at every start of the server."""
    info = await client.info("server")
    return str(info.get("run_id", ""))


class Health:
    """Since when (clock time) and why Redis is unreachable; ``server`` is the process that answered last."""

    def __init__(self, url: str, clock: Clock, events: EventLog, elapsed: Callable[[], float]) -> None:
        self._url = url
        self._clock = clock
        self._events = events
        self._elapsed = elapsed
        self._down_since: float | None = None
        self._down_reason = ""
        self.server: str | None = None  # INFO server's run_id: which Redis process answered last
        self.ask_server = True  # after an outage: ask again which Redis process answers

    def describe(self) -> str | None:
        """Why the backend cannot serve now (Redis unreachable since the first poll that failed), or None."""
        since = self._down_since
        if since is None:
            return None
        down = self._clock.now() - since
        return f"backend: Redis at {_where(self._url)} unreachable for {down:.1f} s ({self._down_reason})"

    def unreachable(self, exc: BaseException) -> None:
        reason = f"{type(exc).__name__}: {exc}"[:200]
        self._down_reason = reason
        self.ask_server = True  # once it answers: the same Redis process, or another one?
        if self._down_since is None:
            self._down_since = self._clock.now()
            self._events.record(self._elapsed(), "backend", state="unreachable", reason=reason)

    def reachable(self) -> None:
        since = self._down_since
        if since is not None:
            self._down_since = None
            down = round(self._clock.now() - since, 3)
            self._events.record(self._elapsed(), "backend", state="reachable", down_s=down)
