"""Server-sent events: the flight recorder as a live stream, with ids, resume, type filters, heartbeats."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

from chaosd.events import Event, EventLog

__all__ = ["Broker"]

_CLOSE = object()


def _frame(event: Event) -> bytes:
    data = json.dumps({"t": round(event.t, 6), **event.data}, sort_keys=True, default=str)
    return f"id: {event.id}\nevent: {event.kind}\ndata: {data}\n\n".encode()


class Broker:
    """Serves ``GET /api/v1/events``; ``close()`` ends every open stream (on shutdown)."""

    def __init__(self, events: EventLog, heartbeat: float, queue_size: int = 2000) -> None:
        self._events = events
        self._heartbeat = heartbeat
        self._queue_size = queue_size
        self._queues: set[asyncio.Queue[Any]] = set()
        self.closed = False

    async def close(self) -> None:
        self.closed = True
        for queue in list(self._queues):
            queue.put_nowait(_CLOSE)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        types = {t for t in request.query.get("types", "").split(",") if t}
        header = request.headers.get("Last-Event-ID") or request.query.get("last_event_id") or "0"
        try:
            last_id = int(header)
        except ValueError:
            raise web.HTTPBadRequest(reason="Last-Event-ID: must be an integer event id") from None
        if self.closed:
            raise web.HTTPServiceUnavailable(reason="shutting down")
        queue: asyncio.Queue[Any] = asyncio.Queue(self._queue_size)
        overflow = False

        def deliver(event: Event) -> None:
            nonlocal overflow
            if queue.full():
                overflow = True
                return
            queue.put_nowait(event)

        unsubscribe = self._events.subscribe(deliver)
        self._queues.add(queue)
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        )
        try:
            await response.prepare(request)
            await response.write(b"retry: 1000\n\n")
            buffered = self._events.events()
            if last_id and buffered and buffered[0].id > last_id + 1:
                gap = {"from": last_id + 1, "to": buffered[0].id - 1}
                await response.write(f"event: gap\ndata: {json.dumps(gap)}\n\n".encode())
            sent = last_id
            for event in buffered:
                if event.id > sent and (not types or event.kind in types):
                    await response.write(_frame(event))
                    sent = event.id
            while not overflow:
                try:
                    item = await asyncio.wait_for(queue.get(), timeout=self._heartbeat)
                except TimeoutError:
                    await response.write(b": heartbeat\n\n")
                    continue
                if item is _CLOSE:
                    await response.write(b"event: close\ndata: {}\n\n")
                    break
                if item.id > sent and (not types or item.kind in types):
                    await response.write(_frame(item))
                    sent = item.id
            if overflow:  # a reader too slow for the stream: tell it where to resume from
                await response.write(f"event: overflow\ndata: {json.dumps({'resume_after': sent})}\n\n".encode())
        except ConnectionResetError:
            pass  # the client went away
        finally:
            unsubscribe()
            self._queues.discard(queue)
        return response
