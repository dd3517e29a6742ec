"""A task accepted for a waiting worker, handed over at the end of the callback that accepted it: at once only where
the callback the queue's offer schedules would have run next, so an instant's events keep the offer's order."""

from __future__ import annotations

from collections.abc import Callable

from chaosd.core.clock import Clock, LoopClock, VirtualEventLoop
from chaosd.pipeline.queue import IngressQueue
from chaosd.pipeline.task import Task

Hand = Callable[[IngressQueue, Clock, Task], None]


def _order(hand: Hand, *, also_due: bool) -> list[str]:
    """What happens at t = 1 when an arrival's callback hands its task over with ``hand`` (another callback due at
    t = 1 too, scheduled after the arrival's, when ``also_due``)."""
    loop = VirtualEventLoop()
    try:
        engine = loop.engine
        clock = LoopClock(loop)
        queue = IngressQueue(10, "reject", clock)
        order: list[str] = []
        queue.wait(lambda task: order.append(f"worker got {task.id} at {engine.t:g}"))

        def arrival() -> None:
            hand(queue, clock, Task(7, engine.t, True))
            order.append(f"arrival ended, the queue answers for {len(queue.waiting())}")

        engine.call_at(1.0, arrival)
        if also_due:
            engine.call_at(1.0, lambda: order.append("the instant's other callback"))
        engine.call_at(2.0, lambda: order.append("later"))
        engine.run(5.0)
        assert not queue.waiting()  # handed over either way, not kept
        return order
    finally:
        loop.close()


def _offer(queue: IngressQueue, clock: Clock, task: Task) -> None:
    assert queue.offer(task, clock.now())


def _hand_at_end(queue: IngressQueue, clock: Clock, task: Task) -> None:
    """As a producer's arrival does: at once only when nothing else is due by now."""
    assert queue.idle and queue.dispatching
    if clock.due_by(clock.now()):
        queue.hand_later(task, clock.now())
    else:
        queue.hand_now(task)


def test_with_nothing_else_in_its_instant_the_worker_gets_the_task_before_the_arrival_s_callback_ends() -> None:
    assert _order(_hand_at_end, also_due=False) == [
        "worker got 7 at 1",
        "arrival ended, the queue answers for 0",
        "later",
    ]
    # Negative control: the offer's hand-over is a callback of its own, after the arrival's (the same events in the
    # same order otherwise: nothing ran between the two).
    assert _order(_offer, also_due=False) == [
        "arrival ended, the queue answers for 1",
        "worker got 7 at 1",
        "later",
    ]


def test_a_callback_already_due_in_the_instant_runs_before_the_worker_gets_the_task_as_after_an_offer() -> None:
    expected = [
        "arrival ended, the queue answers for 1",
        "the instant's other callback",
        "worker got 7 at 1",
        "later",
    ]
    assert _order(_hand_at_end, also_due=True) == expected
    assert _order(_offer, also_due=True) == expected
