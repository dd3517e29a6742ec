"""Server-sent events: the flight recorder as a live stream, with ids, resume, type filters, heartbeats and limits."""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import re
from dataclasses import dataclass

from aiohttp import web

from chaosd.api.errors import HttpError
from chaosd.api.server import error_body
from chaosd.events.log import Event, EventLog

__all__ = ["Broker"]

_MAX_REPLAY = 1000
_ID = re.compile(r"[0-9]{1,20}")
_TYPE = re.compile(r"[a-z_]{1,32}")
_REPLAY = re.compile(r"[0-9]{1,4}")
_MAX_TYPES_CHARS = 500
_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def _frame(event: Event) -> bytes:
    data = json.dumps({"t": round(event.t, 6), **event.data}, sort_keys=True, default=str)
    return f"id: {event.id}\nevent: {event.kind}\ndata: {data}\n\n".encode()


def _last_event_id(request: web.Request) -> int | None:
    field = "Last-Event-ID"
    raw = request.headers.get(field)
    if not raw:  # an empty header means "no id" (what EventSource sends before it has seen one)
        field, raw = "last_event_id", request.query.get("last_event_id")
    if not raw:
        return None
    if not _ID.fullmatch(raw):
        raise HttpError(400, field, "must be a non-negative integer of at most 20 digits")
    return int(raw)


def _kinds(raw: str | None) -> frozenset[str]:
    if not raw:
        return frozenset()
    if len(raw) > _MAX_TYPES_CHARS:
        raise HttpError(400, "types", f"must be at most {_MAX_TYPES_CHARS} characters")
    kinds = raw.split(",")
    for n, kind in enumerate(kinds, 1):
        if not _TYPE.fullmatch(kind):
            message = f"item {n} is not an event type: each comma-separated type is 1 to 32 of a-z and _"
            raise HttpError(400, "types", message)
    return frozenset(kinds)


def _replay(raw: str | None) -> int:
    if raw is None:
        return 0
    if not _REPLAY.fullmatch(raw) or int(raw) > _MAX_REPLAY:
        raise HttpError(400, "replay", f"must be an integer from 0 to {_MAX_REPLAY}")
    return int(raw)


@dataclass(frozen=True, slots=True)
class _Backlog:
    """What a new stream sends before the live events: an optional gap notice, then buffered events."""

    gap: tuple[int, int] | None
    events: list[Event]


class _Stream:
    """One subscriber: its filter, its bounded queue, and whether it fell behind."""

    __slots__ = ("floor", "kinds", "limit", "overflow", "queue", "transport")

    def __init__(
        self, kinds: frozenset[str], limit: int, floor: int | None, transport: asyncio.Transport | None
    ) -> None:
        self.kinds = kinds
        self.limit = limit
        # The client has every (matching) event up to ``floor``: its Last-Event-ID, or else the live edge,
        # learnt from the first event recorded after it subscribed.
        self.floor = floor
        self.overflow = False
        self.queue: asyncio.Queue[Event | None] = asyncio.Queue(limit + 1)  # a spare slot for the close signal
        self.transport = transport

    def deliver(self, event: Event) -> None:
        if self.floor is None:
            self.floor = event.id - 1
        if self.overflow or (self.kinds and event.kind not in self.kinds):
            return
        if self.queue.qsize() >= self.limit:
            self.overflow = True
            return
        self.queue.put_nowait(event)

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()  # not close(): that would wait to flush to a client that does not read


