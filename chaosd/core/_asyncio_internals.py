"""Everything chaosd takes from asyncio beyond its public API, in this one module.

Each assumption is named below; ``tests/unit/core/test_asyncio_contract.py`` checks each against the running
interpreter.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import heapq
import selectors
from collections.abc import Callable, Generator
from typing import TypeVarTuple, Unpack

__all__ = [
    "MAXIMUM_SELECT_TIMEOUT",
    "MIN_CANCELLED_TIMER_HANDLES_FRACTION",
    "MIN_SCHEDULED_TIMER_HANDLES",
    "TIMER_FIELDS",
    "Alarm",
    "ClockedSelector",
    "ClockedSelectorLoop",
    "keeps_asyncio_time",
]

# The assumptions, each checked by the test named after it in tests/unit/core/test_asyncio_contract.py:
#   timer_fields       a TimerHandle's whole state is Handle's and TimerHandle's slots, and its class takes
#                      object.__new__: one made that way with those slots set is what TimerHandle() makes
#   timer_order        TimerHandles order by ``_when`` alone (equal times: neither is less), so a heap of
#                      (when, handle) pairs pops in the order of asyncio's heap of handles
#   timer_cancel       TimerHandle.cancel() sets ``_cancelled`` and counts a ``_scheduled`` timer in the loop's
#                      ``_timer_cancelled_count`` (through ``_timer_handle_cancelled``)
#   heap_owners        in asyncio, only BaseEventLoop.__init__, call_at, close and _run_once touch ``_scheduled``,
#                      so a heap of pairs is safe once call_at and _run_once are chaosd's
#   loop_state         a selector loop keeps ``_scheduled`` (list), ``_ready`` (deque), ``_timer_cancelled_count``
#                      (int), ``_stopping``, ``_closed`` (bool) and ``_clock_resolution`` (float)
#   one_poll           only _run_once polls the selector, hands the events to ``_process_events(event_list)`` and
#                      reads ``_clock_resolution``: a poll is where virtual time may jump
#   run_forever_turns  run_forever (hence run_until_complete) turns the loop by calling ``self._run_once()``
#   handle_run         a Handle runs as ``_context.run(_callback, *_args)``, skipped once ``_cancelled``
#   iteration_limits   asyncio.base_events' iteration constants have the values below
#   task_wakeup        a Task awaiting an object that sets ``_asyncio_future_blocking`` calls its get_loop() (or,
#                      without one, reads its ``_loop``), then add_done_callback(wakeup, context=...), result() when
#                      woken, and cancel(msg=...) if cancelled meanwhile; the wake-up takes the awaited object as
#                      its one argument
#   isfuture_by_class  asyncio.isfuture asks the class for ``_asyncio_future_blocking``, not the instance
#   monotonic_time     BaseEventLoop.time() is time.monotonic()

# asyncio's limits (base_events), kept as values so a run is the same on every Python chaosd supports: past this
# many timers, the cancelled share that makes the loop rebuild its heap; and the longest wait for a timer.
MIN_SCHEDULED_TIMER_HANDLES = 100
MIN_CANCELLED_TIMER_HANDLES_FRACTION = 0.5
MAXIMUM_SELECT_TIMEOUT = 24 * 3600

# Every slot of a TimerHandle (Handle's and its own but __weakref__), as ClockedSelectorLoop.call_at sets them.
TIMER_FIELDS = (
    "_context",
    "_loop",
    "_callback",
    "_args",
    "_cancelled",
    "_repr",
    "_source_traceback",
    "_when",
    "_scheduled",
)

_TimerHandle = asyncio.TimerHandle
_new_timer = object.__new__  # a TimerHandle without running its constructor (see ClockedSelectorLoop.call_at)
_asyncio_time = asyncio.BaseEventLoop.time
_Ts = TypeVarTuple("_Ts")


def keeps_asyncio_time(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether ``loop.time()`` is asyncio's own, which returns ``time.monotonic()``."""
    return type(loop).time is _asyncio_time


