"""The bounded ingress queue: FIFO, with a policy for a full queue and an exact depth integral."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

from chaosd.core.clock import Clock
from chaosd.pipeline.task import Task

__all__ = ["IngressQueue"]


def _ignore(task: Task) -> None:
    pass


class IngressQueue:
    """Bounded FIFO of waiting tasks.

    A worker already waiting receives a task directly (its getter is called back later in the same instant, so
    nobody serves a task the producer has not finished offering), so the queue holds only tasks that wait.
    ``when_full``: ``block`` makes the producer wait for room; ``drop`` and ``reject`` refuse the
    newest task (the caller counts it with the reason). Admission never fills it beyond ``capacity``,
    but a task already accepted is never refused: one put back for re-dispatch, or admitted from a
    producer cancelled while blocked, may wait beyond it.
    """

    def __init__(self, capacity: int, when_full: str, clock: Clock) -> None:
        self.capacity = capacity
        # Admission control's bound on the tasks waiting (never above capacity): an offer past it is shed, whatever
        # ``when_full`` says; a task already accepted is never refused by it.
        self.limit = capacity
        self.when_full = when_full
        self._clock = clock
        self._items: deque[Task] = deque()
        # The same deque, for a producer to count the tasks waiting without a call (read it; never change it).
        self.queued = self._items
        self._getters: deque[Callable[[Task], object]] = deque()  # idle workers, called back with a task
        # The same deque, for a producer to see whether a worker waits without a call (read it; never change it).
        self.idle = self._getters
        # wait(getter): call ``getter`` back with the next task dispatched (a worker with nothing to do). The deque's
        # own ``append``: a worker going idle makes a C call, not a Python one.
        self.wait: Callable[[Callable[[Task], object]], None] = self._getters.append
        self._putters: deque[Callable[[], object]] = deque()  # producers blocked for room, called back once there is
        self.blocked: list[Task] = []
        # No leader, no dispatch: tasks wait and workers are not handed any.
        self.dispatching = True
        # Tasks handed to a waiting worker that has not resumed yet: still ours to account for.
        self._handed: dict[int, Task] = {}
        # Peaks since the last reset_peaks(): tasks waiting (over capacity included), producers blocked.
        self.max_depth = 0
        self.max_blocked = 0
        # Integral of depth over clock time; its slope is the time-average depth.
        self.area = 0.0
        self._t = clock.now()
        # Callers' patience (reneging): a draw per attempt that waits, and who hears of one leaving unserved.
        self.patience: Callable[[], float] | None = None
        self.on_renege: Callable[[Task], object] = _ignore
        self._leaving: dict[int, object] = {}  # task id → the timer of its caller's patience

    @property
    def depth(self) -> int:
        return len(self._items)

    def waiting(self) -> list[Task]:
        """Tasks the queue answers for: waiting, blocked at admission, or handed over but not yet taken."""
        return [*self._items, *self.blocked, *self._handed.values()]

    def head_age(self, now: float) -> float:
        """How long the oldest waiting task has waited (0 when none waits)."""
        return now - self._items[0].accepted_at if self._items else 0.0

    def area_now(self) -> float:
        return self.area + len(self._items) * (self._clock.now() - self._t)

    def reset_peaks(self) -> None:
        """Start the peaks afresh from the present (the end of the warm-up)."""
        self.max_depth = len(self._items)
        self.max_blocked = len(self.blocked)

    def _push(self, task: Task, now: float, *, head: bool = False) -> None:
        items = self._items
        self.area += len(items) * (now - self._t)
        self._t = now
        if head:
            items.appendleft(task)
        else:
            items.append(task)
        self.max_depth = max(self.max_depth, len(items))

    def offer(self, task: Task, now: float) -> bool:
        """Enqueue without waiting at clock time ``now`` (the caller's reading); False when the queue is full."""
        getters = self._getters
        if getters and self.dispatching:
            # _hand, written out: an idle worker is handed most tasks of a lightly loaded pipeline.
            self._handed[task.id] = task
            self._clock.call_at(self._clock.now(), self._deliver, getters.popleft(), task)
            return True
        items = self._items
        n = len(items)
        if n >= self.limit:
            return False
        # _push's work, written out: this runs once per task offered.
        self.area += n * (now - self._t)
        self._t = now
        items.append(task)
        if n >= self.max_depth:
            self.max_depth = n + 1
        if self.patience is not None and task.caller is not None:
            self._leaving[task.id] = self._clock.call_at(now + self.patience(), self._renege, task)
        return True

    def _renege(self, task: Task) -> None:
        """``task``'s caller ran out of patience while it waited: it leaves the queue unserved."""
        del self._leaving[task.id]
        now = self._clock.now()
        items = self._items
        self.area += len(items) * (now - self._t)
        self._t = now
        items.remove(task)
        self.on_renege(task)
        if self._putters:
            self._clock.call_at(now, self._putters.popleft())

    def hand_now(self, task: Task) -> None:
        """Hand ``task``, accepted for the first waiting worker (``idle`` and dispatching when it was), over at once:
        for a callback that accepted it and ends here, where the callback :meth:`offer` schedules for it would run
        next anyway (nothing else due in this instant, ``Clock.due_by``)."""
        self._getters.popleft()(task)

    def hand_later(self, task: Task, now: float) -> None:
        """Hand ``task``, accepted for the first waiting worker, over as :meth:`offer` does: a callback at ``now``,
        after those scheduled before it."""
        self._handed[task.id] = task
        self._clock.call_at(now, self._deliver, self._getters.popleft(), task)

    def _deliver(self, getter: Callable[[Task], object], task: Task) -> None:
        del self._handed[task.id]
        getter(task)

    def forget(self, getter: Callable[[Task], object]) -> None:
        """``getter`` no longer waits (its worker stopped); a task already on its way to it comes back through
        ``requeue``, which its owner calls."""
        if getter in self._getters:
            self._getters.remove(getter)

    def wait_for_room(self, putter: Callable[[], object]) -> None:
        """Call ``putter`` back once a task has left the queue (a producer blocked with ``block``)."""
        self._putters.append(putter)

    def stop_waiting_for_room(self, putter: Callable[[], object]) -> None:
        if putter in self._putters:
            self._putters.remove(putter)

    def requeue(self, task: Task) -> None:
        """Put a task back at the head, over capacity if need be: re-dispatch never refuses."""
        if self.dispatching and self._getters:
            self.hand_later(task, self._clock.now())
            return
        self._push(task, self._clock.now(), head=True)

    def pause_dispatch(self) -> None:
        self.dispatching = False

    def resume_dispatch(self) -> None:
        self.dispatching = True
        now = self._clock.now()
        while self._items and self._getters:
            task = self.get_nowait(now)
            if task is None:
                break
            self.hand_later(task, now)  # a getter waits: get_nowait schedules, it never takes one

    def throttles(self) -> bool:
        """Whether an offer refused now was refused by the admission limit, not by a full queue."""
        return len(self._items) < self.capacity

    async def put(self, task: Task) -> None:
        """Enqueue, waiting for room while the queue is full (the ``block`` policy)."""
        while not self.offer(task, self._clock.now()):
            waiter = asyncio.get_running_loop().create_future()

            def room(waiter: asyncio.Future[None] = waiter) -> None:
                if not waiter.done():
                    waiter.set_result(None)

            self.block(task, room)
            try:
                await waiter
            except asyncio.CancelledError:
                # The producer died holding an accepted task: admit it over capacity rather than lose it.
                self.stop_waiting_for_room(room)
                self.admit_blocked(task)
                raise
            self.unblock(task)

    def block(self, task: Task, putter: Callable[[], object]) -> None:
        """``task``, accepted, waits for room (the ``block`` policy): ``putter`` is called back once a task left."""
        self.blocked.append(task)
        self.max_blocked = max(self.max_blocked, len(self.blocked))
        self.wait_for_room(putter)

    def unblock(self, task: Task) -> None:
        """``task`` waits no more: offered again, it found room."""
        self.blocked.remove(task)

    def admit_blocked(self, task: Task) -> None:
        """A blocked producer stopped holding an accepted task: it waits over capacity rather than be lost."""
        self.blocked.remove(task)
        self._push(task, self._clock.now())

    def get_nowait(self, now: float) -> Task | None:
        """The head task at clock time ``now`` (the caller's reading), or None when none is waiting or dispatched."""
        items = self._items
        if not items or not self.dispatching:
            return None
        self.area += len(items) * (now - self._t)
        self._t = now
        task = items.popleft()
        if self._leaving:
            timer = self._leaving.pop(task.id, None)
            if timer is not None:
                self._clock.cancel(timer)
        if self._putters:
            self._clock.call_at(now, self._putters.popleft())
        return task

    async def get(self) -> Task:
        """The next task, waiting for one (a coroutine's way to :meth:`wait`)."""
        task = self.get_nowait(self._clock.now())
        if task is not None:
            return task
        waiter: asyncio.Future[Task] = asyncio.get_running_loop().create_future()

        def got(task: Task) -> None:
            if waiter.cancelled():
                self.requeue(task)  # handed over as its getter was cancelled: the task goes back, not astray
            else:
                waiter.set_result(task)

        self.wait(got)
        try:
            return await waiter
        finally:
            self.forget(got)
