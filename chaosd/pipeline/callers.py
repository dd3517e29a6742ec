"""The callers behind the first attempts: each waits at most its timeout for an attempt, retries with backoff
within a budget, and gives up once it may not retry; a caller whose patience runs out while its attempt still
waits in the queue hangs up (Erlang A's reneging).

An attempt whose caller stopped waiting stays where it is and is still served (wasted work) unless workers drop
expired attempts. Attempts are tasks: every one is offered, accepted or refused, and ends in the ledger once;
the ledger counts first attempts as ``offered`` and the others as ``retried``.
"""

from __future__ import annotations

import itertools
import math
import random
from collections import deque
from collections.abc import Callable

from chaosd.config.settings import ClientsConfig
from chaosd.core.clock import Clock
from chaosd.pipeline.ledger import Ledger
from chaosd.pipeline.task import Caller, Offers, Task
from chaosd.pipeline.tracing import TaskTracer
from chaosd.views import RefuseReason

__all__ = ["BUDGET_WINDOW", "Callers"]

BUDGET_WINDOW = 10  # seconds of first attempts and retries a retry budget compares, in whole seconds
_SLOTS = BUDGET_WINDOW


class Callers:
    """The callers' policy in force, and what it does to attempts: timeouts, retries, reneging, drops."""

    def __init__(
        self,
        cfg: ClientsConfig,
        clock: Clock,
        rng: random.Random,
        ledger: Ledger,
    ) -> None:
        self._clock = clock
        self._rng = rng
        self._ledger = ledger
        self.ids: Callable[[], int] = itertools.count(1).__next__  # the producers share theirs with the callers
        self._pending: deque[Task] = deque()  # accepted attempts in order of their deadlines (offer order)
        self._timer: object = None
        # The budget's window: first attempts and retries per whole second of the last BUDGET_WINDOW, in a ring
        # (bounded however long the run, and a count per attempt rather than a timestamp).
        self._second = 0
        self._firsts = [0] * _SLOTS
        self._retried = [0] * _SLOTS
        # The server's hint to refused callers: how long until the queue has room (the runner supplies it).
        self.retry_after: Callable[[], float] = lambda: 0.0
        self.tracer: TaskTracer | None = None
        self.configure(cfg)

    def configure(self, cfg: ClientsConfig) -> None:
        """Put ``cfg`` in force from now on (a configuration push): attempts already made keep their deadlines."""
        self.cfg = cfg
        self.on = cfg.active
        self.timeout = cfg.timeout
        self.drop_expired = cfg.drop_expired
        self._retry_on = frozenset(cfg.retry_on)
        self._budget = cfg.budget.ratio if cfg.budget is not None else None
        if self.timeout <= 0:
            self._pending.clear()

    # --- what attempts meet -------------------------------------------------------------------------------

    def arrived(self, task: Task, via: Offers) -> None:
        """A first attempt: its caller, who waits for it."""
        task.caller = Caller(self, via, task)
        if self._budget is not None:
            self._count(self._firsts, task.offered_at)

    def accepted(self, task: Task) -> None:
        """The attempt waits in the queue or for room: its caller's clock runs from its offer."""
        if self.timeout <= 0:
            return
        self._pending.append(task)
        if self._timer is None:
            self._timer = self._clock.call_at(task.offered_at + self.timeout, self._expire)

    def refused(self, task: Task, reason: RefuseReason) -> None:
        caller = task.caller
        if caller is None or caller.current is not task:
            return
        caller.current = None
        hint = self.retry_after() if self.cfg.retry_after else 0.0
        self._again(caller, "refused", hint)

    def completed(self, task: Task) -> bool:
        """A completion: True when its caller still waited for it (goodput), False when the work was wasted."""
        caller = task.caller
        if caller is None:
            return True
        if caller.current is not task:
            return False
        caller.current = None
        return True

    def failed(self, task: Task) -> None:
        caller = task.caller
        if caller is None or caller.current is not task:
            return
        caller.current = None
        self._again(caller, "failed", 0.0)

    def expired(self, task: Task) -> bool:
        """Whether ``task``'s caller no longer waits for it (a worker with ``drop_expired`` discards it)."""
        caller = task.caller
        return caller is not None and caller.current is not task

    def reneged(self, task: Task) -> None:
        """``task`` left the queue: its caller's patience ran out, and it hangs up."""
        caller = task.caller
        if caller is not None and caller.current is task:
            caller.current = None
            self._ledger.abandon(caller.measured, "patience")
            self._ledger.give_up(caller.measured)

    # --- the caller's side ----------------------------------------------------------------------------------

    def _expire(self) -> None:
        """Every attempt whose deadline has come: its caller stops waiting (the attempt stays where it is). Attempts
        that already ended leave the books here too, so the next timer is for the oldest one still awaited: about
        one timer per timeout in a healthy pipeline, not one per attempt."""
        self._timer = None
        now = self._clock.now()
        pending = self._pending
        timeout = self.timeout
        while pending:
            task = pending[0]
            caller = task.caller
            if caller is None or caller.current is not task:
                pending.popleft()  # ended, or its caller moved on: nothing to time
            elif task.offered_at + timeout <= now:
                pending.popleft()
                caller.current = None
                self._ledger.abandon(caller.measured, "timeout")
                self._again(caller, "timeout", 0.0)
            else:
                break
        if pending and timeout > 0:
            self._timer = self._clock.call_at(pending[0].offered_at + timeout, self._expire)

    def _again(self, caller: Caller, why: str, hint: float) -> None:
        """After an attempt that did not serve it: a retry after its backoff, or the caller gives up."""
        cfg = self.cfg
        if why not in self._retry_on or caller.retries >= cfg.retries or not self._budget_allows():
            self._ledger.give_up(caller.measured)
            return
        caller.retries += 1
        backoff = cfg.backoff
        delay = min(backoff.max, backoff.base * backoff.factor ** (caller.retries - 1))
        if backoff.jitter > 0 and delay > 0:
            delay = delay * (1.0 - backoff.jitter) + self._rng.uniform(0.0, delay * backoff.jitter)
        now = self._clock.now()
        if self._budget is not None:
            self._count(self._retried, now)
        self._clock.call_at(now + max(delay, hint), self._retry, caller)

    def _budget_allows(self) -> bool:
        ratio = self._budget
        if ratio is None:
            return True
        self._advance(math.floor(self._clock.now()))
        return sum(self._retried) + 1 <= ratio * sum(self._firsts)

    def _count(self, ring: list[int], t: float) -> None:
        second = math.floor(t)
        if second != self._second:
            self._advance(second)
        ring[second % _SLOTS] += 1

    def _advance(self, second: int) -> None:
        """Move the window's end to ``second``: the seconds it leaves behind are emptied for reuse."""
        for past in range(max(self._second + 1, second - _SLOTS + 1), second + 1):
            self._firsts[past % _SLOTS] = 0
            self._retried[past % _SLOTS] = 0
        self._second = max(self._second, second)

    def _retry(self, caller: Caller) -> None:
        t = self._clock.now()
        task = Task(self.ids(), t, caller.measured)
        task.caller = caller
        caller.current = task
        if caller.first_trace is not None and self.tracer is not None:
            task.trace = self.tracer.retried(task, caller.first_trace, caller.retries + 1, t)
        reason = caller.via.offer_retry(task, t)
        if reason is None:
            self.accepted(task)
        else:
            self.refused(task, reason)
