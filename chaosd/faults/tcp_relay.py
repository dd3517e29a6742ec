"""Raw TCP relayed for a dependency's fault proxy: bytes both ways, the faults acting on each connection (a reset,
a hold) and on each chunk sent back (latency keeping their order and spacing, slices)."""

from __future__ import annotations

import asyncio

from chaosd.faults.dependency import NO_FAULTS, PIECE, CallFaults, reset
from chaosd.faults.upstream_pool import Conn, UpstreamPool

__all__ = ["TcpRelay"]


class TcpRelay:
    """Relays one client connection at a time to a new upstream connection."""

    def __init__(self, acts: CallFaults, pool: UpstreamPool) -> None:
        self._acts = acts
        self._pool = pool

    async def connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if await self._acts.cut(self._acts.call(), reader, writer):
            return
        try:
            conn = await self._pool.connect()
        except (OSError, TimeoutError) as exc:
            self._pool.unreachable(str(exc) or type(exc).__name__)
            reset(writer)
            return
        self._pool.reached()
        upward = asyncio.create_task(self._pump_up(reader, conn))
        try:
            await self._pump_down(conn, writer)
        finally:
            conn.close()  # first: stop() may cancel the wait below
            upward.cancel()
            await asyncio.gather(upward, return_exceptions=True)

    async def _pump_up(self, reader: asyncio.StreamReader, conn: Conn) -> None:
        try:
            while data := await reader.read(PIECE):
                conn.writer.write(data)
                await conn.writer.drain()
            if conn.writer.can_write_eof():
                conn.writer.write_eof()
        except ConnectionError:
            conn.close()  # the client reset: so does the upstream side, and the downward pump ends

    async def _pump_down(self, conn: Conn, writer: asyncio.StreamWriter) -> None:
        """Upstream to client, where the faults act; chunks delayed by latency keep their order and spacing."""
        src = conn.reader
        delayed: asyncio.Queue[tuple[float, bytes] | None] | None = None
        sender: asyncio.Task[None] | None = None
        counted: set[str] = set()
        try:
            while data := await src.read(PIECE):
                faults = self._acts.faults
                if faults is NO_FAULTS and delayed is None:
                    writer.write(data)
                    await writer.drain()
                    continue
                for action in ("dependency_latency", "dependency_slice"):
                    if action not in counted and action in faults.names():
                        counted.add(action)
                        self._acts.count(action)
                if delayed is None and faults.latency <= 0 and faults.jitter <= 0:
                    await self._acts.sender(writer, faults)(data)
                    continue
                if delayed is None:  # from the first delayed chunk on, every chunk goes through the queue, in order
                    delayed = asyncio.Queue(maxsize=64)
                    sender = asyncio.create_task(self._send_delayed(delayed, conn, writer))
                await delayed.put((self._acts.due(faults), data))
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
        self, queue: asyncio.Queue[tuple[float, bytes] | None], conn: Conn, writer: asyncio.StreamWriter
    ) -> None:
        try:
            while (item := await queue.get()) is not None:
                due, data = item
                await self._acts.sleep_until(due)
                await self._acts.sender(writer, self._acts.faults)(data)
        except ConnectionError:  # the client went: end the upstream side, and take what the pump still puts
            writer.transport.abort()
            conn.close()
            while await queue.get() is not None:
                pass
