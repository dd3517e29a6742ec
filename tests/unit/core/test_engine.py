"""The engine: callbacks in time order (FIFO within an instant), cancels that leave nothing behind, and coroutines on
the same clock through asyncio's public interface only."""

from __future__ import annotations

import asyncio
import threading

import pytest

from chaosd.core.clock import LoopClock, VirtualEventLoop
from chaosd.core.engine import Engine


def test_callbacks_run_in_time_order_and_in_scheduling_order_within_an_instant() -> None:
    engine = Engine()
    ran: list[tuple[float, str]] = []
    for when, name in [(2.0, "c"), (1.0, "a"), (2.0, "d"), (1.0, "b"), (0.5, "first")]:
        engine.call_at(when, lambda n=name: ran.append((engine.t, n)))
    engine.run(10.0)
    assert ran == [(0.5, "first"), (1.0, "a"), (1.0, "b"), (2.0, "c"), (2.0, "d")]
    # Negative control: scheduled the other way round within an instant, they run the other way round.
    engine = Engine()
    order: list[str] = []
    engine.call_at(1.0, order.append, "b")
    engine.call_at(1.0, order.append, "a")
    engine.run(1.0)
    assert order == ["b", "a"]


def test_a_run_stops_at_its_bound_and_an_interrupt_ends_it_with_its_instant() -> None:
    engine = Engine()
    seen: list[float] = []
    for when in (1.0, 2.0, 2.0, 3.0):
        engine.call_at(when, lambda: seen.append(engine.t))
    engine.run(1.5)
    assert seen == [1.0]

    def interrupting() -> None:
        seen.append(-engine.t)
        engine.interrupted = True

    engine.call_at(2.0, interrupting)
    engine.run(10.0)
    # The interrupt came from the first callback at 2.0: the rest of 2.0 ran, 3.0 did not.
    assert seen == [1.0, 2.0, 2.0, -2.0]
    assert engine.next_at() == 3.0


def test_cancelled_callbacks_never_run_and_never_pile_up() -> None:
    engine = Engine()
    ran: list[int] = []
    kept = engine.call_at(5.0, ran.append, 1)
    for i in range(100_000):
        engine.cancel(engine.call_at(1000.0 + i, ran.append, i))
    # Bounded: the heap is rebuilt once cancelled entries are most of it (without that, 100,001 entries).
    assert len(engine._heap) <= 202
    assert len(engine) == 1
    engine.cancel(kept)
    engine.cancel(kept)  # twice: no-op
    engine.run(float("inf"))
    assert ran == []
    assert engine.next_at() == float("inf")


def test_coroutines_sleep_and_time_out_on_the_virtual_clock_with_asyncio_s_own_calls() -> None:
    loop = VirtualEventLoop()
    clock = LoopClock(loop)

    async def main() -> list[float]:
        times = [loop.time()]
        await asyncio.sleep(2.5)
        times.append(loop.time())
        await clock.sleep(1.0)
        times.append(loop.time())
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(3.0):
                await asyncio.Event().wait()
        times.append(loop.time())

        async def sleeper() -> None:
            await clock.sleep(100.0)

        task = asyncio.ensure_future(sleeper())
        await clock.sleep_until(7.0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        times.append(loop.time())
        await clock.sleep(0.5)
        times.append(loop.time())
        return times

    try:
        times = loop.run_until_complete(main())
    finally:
        loop.close()
    # The cancelled 100 s sleep left no timer holding the clock: the last sleep ends at 7.5, not 107.
    assert times == [0.0, 2.5, 3.5, 6.5, 7.0, 7.5]
    assert len(loop.engine) == 0


def test_a_coroutine_woken_by_a_callback_sees_the_whole_instant() -> None:
    loop = VirtualEventLoop()
    clock = LoopClock(loop)
    log: list[str] = []

    async def main() -> None:
        done: asyncio.Future[None] = loop.create_future()
        clock.call_at(1.0, lambda: (log.append("wake"), done.set_result(None)))
        clock.call_at(1.0, log.append, "same instant")
        clock.call_at(2.0, log.append, "later")
        await done
        log.append(f"coroutine at {loop.time()}")
        await clock.sleep(5.0)

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    assert log == ["wake", "same instant", "coroutine at 1.0", "later"]


def test_another_thread_reaches_a_busy_virtual_loop() -> None:
    """A thread's callback (storage's writer, a signal) arrives while the engine runs steps: outside I/O is
    polled every few simulated milliseconds, not only when the heap runs dry."""
    loop = VirtualEventLoop()
    clock = LoopClock(loop)

    async def main() -> float:
        arrived: asyncio.Future[float] = loop.create_future()
        busy_until = [0.0]

        def step() -> None:  # a busy pipeline: a step every simulated millisecond, forever
            busy_until[0] = loop.time()
            clock.call_at(loop.time() + 0.001, step)

        clock.call_at(0.0, step)
        thread = threading.Thread(target=lambda: loop.call_soon_threadsafe(lambda: arrived.set_result(loop.time())))
        thread.start()
        try:
            return await asyncio.wait_for(arrived, timeout=10_000.0)
        finally:
            thread.join(10)  # ended before the next test: its end is not that test's garbage

    try:
        at = loop.run_until_complete(main())
    finally:
        loop.close()
    assert 0.0 <= at < 60.0  # seen within a simulated minute, not at the timeout: steps kept coming all along
