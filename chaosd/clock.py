"""The clock every component reads, and the two event loops that drive it.

Nothing else in chaosd calls ``time.*`` or ``asyncio.sleep``: components get a :class:`Clock`,
so the same coroutines run in real time (the daemon) and in virtual time (``chaosd run``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import heapq
import logging
import select
import selectors
import time
from asyncio import base_events
from collections.abc import Awaitable, Callable, Generator, Iterator, Mapping
from typing import Any, Protocol, TypeVarTuple, Unpack

__all__ = [
    "Clock",
    "LoopClock",
    "PreciseEpollSelector",
    "VirtualEventLoop",
    "new_event_loop",
    "unix_time",
    "wall_time",
]


class Clock(Protocol):
    """Seconds on the running loop's clock (monotonic; virtual or real)."""

    def now(self) -> float: ...

    def sleep(self, seconds: float) -> Awaitable[None]: ...

    async def sleep_until(self, when: float) -> None: ...


class LoopClock:
    """Reads the running event loop's clock, so a virtual loop makes it virtual."""

    __slots__ = ("_loop", "now", "virtual")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.virtual = isinstance(loop, VirtualEventLoop)
        # A bound method stored once: ``now()`` is on the per-task hot path. asyncio's own loops read
        # time.monotonic(), so call it without the method in between (a task reads the clock three times).
        self.now = time.monotonic if type(loop).time is asyncio.BaseEventLoop.time else loop.time

    def sleep(self, seconds: float) -> Awaitable[None]:
        """What ``asyncio.sleep`` does, in one turn of the loop instead of two (see :class:`_Alarm`); a task sleeps
        several times per simulated task. A sleep of 0 or less yields once, as asyncio's does."""
        if seconds <= 0.0:
            return asyncio.sleep(0)
        return _Alarm(self._loop, self.now() + seconds)

    async def sleep_until(self, when: float) -> None:
        await self.sleep(when - self.now())


