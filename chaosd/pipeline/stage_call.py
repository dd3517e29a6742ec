"""One call of a stage that can go wrong, as callbacks: its attempts, their backoffs, its breaker and books.

The same attempts and books as :meth:`StageRunner.run <chaosd.pipeline.stages.StageRunner.run>` (both are
:meth:`~chaosd.pipeline.stages.StageRunner.attempt` and :meth:`~chaosd.pipeline.stages.StageRunner.attempted`),
each wait a timer on the clock instead of a coroutine's sleep. A ``python`` stage awaits the user's handler, so its
call runs as a coroutine, and the result comes back through the same ``done``.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable
from typing import Final

from chaosd.core.clock import Clock
from chaosd.pipeline.stages import Degraded, StageRunner
from chaosd.pipeline.task import Task
from chaosd.views import FailReason

__all__ = ["PENDING", "Pending", "StageCall", "StageOutcome"]

StageOutcome = FailReason | Degraded | None


class Pending(enum.Enum):
    """What :meth:`StageCall.start` returns when the call goes on in callbacks (its outcome comes to ``done``)."""

    PENDING = "pending"


PENDING: Final = Pending.PENDING


class StageCall:
    """A worker's current stage call (one at a time): ``start`` it, and ``done`` is called with its outcome,
    unless ``cancel`` came first."""

    __slots__ = (
        "_attempts",
        "_begun",
        "_child",
        "_clock",
        "_done",
        "_ended",
        "_slow",
        "_stage",
        "_starting",
        "_timer",
        "_use_fallback",
    )

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._stage: StageRunner | None = None
        self._done: Callable[[StageOutcome], object] | None = None
        self._slow = 1.0
        self._attempts = 0
        self._use_fallback = False
        self._begun = 0.0
        self._timer: object = None
        self._child: asyncio.Task[None] | None = None
        self._starting = False
        self._ended: StageOutcome | Pending = PENDING

    def start(self, stage: StageRunner, slow: float, task: Task, done: Callable[[StageOutcome], object]) -> Pending:
        """Call a ``python`` stage: the user's handler runs as a coroutine, and ``done`` gets the call's outcome."""
        assert stage.handler is not None, "chaosd's own kinds begin with their first attempt: after_first"
        self._stage, self._done, self._slow = stage, done, slow
        self._child = child = asyncio.ensure_future(self._handled(stage, slow, task))
        stage.calls.add(child)
        child.add_done_callback(stage.calls.discard)
        return PENDING

    async def _handled(self, stage: StageRunner, slow: float, task: Task) -> None:
        # The outcome goes on in the step that reached it: with a turn of the loop between (a done callback), a
        # stop in that turn would lose a call the stage had already counted (a timeout, a success).
        outcome = await stage.run(slow, task)
        self._child = None
        self._finish(outcome)

    def after_first(
        self,
        stage: StageRunner,
        slow: float,
        done: Callable[[StageOutcome], object],
        reason: FailReason | None,
        begun: float,
        use_fallback: bool,
    ) -> StageOutcome | Pending:
        """The call whose first attempt (begun at ``begun``, ended now with ``reason``) its caller made itself:
        its books, and its retries if it failed. Its outcome when it ended at once (no retry took time), else
        :data:`PENDING`: ``done`` gets it."""
        self._stage, self._done, self._slow = stage, done, slow
        self._attempts = 0
        self._use_fallback = use_fallback
        self._begun = begun
        self._starting = True
        self._ended = PENDING
        try:
            self._tried(reason)
        finally:
            self._starting = False
        ended, self._ended = self._ended, PENDING
        return ended

    def cancel(self) -> None:
        """The worker stopped mid-call: nothing more of this call happens."""
        self._done = None
        if self._timer is not None:
            self._clock.cancel(self._timer)
            self._timer = None
        if self._child is not None:
            self._child.cancel()
            self._child = None

    def _try(self) -> None:
        self._timer = None
        stage = self._stage
        assert stage is not None  # started
        clock = self._clock
        self._begun = begun = clock.now()
        delay, reason = stage.attempt(self._slow, stage.cfg.timeout, self._use_fallback)
        if delay > 0.0:
            self._timer = clock.call_at(begun + delay, self._tried, reason)
        else:
            self._tried(reason)

    def _tried(self, reason: FailReason | None) -> None:
        self._timer = None
        stage = self._stage
        assert stage is not None  # started
        clock = self._clock
        self._attempts += 1
        outcome, self._use_fallback, backoff = stage.attempted(
            reason, clock.now() - self._begun, self._use_fallback, self._attempts
        )
        if backoff is None:
            self._finish(outcome)
        elif backoff > 0.0:
            self._timer = clock.call_at(clock.now() + backoff, self._try)
        else:
            self._try()

    def _finish(self, outcome: StageOutcome) -> None:
        done, self._done, self._stage = self._done, None, None
        if self._starting:
            self._ended = outcome  # start hands it back itself
        elif done is not None:
            done(outcome)
