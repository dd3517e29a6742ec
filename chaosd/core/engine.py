"""Simulated time: plain callbacks on one heap, run where an asyncio loop would wait for I/O.

A simulated step (an arrival, the end of a service, a timeout) is a callback at a time, not a coroutine step: the
heap holds ``[when, seq, callback, args]`` entries, ordered by time and, among equal times, by when they were
scheduled (``seq``), so a run is the same for the same seed. SimPy's core is the model for that order; Ciw's, for
keeping a step's work to the arithmetic of the model itself.

:class:`EngineSelector` hands the heap to an asyncio loop through the one door the loop's contract opens for it:
the loop asks its selector to wait at most until its own next timer, and the selector runs the heap up to then
instead of sleeping. Coroutines (a scenario's plan, the experiment's own waits) run between, as asyncio runs them;
a callback that makes asyncio work ready (``call_soon``, a future's result) hands the turn back at once.
"""

from __future__ import annotations

import heapq
import itertools
import math
import selectors
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    from _typeshed import FileDescriptorLike

__all__ = ["POLL_EVERY", "POLL_WALL", "Engine", "EngineSelector", "Timer"]

# A heap entry, as call_at returns it: [when, seq, callback or None once fired or cancelled, args].
Timer: TypeAlias = list[Any]

# Outside I/O (a thread's callback, a socket, a signal) is polled at every jump of the clock and, in a busy run, once
# per POLL_EVERY simulated seconds; with a wall clock to pace them, about once per POLL_WALL real seconds instead:
# the simulated stretch between polls doubles while they come sooner (up to _POLL_MOST), halves when they come later
# (down to POLL_EVERY). A system call per step would be a tenth of the run; one per POLL_EVERY, a twentieth of it.
POLL_EVERY = 0.01
POLL_WALL = 0.001
_POLL_MOST = 1.0

# Past this many entries, the cancelled share at which the heap is rebuilt without them (as asyncio does): a
# cancelled entry stays in the heap until its time otherwise.
_REBUILD_AT = 100

_heappush = heapq.heappush
_heappop = heapq.heappop


class Engine:
    """The heap and the simulated clock ``t``. ``interrupted`` (asyncio has work ready) ends the current :meth:`run`
    with the instant it was set in: coroutines run between instants, never inside one."""

    __slots__ = ("_cancelled", "_heap", "_seq", "interrupted", "on_error", "t")

    def __init__(self, start: float = 0.0) -> None:
        self.t = start
        self._heap: list[Timer] = []
        self._seq = itertools.count()
        self._cancelled = 0
        self.interrupted = False
        # Where an exception a callback raised goes (the run goes on without that callback's part); None: raised
        # out of ``run``.
        self.on_error: Callable[[Exception], object] | None = None

    def call_at(self, when: float, callback: Callable[..., object], *args: object) -> Timer:
        """Run ``callback(*args)`` at simulated time ``when`` (at once, in order, if that is past)."""
        entry = [when, next(self._seq), callback, args]
        _heappush(self._heap, entry)
        return entry

    def cancel(self, timer: Timer) -> None:
        """Keep a scheduled callback from running (no-op once it ran or was cancelled)."""
        if timer[2] is None:
            return
        timer[2] = None
        self._cancelled += 1
        heap = self._heap
        if self._cancelled > _REBUILD_AT and self._cancelled * 2 > len(heap):
            heap[:] = [entry for entry in heap if entry[2] is not None]
            heapq.heapify(heap)
            self._cancelled = 0

    def due_by(self, when: float) -> bool:
        """Whether a callback is scheduled at or before ``when`` (a cancelled one too, while it is in the heap)."""
        heap = self._heap
        return bool(heap) and heap[0][0] <= when

    def next_at(self) -> float:
        """When the next callback is due (inf when none is)."""
        heap = self._heap
        while heap and heap[0][2] is None:
            _heappop(heap)
            self._cancelled -= 1
        return heap[0][0] if heap else math.inf

    def __len__(self) -> int:
        return len(self._heap) - self._cancelled

    def run(self, stop: float) -> None:
        """Run every callback due by ``stop`` (inclusive), in order, moving the clock to each; once ``interrupted``,
        return at the end of the current instant. Every simulated step passes through this loop: bare heap work."""
        heap = self._heap
        pop = _heappop
        while heap:
            entry = pop(heap)
            when, _, callback, args = entry
            if when > stop:
                _heappush(heap, entry)  # back in its place (its time and seq are unique): once per run, not per step
                return
            if callback is None:
                self._cancelled -= 1
                continue
            entry[2] = None
            self.t = when
            try:
                callback(*args)
            except Exception as exc:
                if self.on_error is None:
                    raise
                self.on_error(exc)
            if self.interrupted:
                stop = when  # the rest of this instant first: coroutines woken in it see all of it


