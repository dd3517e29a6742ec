"""The clock every component reads, and the two event loops that drive it.

Nothing else in chaosd calls ``time.*`` or ``asyncio.sleep``: components get a :class:`Clock`,
so the same coroutines run in real time (the daemon) and in virtual time (``chaosd run``).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import select
import selectors
import sys
import time
from collections.abc import Awaitable, Iterator, Mapping
from typing import TYPE_CHECKING, Protocol

from chaosd.core._asyncio_internals import Alarm, ClockedSelector, ClockedSelectorLoop, keeps_asyncio_time

if TYPE_CHECKING:
    from _typeshed import FileDescriptorLike

__all__ = [
    "CATCH_UP",
    "Clock",
    "LoopClock",
    "VirtualEventLoop",
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
    """Seconds on the running loop's clock (monotonic; virtual or real).

    ``catch_up``: how much lateness a worker may make up by timing a service from its schedule (0 in virtual time,
    whose sleeps are never late).
    """

    catch_up: float

    def now(self) -> float: ...

    def sleep(self, seconds: float) -> Awaitable[None]: ...

    async def sleep_until(self, when: float) -> None: ...


class LoopClock:
    """Reads the running event loop's clock, so a virtual loop makes it virtual."""

    __slots__ = ("_loop", "catch_up", "now", "virtual")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.virtual = isinstance(loop, VirtualEventLoop)
        self.catch_up = 0.0 if self.virtual else CATCH_UP
        # A bound method stored once: ``now()`` is on the per-task hot path. asyncio's own loops read
        # time.monotonic(), so call it without the method in between (a task reads the clock three times).
        self.now = time.monotonic if keeps_asyncio_time(loop) else loop.time

    def sleep(self, seconds: float) -> Awaitable[None]:
        """What ``asyncio.sleep`` does, in one turn of the loop instead of two (see
        :class:`chaosd.core._asyncio_internals.Alarm`); a task sleeps several times per simulated task. A sleep of 0 or
        less yields once, as asyncio's does."""
        if seconds <= 0.0:
            return asyncio.sleep(0)
        return Alarm(self._loop, self.now() + seconds)

    async def sleep_until(self, when: float) -> None:
        await self.sleep(when - self.now())


class _VirtualSelector(ClockedSelector):
    """Polls real file descriptors without blocking; a wait for a timer advances the clock instead."""

    def __init__(self, start: float) -> None:
        self.now = start
        self.grace = 0.0  # real seconds outside I/O gets before the clock jumps (see VirtualEventLoop.outside)
        self._jumps = 0
        self._real = selectors.DefaultSelector()

    def register(self, fileobj: FileDescriptorLike, events: int, data: object = None) -> selectors.SelectorKey:
        return self._real.register(fileobj, events, data)

    def unregister(self, fileobj: FileDescriptorLike) -> selectors.SelectorKey:
        return self._real.unregister(fileobj)

    def modify(self, fileobj: FileDescriptorLike, events: int, data: object = None) -> selectors.SelectorKey:
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

    def get_map(self) -> Mapping[FileDescriptorLike, selectors.SelectorKey]:
        return self._real.get_map()

    def close(self) -> None:
        self._real.close()


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


class VirtualEventLoop(ClockedSelectorLoop):
    """An asyncio loop whose clock jumps to the next timer whenever nothing is ready."""

    _vselector: _VirtualSelector

    def __init__(self, start: float = 0.0) -> None:
        super().__init__(_VirtualSelector(start))

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
