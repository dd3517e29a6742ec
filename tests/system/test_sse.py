"""The event stream under abuse: a real aiohttp server on loopback, the real Broker and EventLog, real sockets."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiohttp import ClientResponse, web
from aiohttp.test_utils import TestClient, TestServer

from chaosd.api.app import errors
from chaosd.api.sse import Broker
from chaosd.events.log import EventLog

URL = "/api/v1/events"
Client = TestClient[web.Request, web.Application]


@asynccontextmanager
async def _served(log: EventLog, **options: Any) -> AsyncIterator[tuple[Broker, Client]]:
    """The broker behind the daemon's error middleware, on 127.0.0.1, with a plain route beside it."""
    options.setdefault("heartbeat", 30.0)
    broker = Broker(log, **options)

    async def ping(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    async def end_streams(app: web.Application) -> None:
        await broker.close()

    app = web.Application(middlewares=[errors])
    app.router.add_get(URL, broker.handle)
    app.router.add_get("/ping", ping)
    app.on_shutdown.append(end_streams)
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        yield broker, client


def _run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(test(), 30))


async def _wait_until(condition: Callable[[], bool], within: float = 5.0) -> None:
    async with asyncio.timeout(within):
        while not condition():
            await asyncio.sleep(0.01)


class _Frames:
    """Reads an SSE response frame by frame: ``{"id", "event", "data"}``, or ``{"comment"}`` for a heartbeat."""

    def __init__(self, response: ClientResponse) -> None:
        self._response = response

    async def next(self, within: float = 5.0) -> dict[str, Any] | None:
        """The next frame, or None at the end of the stream."""
        frame: dict[str, Any] = {}
        async with asyncio.timeout(within):
            while True:
                raw = await self._response.content.readline()
                if not raw:
                    return None
                line = raw.decode().rstrip("\n")
                if line.startswith(":"):
                    frame["comment"] = line[1:].strip()
                elif line.startswith("id: "):
                    frame["id"] = int(line[4:])
                elif line.startswith("event: "):
                    frame["event"] = line[7:]
                elif line.startswith("data: "):
                    frame["data"] = json.loads(line[6:])
                elif line == "" and ("event" in frame or "comment" in frame):
                    return frame
                elif line == "":
                    frame = {}  # the opening ``retry:`` advice

    async def events(self, count: int) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        while len(found) < count:
            frame = await self.next()
            assert frame is not None, f"the stream ended after {found}"
            if "event" in frame:
                found.append(frame)
        return found


def test_a_type_filtered_slow_subscriber_is_not_overflowed_by_other_types() -> None:
    async def body() -> None:
        log = EventLog()
        async with _served(log, queue_size=10) as (_, client), client.get(URL, params={"types": "fault"}) as resp:
            assert resp.status == 200 and resp.headers["Content-Type"] == "text/event-stream"
            frames = _Frames(resp)
            for n in range(500):  # no await in between: the stream cannot take any of them off its queue
                log.record(float(n), "task", n=n)
            wanted = log.record(500.0, "fault", state="injected")
            later = log.record(501.0, "fault", state="reverted")
            got = await frames.events(2)
            assert [(f["event"], f["id"]) for f in got] == [("fault", wanted.id), ("fault", later.id)]
            assert got[0]["data"]["state"] == "injected"

    _run(body)


def test_an_overflowing_subscriber_is_told_where_to_resume_and_its_stream_ends() -> None:
    async def body() -> None:
        log = EventLog()
        log.record(0.0, "task")
        async with _served(log, queue_size=10) as (broker, client):
            async with client.get(URL, params={"types": "fault"}) as resp:
                frames = _Frames(resp)
                recorded = [log.record(float(n), "fault", n=n).id for n in range(30)]  # three times its queue
                got = []
                while (frame := await frames.next()) is not None and frame["event"] == "fault":
                    got.append(frame["id"])
                assert frame is not None and frame["event"] == "overflow"
                assert len(got) < 10  # it fell behind long before the end
                assert frame["data"]["resume_after"] == frame["id"] == (got[-1] if got else recorded[0] - 1)
                assert await frames.next() is None  # and the stream ended
            await _wait_until(lambda: broker.subscribers == 0)
            headers = {"Last-Event-ID": str(frame["id"])}  # what an EventSource sends when it reconnects
            async with client.get(URL, params={"types": "fault"}, headers=headers) as resp:
                got += [f["id"] for f in await _Frames(resp).events(len(recorded) - len(got))]
            assert got == recorded  # nothing lost, nothing twice

    _run(body)