class EngineSelector(selectors.BaseSelector):
    """An asyncio loop's selector that runs the engine where the loop would wait, and polls real descriptors
    without blocking (``grace``: real seconds outside I/O gets before each jump of the clock)."""

    def __init__(self, engine: Engine, wall: Callable[[], float] | None = None) -> None:
        self.engine = engine
        self.grace = 0.0
        self._poll_at = engine.t
        self._inner = selectors.DefaultSelector()
        # ``wall``: real seconds, to pace the polls of a busy run (None: one per POLL_EVERY simulated seconds).
        self._wall = wall
        self._polled = wall() if wall is not None else 0.0
        self._poll_every = POLL_EVERY

    def register(self, fileobj: FileDescriptorLike, events: int, data: object = None) -> selectors.SelectorKey:
        return self._inner.register(fileobj, events, data)

    def unregister(self, fileobj: FileDescriptorLike) -> selectors.SelectorKey:
        return self._inner.unregister(fileobj)

    def modify(self, fileobj: FileDescriptorLike, events: int, data: object = None) -> selectors.SelectorKey:
        return self._inner.modify(fileobj, events, data)

    def get_map(self) -> Mapping[FileDescriptorLike, selectors.SelectorKey]:
        return self._inner.get_map()

    def close(self) -> None:
        self._inner.close()

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        """Run the engine up to asyncio's next timer (``timeout`` from now; None: no timer; the engine's callbacks at
        that time first), until a callback made asyncio work ready, or until outside I/O is ready; the clock then
        reads the time reached."""
        if timeout == 0:
            return []  # asyncio has callbacks ready: they run first, without a system call
        engine = self.engine
        engine.interrupted = False  # asyncio has run what was ready and set its timers: the heap's turn
        limit = math.inf if timeout is None else engine.t + timeout
        while True:
            # With a grace, outside I/O is polled before every jump of the clock: the instant now first, then the
            # poll, then the next instant. Without one, the clock runs to the next poll mark.
            engine.run(engine.t if self.grace else min(limit, self._poll_at))
            if engine.interrupted:
                engine.interrupted = False
                return []
            events = self._inner.select(self.grace)  # the poll mark, or the end of this stretch, was reached
            if events:
                return events
            nxt = engine.next_at()
            if nxt == limit == math.inf:
                return self._inner.select(None)  # nothing scheduled anywhere: only the outside can wake us
            if nxt > limit:
                engine.t = max(engine.t, limit)
                return []
            if self.grace:
                engine.run(nxt)  # the jump, with nothing from outside in the grace
                if engine.interrupted:
                    engine.interrupted = False
                    return []
                continue
            self._poll_at = max(engine.t, nxt) + self._pace()

    def _pace(self) -> float:
        """The simulated stretch to the next poll of a busy run, paced by the real time since the last one."""
        wall = self._wall
        if wall is None:
            return POLL_EVERY
        now = wall()
        took, self._polled = now - self._polled, now
        if took < POLL_WALL:
            self._poll_every = min(self._poll_every * 2.0, _POLL_MOST)
        elif took > 2.0 * POLL_WALL:
            self._poll_every = max(self._poll_every * 0.5, POLL_EVERY)
        return self._poll_every