class Broker:
    """Serves ``GET /api/v1/events``; ``close()`` ends every open stream (on shutdown).

    A new stream starts at the live edge unless it resumes (``Last-Event-ID``) or asks ``?replay=N``.
    At most ``max_subscribers`` streams are open at once; every write is bounded by ``write_timeout``,
    so a client that stops reading loses its stream instead of holding a slot.
    """

    def __init__(
        self,
        events: EventLog,
        heartbeat: float,
        queue_size: int = 2000,
        *,
        max_subscribers: int = 64,
        write_timeout: float = 5.0,
    ) -> None:
        self._events = events
        self._heartbeat = heartbeat
        self._queue_size = queue_size
        self._max_subscribers = max_subscribers
        self._write_timeout = write_timeout
        self._streams: set[_Stream] = set()
        self._idle = asyncio.Event()
        self._idle.set()
        self.closed = False
        self.refused = 0  # subscribers turned away because ``max_subscribers`` streams were open

    @property
    def subscribers(self) -> int:
        """Streams open now."""
        return len(self._streams)

    async def close(self) -> None:
        """Send every stream its ``close`` event and wait (bounded) until they have all ended."""
        if not self.closed:
            self.closed = True
            for stream in self._streams:
                stream.queue.put_nowait(None)
        try:
            # A stream is at most in one write when told to close, then writes its close event: two writes.
            async with asyncio.timeout(2 * self._write_timeout):
                await self._idle.wait()
        except TimeoutError:
            for stream in self._streams:
                stream.abort()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        last_id = _last_event_id(request)
        kinds = _kinds(request.query.get("types"))
        replay = _replay(request.query.get("replay"))
        if self.closed:
            raise web.HTTPServiceUnavailable(reason="shutting down")
        if len(self._streams) >= self._max_subscribers:
            self.refused += 1
            return self._refusal()
        stream = _Stream(kinds, self._queue_size, last_id, request.transport)
        # No await from here until the backlog is taken: each event is either in the backlog or queued, once.
        unsubscribe = self._events.subscribe(stream.deliver)
        self._streams.add(stream)
        self._idle.clear()
        response = web.StreamResponse(headers=_HEADERS)
        try:
            await self._serve(request, response, stream, self._backlog(kinds, last_id, replay))
        except TimeoutError:  # a write the client did not take in time: it is not reading
            stream.abort()
        except ConnectionResetError:
            pass  # the client went away
        finally:
            unsubscribe()
            self._streams.discard(stream)
            if not self._streams:
                self._idle.set()
        return response

    def _backlog(self, kinds: frozenset[str], last_id: int | None, replay: int) -> _Backlog:
        if last_id is None and replay == 0:
            return _Backlog(None, [])  # the live edge: the buffer is not even copied
        # ``events()`` copies the buffer; the copy lives only in this call, not for the stream's lifetime.
        # A resume ignores ``replay``: an EventSource reconnects to the same URL, adding Last-Event-ID.
        if last_id is None:
            buffered = self._events.events(next(iter(kinds)) if len(kinds) == 1 else None)
            newest = itertools.islice((e for e in reversed(buffered) if not kinds or e.kind in kinds), replay)
            return _Backlog(None, list(newest)[::-1])
        buffered = self._events.events()
        first = buffered[0].id if buffered else last_id + 1
        gap = (last_id + 1, first - 1) if first > last_id + 1 else None
        missed = itertools.islice(buffered, max(0, last_id + 1 - first), None)  # ids are consecutive
        return _Backlog(gap, [e for e in missed if not kinds or e.kind in kinds])

    async def _serve(
        self, request: web.Request, response: web.StreamResponse, stream: _Stream, backlog: _Backlog
    ) -> None:
        async with asyncio.timeout(self._write_timeout):
            await response.prepare(request)
        await self._write(response, b"retry: 1000\n\n")
        if backlog.gap is not None:
            gap = {"from": backlog.gap[0], "to": backlog.gap[1]}
            await self._write(response, f"event: gap\ndata: {json.dumps(gap)}\n\n".encode())
        sent = 0
        for event in backlog.events:
            if stream.overflow or self.closed:
                break
            await self._write(response, _frame(event))
            sent = event.id
        del backlog  # a resume can replay the whole buffer: do not hold it for the stream's lifetime
        # After close() the queue still ends with what was recorded before it (the shutdown's reverts):
        # those are sent, then the close signal that follows them.
        while not stream.overflow:
            try:
                item = await asyncio.wait_for(stream.queue.get(), timeout=self._heartbeat)
            except TimeoutError:
                await self._write(response, b": heartbeat\n\n")
                continue
            if item is None:
                break
            await self._write(response, _frame(item))
            sent = item.id
        if self.closed:
            await self._write(response, b"event: close\ndata: {}\n\n")
        elif stream.overflow:  # a reader too slow for the stream: tell it where to resume from, and end
            # The id makes an EventSource reconnect with Last-Event-ID set to the resume point.
            resume = max(sent, stream.floor or 0)
            data = json.dumps({"resume_after": resume})
            await self._write(response, f"id: {resume}\nevent: overflow\ndata: {data}\n\n".encode())
        async with asyncio.timeout(self._write_timeout):  # else aiohttp would end it, waiting without a bound
            await response.write_eof()

    async def _write(self, response: web.StreamResponse, data: bytes) -> None:
        async with asyncio.timeout(self._write_timeout):
            await response.write(data)

    def _refusal(self) -> web.Response:
        message = f"too many event streams open (at most {self._max_subscribers}); retry later"
        body = error_body(429, message)
        # A vanished client's slot is freed by its next heartbeat at the latest.
        retry_after = str(max(1, math.ceil(self._heartbeat)))
        return web.json_response(body, status=429, headers={"Retry-After": retry_after})