def test_a_new_subscriber_starts_at_the_live_edge_unless_it_asks_for_a_replay() -> None:
    async def body() -> None:
        log = EventLog()
        for n in range(1, 11):
            log.record(float(n), "fault" if n % 2 == 0 else "task", n=n)  # faults are ids 2, 4, 6, 8, 10
        async with _served(log) as (_, client):
            async with client.get(URL) as resp:
                live = log.record(11.0, "task", n=11)
                assert [f["id"] for f in await _Frames(resp).events(1)] == [live.id]  # no history before it

            async with client.get(URL, params={"replay": "3", "types": "fault"}) as resp:
                live = log.record(12.0, "fault", n=12)
                got = await _Frames(resp).events(4)
                assert [f["id"] for f in got] == [6, 8, 10, live.id]
                assert {f["event"] for f in got} == {"fault"}

            async with client.get(URL, params={"replay": "2"}) as resp:
                live = log.record(13.0, "task", n=13)
                assert [f["id"] for f in await _Frames(resp).events(3)] == [11, 12, live.id]

    _run(body)


def test_a_resuming_subscriber_gets_what_it_missed_and_a_gap_for_what_the_buffer_lost() -> None:
    async def body() -> None:
        log = EventLog(limit=5)
        for n in range(1, 11):
            log.record(float(n), "task", n=n)  # the buffer keeps ids 6..10
        async with _served(log) as (_, client):
            async with client.get(URL, headers={"Last-Event-ID": "2"}, params={"replay": "1"}) as resp:
                got = await _Frames(resp).events(6)
                assert got[0]["event"] == "gap" and got[0]["data"] == {"from": 3, "to": 5}
                assert [f["id"] for f in got[1:]] == [6, 7, 8, 9, 10]

            async with client.get(URL, params={"last_event_id": "8"}) as resp:
                live = log.record(11.0, "task", n=11)
                assert [(f["event"], f["id"]) for f in await _Frames(resp).events(3)] == [
                    ("task", 9),
                    ("task", 10),
                    ("task", live.id),
                ]

    _run(body)


def test_subscribers_beyond_the_limit_get_429_until_a_stream_ends() -> None:
    async def body() -> None:
        log = EventLog()
        async with _served(log, max_subscribers=2, heartbeat=0.1) as (broker, client):
            first = await client.get(URL)
            second = await client.get(URL)
            assert first.status == second.status == 200 and broker.subscribers == 2

            async with client.get(URL) as refused:
                assert refused.status == 429
                assert int(refused.headers["Retry-After"]) >= 1
                answer = await refused.json()
                assert answer["error"]["status"] == 429 and answer["error"]["field"] is None
                assert "2" in answer["error"]["message"]
            assert broker.refused == 1 and broker.subscribers == 2

            first.close()  # the client goes away; the server notices on its next heartbeat
            await _wait_until(lambda: broker.subscribers == 1)
            async with client.get(URL) as again:
                assert again.status == 200
                event = log.record(1.0, "fault")
                assert [f["id"] for f in await _Frames(again).events(1)] == [event.id]
            assert [f["id"] for f in await _Frames(second).events(1)] == [event.id]  # the other stream lives on
            assert broker.refused == 1
            second.close()

    _run(body)


