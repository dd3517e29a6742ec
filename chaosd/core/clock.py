"""The clock every component reads, and the two event loops that drive it.

Nothing else in chaosd calls ``time.*`` or ``asyncio.sleep``: components get a :class:`Clock`,
so the same coroutines run in real time (the daemon) and in virtual time (``chaosd run``).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import ctypes
import functools
import logging
import select
import selectors
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Protocol, TypeVarTuple, Unpack

from chaosd.core.engine import Engine, EngineSelector

_Ts = TypeVarTuple("_Ts")

__all__ = [
    "CATCH_UP",
    "Clock",
    "LoopClock",
    "VirtualEventLoop",
    "every",
    "keeps_asyncio_time",
    "new_event_loop",
    "realtime_selector",
    "unix_time",
    "wall_time",
]


# How much lateness a real-clock worker makes up per task by timing its services from the model's schedule: more
# than a sleep's usual lateness plus a worker's bookkeeping (bench/realtime_breakdown.py measures both) and a brief
# wait for a CPU, far less than a stall (the process paused, a blocked loop), which shows less this much.
CATCH_UP = 0.002


class Clock(Protocol):
    """Seconds on the running loop's clock (monotonic; virtual or real), and callbacks at times on it.

    ``call_at`` is how a simulated step is scheduled: a plain callback, not a coroutine (see
    :mod:`chaosd.core.engine`); ``cancel`` takes back what it returned. ``catch_up``: how much lateness a worker
    may make up by timing a service from its schedule (0 in virtual time, whose callbacks are never late).
    """

    catch_up: float

    def now(self) -> float: ...

    def call_at(self, when: float, callback: Callable[..., object], *args: object) -> Any: ...

    def cancel(self, timer: Any) -> None: ...

    def due_by(self, when: float) -> bool:
        """Whether a callback scheduled with ``call_at`` may be due at or before ``when``: False only when the
        next callback run is surely one scheduled from now on (a virtual clock knows; a real one says True)."""
        ...

    def sleep(self, seconds: float) -> Awaitable[None]: ...

    async def sleep_until(self, when: float) -> None: ...

    def crashed(self) -> asyncio.Future[None]: ...


def keeps_asyncio_time(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether ``loop.time()`` is asyncio's own, which returns ``time.monotonic()``."""
    return type(loop).time is asyncio.BaseEventLoop.time


