"""The virtual-time loop: the clock jumps to the next timer, runs the same coroutines, and stays exact."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import random
import resource
import socket
import threading
import types
from pathlib import Path

from chaosd.core.clock import LoopClock, VirtualEventLoop, new_event_loop


def _run(coro_factory):  # type: ignore[no-untyped-def]
    loop = VirtualEventLoop()
    try:
        return loop.run_until_complete(coro_factory(LoopClock(loop)))
    finally:
        loop.close()


def test_an_hour_of_sleep_passes_instantly_and_exactly() -> None:
    async def main(clock: LoopClock) -> float:
        await clock.sleep(3600.0)
        return clock.now()

    assert _run(main) == 3600.0


def test_timers_fire_in_clock_order_with_interleaved_coroutines() -> None:
    async def main(clock: LoopClock) -> list[tuple[float, str]]:
        seen: list[tuple[float, str]] = []

        async def sleeper(name: str, gaps: list[float]) -> None:
            for gap in gaps:
                await clock.sleep(gap)
                seen.append((round(clock.now(), 9), name))

        await asyncio.gather(sleeper("a", [0.3, 0.3, 0.3]), sleeper("b", [0.5, 0.5]), sleeper("c", [0.001]))
        return seen

    assert _run(main) == [(0.001, "c"), (0.3, "a"), (0.5, "b"), (0.6, "a"), (0.9, "a"), (1.0, "b")]


def test_sleep_until_and_wait_for_timeouts_use_virtual_time() -> None:
    async def main(clock: LoopClock) -> tuple[float, float]:
        await clock.sleep_until(12.5)
        t1 = clock.now()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.Event().wait(), timeout=30.0)
        return t1, clock.now()

    assert _run(main) == (12.5, 42.5)


def test_a_sleep_behaves_as_asyncio_sleep_under_cancel_timeout_wait_for_and_gather() -> None:
    # clock.sleep resumes its task from the timer itself (one turn of the loop, not a future's two); everything
    # asyncio does with a sleep must still work: a killed sleeper stops at once, with the cancel's message.
    async def main(clock: LoopClock) -> list[tuple[str, float]]:
        seen: list[tuple[str, float]] = []

        async def sleeper() -> None:
            try:
                await clock.sleep(100.0)
            except asyncio.CancelledError as exc:
                seen.append((f"cancelled {exc.args}", clock.now()))
                raise

        task = asyncio.create_task(sleeper())
        await clock.sleep(1.0)
        task.cancel("killed")
        with contextlib.suppress(asyncio.CancelledError):
            await task
        assert task.cancelled()
        try:
            async with asyncio.timeout(2.0):
                await clock.sleep(50.0)
        except TimeoutError:
            seen.append(("timeout", clock.now()))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(clock.sleep(50.0), timeout=3.0)
        seen.append(("wait_for", clock.now()))
        await asyncio.gather(clock.sleep(1.0), clock.sleep(4.0))
        seen.append(("gather", clock.now()))
        return seen

    assert _run(main) == [("cancelled ('killed',)", 1.0), ("timeout", 3.0), ("wait_for", 6.0), ("gather", 10.0)]


def _of_the_sleeps(obj: object) -> bool:
    """Whether a collected object is one a sleep could have left in a cycle: asyncio's or chaosd's, or a coroutine or
    frame of their code or this file's (not, say, a thread another test started and the host ended late)."""
    if isinstance(obj, types.FrameType):
        return _ours(obj.f_code.co_filename)
    if isinstance(obj, types.CoroutineType):
        return _ours(obj.cr_code.co_filename)
    return (getattr(type(obj), "__module__", "") or "").startswith(("asyncio", "_asyncio", "chaosd"))


def _ours(filename: str) -> bool:
    path = Path(filename)
    return path == Path(__file__) or "asyncio" in path.parts or "chaosd" in path.parts[:-1]


def test_a_sleep_keeps_nothing_alive_after_it_ends() -> None:
    # Each task sleeps a few times per simulated task: a sleep that left a reference cycle behind would make the
    # garbage collector run all the time.
    async def main(clock: LoopClock) -> list[object]:
        async def sleeper() -> None:
            for _ in range(100):
                await clock.sleep(0.01)

        gc.collect()
        gc.disable()
        gc.set_debug(gc.DEBUG_SAVEALL)  # what the collection finds stays in gc.garbage, to be looked at
        try:
            await asyncio.gather(*(sleeper() for _ in range(10)))
            await clock.sleep(0.5)
            gc.collect()
            return [obj for obj in gc.garbage if _of_the_sleeps(obj)]
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()

    assert _run(main) == []