class Alarm:
    """A sleep until ``when`` whose timer resumes the sleeping task itself.

    Sleeping on a future takes two turns of the loop: the timer sets the future's result, which schedules the
    task's wake-up for the next turn. A task hands its wake-up to what it awaits (``add_done_callback``), and an
    alarm hands it to the timer, so the task runs in the timer's own turn. asyncio's tasks accept any object that
    behaves as a future this far: ``_asyncio_future_blocking``, ``_loop`` (read where there is no ``get_loop``:
    no Python call), ``add_done_callback``, ``result`` and ``cancel``. A cancelled sleeper (a killed agent, a
    stage's timeout) is woken at once, and raises ``CancelledError`` where it awaited, as with a future.
    """

    # No __slots__: a slot would make ``_asyncio_future_blocking`` a class attribute, and asyncio would then take an
    # alarm for a future (``asyncio.isfuture``) and call it back itself in ``gather`` or ``wait_for``; without one,
    # those wrap it in a task like any awaitable. Class defaults: an alarm is made per sleep, and sets only these.
    _handle: asyncio.TimerHandle | None = None
    _wakeup: Callable[[Alarm], object] | None = None  # the task's wake-up, and its context: a cancel calls it at once
    _context: contextvars.Context | None = None
    _cancelled: asyncio.CancelledError | None = None

    def __init__(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        self._loop = loop
        self._when: float | None = when  # None once handed to the task
        self._asyncio_future_blocking = True  # set at once: the alarm is yielded exactly once

    def __await__(self) -> Generator[Alarm, None, None]:
        # A generator: the task's two resumptions (the yield, then the return) run in C, where an iterator's
        # ``__next__`` would be two Python calls and a StopIteration raised in Python. Awaited again once over, it
        # returns at once.
        if self._when is not None:
            yield self

    def add_done_callback(
        self, wakeup: Callable[[Alarm], object], *, context: contextvars.Context | None = None
    ) -> None:
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
        handle, wakeup = self._handle, self._wakeup  # both set together (add_done_callback), cleared together
        if handle is None or wakeup is None or self._cancelled is not None:
            return False
        handle.cancel()
        self._cancelled = asyncio.CancelledError() if msg is None else asyncio.CancelledError(msg)
        self._loop.call_soon(wakeup, self, context=self._context)
        return True


class ClockedSelector(selectors.BaseSelector):
    """A selector that holds its loop's clock: ``now`` is the loop's time, and a ``select`` may move it."""

    now: float


class ClockedSelectorLoop(asyncio.SelectorEventLoop):
    """asyncio's selector loop, its time read from its selector, its timers in a heap of (when, handle) pairs.

    The heap holds pairs, not handles: asyncio orders its heap with TimerHandle.__lt__, a Python method (and an
    isinstance) per comparison, several per timer, and a simulated task sets two or more timers. A pair compares its
    float in C, and where two times are equal it falls back to the handles, which answer "not less", as
    TimerHandle.__lt__ does: every comparison gives asyncio's answer, so timers fire in the same order.
    """

    _scheduled: list[tuple[float, asyncio.TimerHandle]]
    _ready: collections.deque[asyncio.Handle]
    _timer_cancelled_count: int
    _stopping: bool
    _closed: bool
    _clock_resolution: float

    def __init__(self, selector: ClockedSelector) -> None:
        self._vselector = selector
        super().__init__(selector)
        # Timers fire when due, not up to a real clock's resolution early.
        self._clock_resolution = 1e-9

    def time(self) -> float:
        return self._vselector.now

    def call_at(
        self,
        when: float,
        callback: Callable[[Unpack[_Ts]], object],
        *args: *_Ts,
        context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle:
        if when is None:
            raise TypeError("when cannot be None")
        if self._closed:
            raise RuntimeError("Event loop is closed")
        # asyncio's TimerHandle, its fields set here: its constructor is three Python calls (its own, Handle's and
        # the loop's get_debug), and a simulated task sets two or more timers. The one difference: in debug mode a
        # timer made here keeps no traceback of where it was made.
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

    def _without_cancelled(
        self, scheduled: list[tuple[float, asyncio.TimerHandle]]
    ) -> list[tuple[float, asyncio.TimerHandle]]:
        """The heap without its cancelled timers, as asyncio rebuilds it once they are most of it (rare: a call)."""
        kept = []
        for entry in scheduled:
            if entry[1]._cancelled:
                entry[1]._scheduled = False  # type: ignore[attr-defined]
            else:
                kept.append(entry)
        heapq.heapify(kept)
        self._scheduled = kept
        self._timer_cancelled_count = 0
        return kept

    def _run_once(self) -> None:
        """asyncio's loop iteration on the heap of pairs (no debug-mode checks of slow callbacks), repeated until the
        loop is stopping: run_forever calls it, then stops once ``_stopping`` is set, so iterating here until then
        runs the same iterations with one Python call per run instead of one per iteration (a simulated task takes
        two or more)."""
        ready = self._ready
        vselector = self._vselector
        select = vselector.select
        resolution = self._clock_resolution
        process_events = self._process_events  # type: ignore[attr-defined]
        heappop = heapq.heappop
        while True:
            scheduled = self._scheduled
            count = len(scheduled)
            if (
                count > MIN_SCHEDULED_TIMER_HANDLES
                and self._timer_cancelled_count / count > MIN_CANCELLED_TIMER_HANDLES_FRACTION
            ):
                scheduled = self._without_cancelled(scheduled)
            else:
                while scheduled and scheduled[0][1]._cancelled:
                    self._timer_cancelled_count -= 1
                    heappop(scheduled)[1]._scheduled = False  # type: ignore[attr-defined]

            # With callbacks ready, asyncio polls with a timeout of 0, which the virtual selector answers with
            # nothing and no system call: so no poll at all here. Outside I/O is polled when the loop runs out of
            # ready work.
            if not (ready or self._stopping):
                timeout = min(max(0.0, scheduled[0][0] - vselector.now), MAXIMUM_SELECT_TIMEOUT) if scheduled else None
                events = select(timeout)
                if events:
                    process_events(events)

            end = vselector.now + resolution
            while scheduled and scheduled[0][0] < end:
                timer = heappop(scheduled)[1]
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
            if self._stopping:
                return