def _maybe_due(when: float) -> bool:
    return True


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class LoopClock:
    """Reads the running event loop's clock and schedules on it, so a virtual loop makes both virtual.

    On a :class:`VirtualEventLoop` callbacks go to its engine's heap; on another loop, to the loop's ``call_at``,
    each through a guard that hands an exception to :meth:`crashed` (asyncio would only log it, and the part
    whose callback raised would stop without anyone noticing).
    """

    __slots__ = ("_crashed", "_loop", "call_at", "cancel", "catch_up", "due_by", "now", "sleep", "virtual")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.virtual = isinstance(loop, VirtualEventLoop)
        self.catch_up = 0.0 if self.virtual else CATCH_UP
        self._crashed: asyncio.Future[None] | None = None
        # Bound methods stored once: they are on the per-task hot path.
        self.now: Callable[[], float]
        self.call_at: Callable[..., Any]
        self.cancel: Callable[[Any], None]
        self.due_by: Callable[[float], bool]
        self.sleep: Callable[[float], Awaitable[None]]
        if isinstance(loop, VirtualEventLoop):
            engine = loop.engine
            # The engine's time read by a C call (no Python frame): the clock is read several times per task.
            self.now = functools.partial(getattr, engine, "t")
            self.call_at, self.cancel, self.due_by = engine.call_at, engine.cancel, engine.due_by
            self.sleep = self._virtual_sleep
        else:
            # asyncio's own loops read time.monotonic(): call it without the method in between.
            self.now = time.monotonic if keeps_asyncio_time(loop) else loop.time
            self.call_at, self.cancel, self.sleep = self._guarded_call_at, _cancel_handle, asyncio.sleep
            self.due_by = _maybe_due  # asyncio's ready callbacks are not ours to see

    async def sleep_until(self, when: float) -> None:
        if self.virtual and when > self.now():
            await self._virtual_sleep_until(when)  # at exactly ``when``: no round trip through a duration
        else:
            await self.sleep(when - self.now())

    async def _virtual_sleep(self, seconds: float) -> None:
        if seconds <= 0.0:
            await asyncio.sleep(0)  # yields once, as asyncio's does
            return
        await self._virtual_sleep_until(self.now() + seconds)

    async def _virtual_sleep_until(self, when: float) -> None:
        waiter: asyncio.Future[None] = self._loop.create_future()
        timer = self.call_at(when, _wake, waiter)
        try:
            await waiter
        finally:
            self.cancel(timer)  # a cancelled sleeper leaves nothing in the heap to wake

    def _guarded_call_at(self, when: float, callback: Callable[..., object], *args: object) -> asyncio.Handle:
        if when <= self.now():
            # Due already (a hand-over, a yield): the loop's next turn, without a timer on its heap.
            return self._loop.call_soon(self._guarded, callback, args)
        return self._loop.call_at(when, self._guarded, callback, args)

    def _guarded(self, callback: Callable[..., object], args: tuple[object, ...]) -> None:
        try:
            callback(*args)
        except Exception as exc:
            crashed = self.crashed()
            if not crashed.done():
                crashed.set_exception(exc)

    def crashed(self) -> asyncio.Future[None]:
        """Fails with the first exception a callback scheduled here raised: whoever runs the callbacks' owners
        awaits it beside them, as a task group awaits its tasks."""
        if isinstance(self._loop, VirtualEventLoop):
            return self._loop.crashed()
        if self._crashed is None:
            self._crashed = self._loop.create_future()
        return self._crashed


async def every(clock: Clock, due: Callable[[int], float], beat: Callable[[int], object]) -> None:
    """``beat(k)`` at ``due(k)`` for k = 1, 2, …, as callbacks on ``clock``, for as long as this coroutine runs: a beat
    at ``t`` comes before what coroutines do at ``t``. A callback on the clock that raises ends it with the error."""
    timer: object = None

    def fire(k: int) -> None:
        nonlocal timer
        timer = clock.call_at(due(k + 1), fire, k + 1)
        beat(k)

    timer = clock.call_at(due(1), fire, 1)
    try:
        await clock.crashed()
    finally:
        clock.cancel(timer)


def _cancel_handle(timer: asyncio.Handle) -> None:
    timer.cancel()


_FD_SETSIZE = 1024  # select() cannot watch a descriptor at or above this

if hasattr(selectors, "EpollSelector"):  # Linux; elsewhere the platform's own best selector is used instead
    __all__ += ["PreciseEpollSelector"]  # named only where it is defined: `import *` must not fail elsewhere

    class PreciseEpollSelector(selectors.EpollSelector):
        """epoll for any number of descriptors, with waits timed to the microsecond.

        epoll_wait takes whole milliseconds and rounds every timeout up; select() takes microseconds but
        cannot watch descriptors ≥ 1024. So a timed wait is a select() on the one epoll descriptor (readable
        when any watched descriptor is ready), then a non-blocking epoll poll collects the events.
        """

        def __init__(self) -> None:
            super().__init__()
            self._precise = self.fileno() < _FD_SETSIZE
            if not self._precise:  # only if the loop was made after ~1,000 files were opened
                logging.getLogger("chaosd").warning(
                    "epoll descriptor %d ≥ 1024: timers round up to 1 ms", self.fileno()
                )

        def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
            if self._precise and timeout is not None and timeout > 0:
                try:
                    ready, _, _ = select.select([self.fileno()], [], [], timeout)
                except InterruptedError:
                    return []
                if not ready:
                    return []
                timeout = 0
            return super().select(timeout)