class _Alarm:
    """A sleep until ``when`` whose timer resumes the sleeping task itself.

    Sleeping on a future takes two turns of the loop: the timer sets the future's result, which schedules the
    task's wake-up for the next turn. A task hands its wake-up to what it awaits (``add_done_callback``), and an
    alarm hands it to the timer, so the task runs in the timer's own turn. asyncio's tasks accept any object that
    behaves as a future this far: ``_asyncio_future_blocking``, ``get_loop``, ``add_done_callback``, ``result``
    and ``cancel``. A cancelled sleeper (a killed agent, a stage's timeout) is woken at once, and raises
    ``CancelledError`` where it awaited, as with a future.
    """

    # No __slots__: a slot would make ``_asyncio_future_blocking`` a class attribute, and asyncio would then take an
    # alarm for a future (``asyncio.isfuture``) and call it back itself in ``gather`` or ``wait_for``; without one,
    # those wrap it in a task like any awaitable. Class defaults: an alarm is made per sleep, and sets only these.
    _handle: asyncio.TimerHandle | None = None
    _wakeup: Any = None  # the task's wake-up, and its context: a cancel calls it at once
    _context: Any = None
    _cancelled: asyncio.CancelledError | None = None

    def __init__(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        self._loop = loop
        self._when: float | None = when  # None once yielded to the task

    def __await__(self) -> Generator[_Alarm, None, None]:
        # An iterator that yields the alarm once, as a future's does; not a generator, which would add a frame.
        return self  # type: ignore[return-value]

    def __iter__(self) -> _Alarm:
        return self

    def __next__(self) -> _Alarm:
        if self._when is None:  # resumed: the sleep is over
            raise StopIteration
        self._asyncio_future_blocking = True
        return self

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def add_done_callback(self, wakeup: Any, *, context: Any = None) -> None:
        when, self._when = self._when, None
        assert when is not None, "an alarm wakes one task once"
        self._wakeup, self._context = wakeup, context
        self._handle = self._loop.call_at(when, wakeup, self, context=context)

    def result(self) -> None:
        # The task asks once it is woken: drop the references that would keep a cycle (task → alarm → timer).
        self._handle = self._wakeup = self._context = None
        if self._cancelled is not None:
            raise self._cancelled

    def cancel(self, msg: str | None = None) -> bool:
        handle = self._handle
        if handle is None or self._cancelled is not None:
            return False
        handle.cancel()
        self._cancelled = asyncio.CancelledError() if msg is None else asyncio.CancelledError(msg)
        self._loop.call_soon(self._wakeup, self, context=self._context)
        return True


class _VirtualSelector(selectors.BaseSelector):
    """Polls real file descriptors without blocking; a wait for a timer advances the clock instead."""

    def __init__(self, start: float) -> None:
        self.now = start
        self.grace = 0.0  # real seconds outside I/O gets before the clock jumps (see VirtualEventLoop.outside)
        self._jumps = 0
        self._real = selectors.DefaultSelector()

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._real.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.modify(fileobj, events, data)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout == 0:
            # Callbacks are ready: run them without a system call. Outside I/O is polled below, whenever the
            # loop runs out of ready work, which in virtual time is every few callbacks.
            return []
        # Outside I/O (a thread's callback, a socket) is polled on every 8th short jump of the clock, not on each:
        # a busy run jumps tens of thousands of times per real second, and a system call per jump would be a tenth
        # of its time. A jump of 10 ms or more, or a wait with a grace (a client waiting on a peer), polls every
        # time, so what comes from outside is seen within 80 simulated ms at most.
        self._jumps += 1
        if timeout is None or timeout >= 0.01 or self.grace or self._jumps & 7 == 0:
            events = self._real.select(self.grace)
            if events:
                return events
        if timeout is None:
            # No timer at all: only outside I/O (a thread's callback) can wake us, so wait for it.
            return self._real.select(None)
        self.now += timeout
        return []

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return self._real.get_map()

    def close(self) -> None:
        self._real.close()


_Ts = TypeVarTuple("_Ts")
# asyncio's own limits, which the virtual loop's iteration keeps: past this many timers, a cancelled share that makes
# the loop rebuild its heap; and the longest wait for a timer.
_MIN_SCHEDULED = base_events._MIN_SCHEDULED_TIMER_HANDLES  # type: ignore[attr-defined]
_MIN_CANCELLED_SHARE = base_events._MIN_CANCELLED_TIMER_HANDLES_FRACTION  # type: ignore[attr-defined]
_MAX_WAIT = base_events.MAXIMUM_SELECT_TIMEOUT  # type: ignore[attr-defined]

_TimerHandle = asyncio.TimerHandle
_new_timer = object.__new__  # a TimerHandle without running its constructor (see VirtualEventLoop.call_at)

_FD_SETSIZE = 1024  # select() cannot watch a descriptor at or above this


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
            logging.getLogger("chaosd").warning("epoll descriptor %d ≥ 1024: timers round up to 1 ms", self.fileno())

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


class VirtualEventLoop(asyncio.SelectorEventLoop):
    """An asyncio loop whose clock jumps to the next timer whenever nothing is ready."""

    def __init__(self, start: float = 0.0) -> None:
        self._vselector = _VirtualSelector(start)
        super().__init__(self._vselector)
        # Timers fire when due, not up to a real clock's resolution early.
        self._clock_resolution = 1e-9

    def time(self) -> float:
        return self._vselector.now

    _scheduled: list[tuple[float, asyncio.TimerHandle]]
    _ready: collections.deque[asyncio.Handle]
    _timer_cancelled_count: int
    _stopping: bool

    # The timer heap holds (when, handle) pairs, not handles: asyncio orders its heap with TimerHandle.__lt__, a
    # Python method (and an isinstance) per comparison, several per timer, and a simulated task sets two or more
    # timers. A pair compares its float in C, and where two times are equal it falls back to the handles, which
    # answer "not less", as TimerHandle.__lt__ does: every comparison gives asyncio's answer, so timers fire in the
    # same order.

    def call_at(
        self,
        when: float,
        callback: Callable[[Unpack[_Ts]], object],
        *args: *_Ts,
        context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle:
        if when is None:
            raise TypeError("when cannot be None")
        if self._closed:  # type: ignore[attr-defined]
            raise RuntimeError("Event loop is closed")
        # asyncio's TimerHandle, its fields set here: its constructor is three Python calls (its own, Handle's and
        # the loop's get_debug), and a simulated task sets two or more timers. The one difference: in debug mode a
        # virtual timer keeps no traceback of where it was made.
        timer = _new_timer(_TimerHandle)
        timer._context = context if context is not None else contextvars.copy_context()  # type: ignore[attr-defined]
        timer._loop = self  # type: ignore[attr-defined]
        timer._callback = callback  # type: ignore[attr-defined]
        timer._args = args
        timer._cancelled = False
        timer._repr = None  # type: ignore[attr-defined]
        timer._source_traceback = None  # type: ignore[attr-defined]
        timer._when = when  # type: ignore[attr-defined]
        timer._scheduled = True  # type: ignore[attr-defined]
        heapq.heappush(self._scheduled, (when, timer))
        return timer

    def _run_once(self) -> None:
        """asyncio's loop iteration on the heap of pairs (no debug-mode checks of slow callbacks)."""
        scheduled = self._scheduled
        ready = self._ready
        count = len(scheduled)
        if count > _MIN_SCHEDULED and self._timer_cancelled_count / count > _MIN_CANCELLED_SHARE:
            kept = []
            for entry in scheduled:
                if entry[1]._cancelled:
                    entry[1]._scheduled = False  # type: ignore[attr-defined]
                else:
                    kept.append(entry)
            heapq.heapify(kept)
            self._scheduled = scheduled = kept
            self._timer_cancelled_count = 0
        else:
            while scheduled and scheduled[0][1]._cancelled:
                self._timer_cancelled_count -= 1
                heapq.heappop(scheduled)[1]._scheduled = False  # type: ignore[attr-defined]

        # With callbacks ready, asyncio polls with a timeout of 0, which the virtual selector answers with nothing
        # and no system call: so no poll at all here. Outside I/O is polled when the loop runs out of ready work.
        if not (ready or self._stopping):
            timeout = min(max(0.0, scheduled[0][0] - self._vselector.now), _MAX_WAIT) if scheduled else None
            events = self._vselector.select(timeout)
            if events:
                self._process_events(events)  # type: ignore[attr-defined]

        end = self._vselector.now + self._clock_resolution
        while scheduled and scheduled[0][0] < end:
            timer = heapq.heappop(scheduled)[1]
            timer._scheduled = False  # type: ignore[attr-defined]
            ready.append(timer)

        # Each ready handle runs as its own ``_run`` would run it, written out here to save a Python call per
        # callback: in its context, and a callback that raises is reported to the loop's exception handler.
        for _ in range(len(ready)):
            handle = ready.popleft()
            if handle._cancelled:
                continue
            try:
                handle._context.run(handle._callback, *handle._args)  # type: ignore[attr-defined]
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                self.call_exception_handler(
                    {"message": f"Exception in callback {handle!r}", "exception": exc, "handle": handle}
                )
        handle = None  # type: ignore[assignment]  # as asyncio: no cycle through this frame if a callback raised

    @contextlib.contextmanager
    def outside(self, grace: float = 0.2) -> Iterator[None]:
        """While the loop waits on the outside world (a socket's peer, a thread), give it ``grace`` real seconds
        to answer before the clock jumps to the next timer: an HTTP client in virtual time, storage's thread.
        """
        before = self._vselector.grace
        self._vselector.grace = grace
        try:
            yield
        finally:
            self._vselector.grace = before


def new_event_loop(*, virtual: bool) -> asyncio.AbstractEventLoop:
    """A virtual-time loop, or a real-time loop with sub-millisecond timers and no descriptor limit."""
    if virtual:
        return VirtualEventLoop()
    return asyncio.SelectorEventLoop(PreciseEpollSelector())


def wall_time() -> float:
    """Wall-clock seconds, for progress lines and benchmarks only (never for simulated time)."""
    return time.perf_counter()


def unix_time() -> float:
    """Calendar time (Unix seconds), for history records that outlive the process."""
    return time.time()
