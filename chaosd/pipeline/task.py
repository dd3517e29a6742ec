"""A unit of work flowing through the pipeline."""

from __future__ import annotations

from typing import Protocol

from chaosd.views import RefuseReason

__all__ = ["Caller", "CallerPolicy", "Offers", "Task"]


class Task:
    """One task; times are clock seconds. Mutable: it moves through the pipeline."""

    __slots__ = ("accepted_at", "attempts", "caller", "id", "measured", "offered_at", "trace")

    def __init__(self, task_id: int, offered_at: float, measured: bool) -> None:
        self.id = task_id
        self.offered_at = offered_at
        self.accepted_at = offered_at
        self.measured = measured
        self.attempts = 0
        self.trace: object | None = None  # the producer span's context, for sampled tasks
        self.caller: Caller | None = None  # who waits for this attempt, when callers have a policy


class CallerPolicy(Protocol):
    """What an attempt's end asks of the callers' policy (chaosd.pipeline.callers.Callers)."""

    drop_expired: bool

    def completed(self, task: Task) -> bool:
        """A completion: True when its caller still waited for it, False when the work was wasted."""
        ...

    def failed(self, task: Task) -> None: ...


class Offers(Protocol):
    """Where a caller's retry is offered: the producer that made its first attempt."""

    def offer_retry(self, task: Task, t: float) -> RefuseReason | None:
        """Offer ``task`` at ``t``: None when accepted, else why it was refused."""
        ...


class Caller:
    """One caller: the attempt it waits for (None while it backs off, and once it is done)."""

    __slots__ = ("current", "first_trace", "measured", "owner", "retries", "via")

    def __init__(self, owner: CallerPolicy, via: Offers, first: Task) -> None:
        self.owner = owner
        self.via = via
        self.current: Task | None = first
        self.measured = first.measured
        self.retries = 0
        self.first_trace = first.trace  # a sampled caller's retries are traced too, linked to its first attempt