class _AsyncioTimers(VirtualEventLoop):
    """The virtual loop with asyncio's own timer heap (of handles) and loop iteration: the reference order."""

    call_at = asyncio.SelectorEventLoop.call_at  # type: ignore[assignment]
    _run_once = asyncio.SelectorEventLoop._run_once  # type: ignore[attr-defined]


def test_timers_fire_in_the_order_of_asyncios_own_heap_ties_and_cancels_included() -> None:
    # The virtual loop keeps (when, handle) pairs in its heap for speed; a seed gives the same run across versions
    # only if timers fire exactly as asyncio's heap of handles orders them, equal times included (a heap does not
    # keep ties in arrival order, so the order of ties depends on everything pushed before).
    rng = random.Random(7)
    times = [rng.choice([0.5, 1.0, 1.5]) if rng.random() < 0.5 else round(rng.uniform(0, 2), 3) for _ in range(400)]
    cancelled = [i for i in range(len(times)) if rng.random() < 0.2]
    assert len(set(times)) < len(times) - 100  # the case under test: many equal times

    def fired_on(loop: VirtualEventLoop) -> list[int]:
        fired: list[int] = []

        async def main() -> None:
            handles = [loop.call_at(when, fired.append, i) for i, when in enumerate(times)]
            for i in cancelled:
                handles[i].cancel()
            await asyncio.sleep(1.0)
            for i, when in enumerate(times[:100]):  # more timers, pushed onto a heap already popped from
                loop.call_at(when + 0.5, fired.append, 1000 + i)
            await asyncio.sleep(2.0)

        try:
            loop.run_until_complete(main())
        finally:
            loop.close()
        return fired

    expected = fired_on(_AsyncioTimers())
    assert len(expected) == len(times) - len(cancelled) + 100
    assert fired_on(VirtualEventLoop()) == expected


def test_a_callback_that_raises_is_reported_with_its_handle_and_the_loop_goes_on() -> None:
    # The virtual loop runs ready callbacks itself (not through Handle._run) and makes its timers without
    # TimerHandle's constructor: both must still behave as asyncio's do.
    loop = VirtualEventLoop()
    reported: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    ran: list[float] = []

    def boom() -> None:
        raise ValueError("boom")

    async def main() -> None:
        timer = loop.call_at(2.0, boom)
        assert isinstance(timer, asyncio.TimerHandle) and timer.when() == 2.0 and not timer.cancelled()
        loop.call_at(3.0, lambda: ran.append(loop.time()))
        loop.call_at(4.0, ran.append, -1.0).cancel()
        await asyncio.sleep(5.0)

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    assert ran == [3.0]
    assert len(reported) == 1
    assert isinstance(reported[0]["exception"], ValueError)
    assert "boom" in str(reported[0]["message"]) and isinstance(reported[0]["handle"], asyncio.TimerHandle)


def test_a_thread_can_wake_an_idle_virtual_loop() -> None:
    async def main(clock: LoopClock) -> str:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[str] = loop.create_future()
        thread = threading.Thread(target=lambda: loop.call_soon_threadsafe(fut.set_result, "woken"))
        thread.start()
        try:
            return await fut  # no timer pending: the loop must wait for the thread, not spin or jump
        finally:
            thread.join(10)

    assert _run(main) == "woken"


def test_real_time_loop_watches_descriptors_above_1024() -> None:
    """select() cannot watch a descriptor ≥ 1024 ("filedescriptor out of range"): a daemon holding ~1,100
    connections needs the real-time loop to."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))
    loop = new_event_loop(virtual=False)
    pairs = [socket.socketpair() for _ in range(600)]
    try:
        assert not isinstance(loop, VirtualEventLoop)
        high_r, high_w = pairs[-1]
        assert high_r.fileno() >= 1024

        async def main() -> bytes:
            got: asyncio.Future[bytes] = loop.create_future()
            loop.add_reader(high_r.fileno(), lambda: got.done() or got.set_result(high_r.recv(10)))
            loop.call_later(0.001, high_w.send, b"woken")  # the loop is in a timed wait when this lands
            return await asyncio.wait_for(got, 10)

        assert loop.run_until_complete(main()) == b"woken"
    finally:
        for a, b in pairs:
            a.close()
            b.close()
        loop.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