def test_a_subscriber_that_never_reads_loses_its_stream_within_the_write_timeout() -> None:
    async def body() -> None:
        log = EventLog()
        loop = asyncio.get_running_loop()
        async with _served(log, write_timeout=0.5, queue_size=5000) as (broker, client):
            assert client.port is not None
            stuck = socket.socket()
            stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            stuck.setblocking(False)
            try:
                await loop.sock_connect(stuck, ("127.0.0.1", client.port))
                await loop.sock_sendall(stuck, f"GET {URL} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
                await _wait_until(lambda: broker.subscribers == 1)
                blob = "x" * 65536
                for n in range(400):  # ~26 MB for a client that reads nothing; far below its queue bound
                    log.record(float(n), "task", blob=blob)
                async with client.get("/ping") as pong:
                    assert pong.status == 200  # the server answers others meanwhile
                # The heartbeat is 30 s and the queue never fills: only the write timeout can free the slot.
                await _wait_until(lambda: broker.subscribers == 0, within=0.5 + 4.5)
                async with asyncio.timeout(5):  # and the stuck connection was cut
                    with pytest.raises(ConnectionResetError):
                        while await loop.sock_recv(stuck, 65536):
                            pass
                        raise ConnectionResetError("closed")  # an orderly close counts too
            finally:
                stuck.close()
            async with client.get(URL) as resp:
                event = log.record(1.0, "fault")
                assert [f["id"] for f in await _Frames(resp).events(1)] == [event.id]

    _run(body)


@pytest.mark.parametrize(
    ("headers", "params", "field"),
    [
        ({"Last-Event-ID": "x"}, {}, "Last-Event-ID"),
        ({"Last-Event-ID": "-1"}, {}, "Last-Event-ID"),
        ({"Last-Event-ID": "+5"}, {}, "Last-Event-ID"),
        ({"Last-Event-ID": "1_000"}, {}, "Last-Event-ID"),
        ({"Last-Event-ID": "1" * 21}, {}, "Last-Event-ID"),
        ({}, {"last_event_id": "<script>alert(1)</script>"}, "last_event_id"),
        ({}, {"types": "Fault"}, "types"),
        ({}, {"types": "fault,<img src=x onerror=alert(1)>"}, "types"),
        ({}, {"types": "fault,"}, "types"),
        ({}, {"types": "a" * 33}, "types"),
        ({}, {"types": ",".join(["fault"] * 100)}, "types"),
        ({}, {"replay": "-1"}, "replay"),
        ({}, {"replay": "1001"}, "replay"),
        ({}, {"replay": "1.5"}, "replay"),
        ({}, {"replay": "<b>3</b>"}, "replay"),
    ],
)
def test_bad_stream_parameters_get_a_json_400_naming_the_field(
    headers: dict[str, str], params: dict[str, str], field: str
) -> None:
    async def body() -> None:
        async with _served(EventLog()) as (broker, client), client.get(URL, headers=headers, params=params) as resp:
            assert resp.status == 400 and resp.content_type == "application/json"
            error = (await resp.json())["error"]
            assert error["status"] == 400 and error["field"] == field and error["message"]
            for raw in [*headers.values(), *params.values()]:
                assert raw not in error["message"]
            assert broker.subscribers == 0

    _run(body)


def test_heartbeats_keep_a_quiet_stream_alive() -> None:
    async def body() -> None:
        async with _served(EventLog(), heartbeat=0.05) as (_, client), client.get(URL) as resp:
            frames = _Frames(resp)
            assert await frames.next() == {"comment": "heartbeat"}
            assert await frames.next() == {"comment": "heartbeat"}

    _run(body)


def test_close_sends_every_stream_its_close_event_and_ends_it() -> None:
    async def body() -> None:
        log = EventLog()
        async with _served(log) as (broker, client):
            plain = await client.get(URL)
            filtered = await client.get(URL, params={"types": "fault"})
            assert broker.subscribers == 2
            await broker.close()
            assert broker.subscribers == 0
            for resp in (plain, filtered):
                frames = _Frames(resp)
                assert await frames.next() == {"event": "close", "data": {}}
                assert await frames.next() is None
            async with client.get(URL) as late:
                assert late.status == 503 and (await late.json())["error"]["status"] == 503

    _run(body)