def realtime_selector() -> selectors.BaseSelector:
    """The real-time loop's selector: :class:`PreciseEpollSelector` where there is epoll, else the platform's
    best (``selectors.DefaultSelector``: kqueue on macOS and the BSDs, select() on Windows). docs/runtime.md says
    what timer accuracy each gives."""
    if hasattr(selectors, "EpollSelector"):
        return PreciseEpollSelector()
    return selectors.DefaultSelector()


class VirtualEventLoop(asyncio.SelectorEventLoop):
    """An asyncio loop on an :class:`~chaosd.core.engine.Engine`: where it would wait for I/O, its selector runs
    the engine's callbacks instead, and its clock is the engine's.

    Only public methods are overridden: ``time``; and ``call_soon`` and ``call_at``, which tell the engine to hand
    the turn back (a callback woke a coroutine, or asked for a timer the engine must not run past).
    """

    def __init__(self, start: float = 0.0) -> None:
        self.engine = Engine(start)
        self.engine_selector = EngineSelector(self.engine, time.perf_counter)
        super().__init__(self.engine_selector)
        self._crashed: asyncio.Future[None] | None = None
        self.engine.on_error = self._failed

    def crashed(self) -> asyncio.Future[None]:
        """Fails with the first exception one of the engine's callbacks raised: whoever runs the callbacks' owners
        awaits it beside them, as a task group awaits its tasks."""
        if self._crashed is None:
            self._crashed = self.create_future()
        return self._crashed

    def _failed(self, exc: Exception) -> None:
        crashed = self.crashed()
        if not crashed.done():
            crashed.set_exception(exc)
        self.engine.interrupted = True  # whoever awaits it runs next

    def time(self) -> float:
        return self.engine.t

    def call_soon(
        self, callback: Callable[[Unpack[_Ts]], object], *args: *_Ts, context: contextvars.Context | None = None
    ) -> asyncio.Handle:
        self.engine.interrupted = True
        return super().call_soon(callback, *args, context=context)

    def call_at(
        self,
        when: float,
        callback: Callable[[Unpack[_Ts]], object],
        *args: *_Ts,
        context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle:
        self.engine.interrupted = True
        return super().call_at(when, callback, *args, context=context)

    @contextlib.contextmanager
    def outside(self, grace: float = 0.2) -> Iterator[None]:
        """While the loop waits on the outside world (a socket's peer, a thread), give it ``grace`` real seconds
        to answer before the clock jumps to the next callback."""
        selector = self.engine_selector
        before = selector.grace
        selector.grace = grace
        try:
            yield
        finally:
            selector.grace = before


_PR_SET_TIMERSLACK = 29  # linux/prctl.h
_TIMER_SLACK_NS = 1


def _tighten_timer_slack() -> None:
    """Let the calling thread's timed waits end when asked: Linux may otherwise end one up to the thread's timer
    slack (50 µs by default) late, to batch wake-ups, and that is a third of a sleep's usual lateness."""
    if sys.platform != "linux":
        return
    with contextlib.suppress(OSError, AttributeError):  # no prctl: the default slack stays
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_TIMERSLACK, _TIMER_SLACK_NS, 0, 0, 0)


def new_event_loop(*, virtual: bool) -> asyncio.AbstractEventLoop:
    """A virtual-time loop, or a real-time loop on :func:`realtime_selector` (on Linux: sub-millisecond timers
    and no descriptor limit).

    A real-time loop is run by the thread that makes it, which gets the finest timer slack.
    """
    if virtual:
        return VirtualEventLoop()
    _tighten_timer_slack()
    return asyncio.SelectorEventLoop(realtime_selector())


def wall_time() -> float:
    """Wall-clock seconds, for progress lines and benchmarks only (never for simulated time)."""
    return time.perf_counter()


def unix_time() -> float:
    """Calendar time (Unix seconds), for history records that outlive the process."""
    return time.time()
