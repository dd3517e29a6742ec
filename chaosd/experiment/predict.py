"""The retry storm threshold of a configuration: whether a storm, once triggered, can hold, and above which load.

The fluid argument. Callers arrive at λ; the workers serve C = workers / the route's mean service. In the bad
state the queue is so long that every attempt waits past the callers' timeout: every attempt times out, every
caller spends all its attempts A (1 + retries, or 1 + the budget's ratio if lower), and attempts arrive at A·λ.
That state holds only while A·λ > C (the queue keeps growing) and while the queue can hold more than a timeout's
worth of waiting (W > timeout; else the attempts at its head are served before their callers give up). So a
storm needs λ > C / A, the threshold: below it, the storm ends with its trigger; above it (and below C), the same
load has a good state and a bad one, and a trigger moves it from one to the other for good.

It is a necessary condition, not a sufficient one: in a finite queue, noise lets a system near the threshold
escape, so the load a storm really holds at is somewhat higher, and whether it does is a matter of chance.
Backoff does not move the fluid threshold: it delays retries but every timed-out caller still sends them all, so
the attempt rate in the bad state is the same. Patience (callers who hang up from the queue) is not counted: a
caller who leaves before its timeout never retries, so with patience the real threshold lies higher still.
"""

from __future__ import annotations

from dataclasses import dataclass

from chaosd.config.settings import Settings
from chaosd.core.humanize import number, rate, seconds
from chaosd.pipeline.dag import Dag
from chaosd.views import StormPredictionView

__all__ = ["mean_service", "predict"]


def mean_service(settings: Settings) -> float:
    """Seconds of work per task: the expected service of each stage on the route tasks walk with nothing broken
    (what the pipeline computes when built, here without building it)."""
    route = Dag(settings.stages).route() or ()
    by_name = {stage.name: stage for stage in settings.stages}
    return sum(by_name[name].service.expected() for name in route)


@dataclass(frozen=True, slots=True)
class _Bound:
    seconds: float
    why: str  # what sets it, for the reason line


def _wait_bound(settings: Settings, capacity: float) -> _Bound:
    """The longest wait the queue can hold: its capacity's worth at ``capacity`` tasks/s, or, under capacity
    admission with a timeout, ``throttle.max_wait`` × the shorter of the deadline and the timeout if that is lower.
    aimd and none bound nothing below the queue's capacity."""
    full = _Bound(settings.queue.capacity / capacity, f"queue.capacity {settings.queue.capacity} at {rate(capacity)}")
    timeout, deadline = settings.clients.timeout, settings.load.deadline
    if settings.throttle.active != "capacity" or timeout <= 0:
        return full
    horizon = min(deadline, timeout) if deadline > 0 else timeout
    admitted = settings.throttle.max_wait * horizon
    if admitted >= full.seconds:
        return full
    return _Bound(
        admitted, f"capacity admission: throttle.max_wait {number(settings.throttle.max_wait)} × {seconds(horizon)}"
    )


def _attempts(settings: Settings) -> float:
    clients = settings.clients
    if clients.budget is None:
        return 1.0 + clients.retries
    return 1.0 + min(float(clients.retries), clients.budget.ratio)


def _impossible(settings: Settings, attempts: float) -> str | None:
    """Why no storm can hold whatever the load, read from the clients alone; None when one might."""
    clients = settings.clients
    if clients.timeout <= 0:
        return "callers wait forever (clients.timeout = 0): no attempt times out, so none is retried"
    if clients.retries == 0:
        return "callers never retry (clients.retries = 0): attempts = callers, a plain overload at most, never a storm"
    if attempts <= 1:
        return "the retry budget allows no retry (clients.budget.ratio = 0): a plain overload at most, never a storm"
    if "timeout" not in clients.retry_on:
        return (
            f"callers do not retry a timeout (clients.retry_on = {list(clients.retry_on)}): the attempts that "
            "wait too long are not sent again"
        )
    if clients.drop_expired:
        return (
            "workers drop attempts whose caller stopped waiting (clients.drop_expired): expired work costs nothing, "
            "so only a plain overload can hold"
        )
    return None


def predict(settings: Settings) -> StormPredictionView:
    """Whether a retry storm, once triggered, holds under ``settings``, and why: see the module's docstring."""
    service = mean_service(settings)
    workers = settings.workers.count
    capacity = workers / service if service > 0 else None
    attempts = _attempts(settings)
    load = settings.load.rate
    peak = max([load, *(phase.rate for phase in settings.load.phases)])
    timeout = settings.clients.timeout
    bound = _wait_bound(settings, capacity) if capacity is not None else None
    why_not = _impossible(settings, attempts)
    if why_not is None and bound is None:
        why_not = "the route's service takes no time: no queue forms"
    if why_not is None and bound is not None and bound.seconds <= timeout:
        why_not = (
            f"the queue holds at most {seconds(bound.seconds)} of waiting ({bound.why}) ≤ timeout {seconds(timeout)}: "
            "every attempt is served before its caller gives up"
        )
    threshold = capacity / attempts if why_not is None and capacity is not None else None
    view: StormPredictionView = {
        "workers": workers,
        "mean_service_s": service,
        "capacity_per_s": capacity,
        "timeout_s": timeout,
        "wait_bound_s": bound.seconds if bound is not None else None,
        "attempts_per_caller": attempts,
        "threshold_per_s": threshold,
        "load_per_s": load,
        "peak_per_s": peak,
        "storm_possible": threshold is not None,
        "self_sustaining": threshold is not None and load > threshold,
        "reason": f"no storm can hold: {why_not}" if why_not is not None else "",
    }
    if why_not is None and bound is not None and capacity is not None and threshold is not None:
        view["reason"] = _possible_reason(view, capacity, threshold, bound)
    return view


def _possible_reason(view: StormPredictionView, capacity: float, threshold: float, bound: _Bound) -> str:
    attempts, load, peak = view["attempts_per_caller"], view["load_per_s"], view["peak_per_s"]
    offered = attempts * load
    holds = f"the queue holds {seconds(bound.seconds)} > timeout {seconds(view['timeout_s'])}"
    if view["self_sustaining"]:
        line = (
            f"{number(attempts)} attempts per caller × {rate(load)} = {rate(offered)} > capacity {rate(capacity)}, "
            f"and {holds}: a storm, once triggered, holds"
        )
        return line + (
            " (the load alone exceeds capacity: an overload even without retries)" if load > capacity else ""
        )
    line = (
        f"{number(attempts)} attempts per caller × {rate(load)} = {rate(offered)} ≤ capacity {rate(capacity)}: "
        f"a storm ends with its trigger; it would hold above {rate(threshold)}, as {holds}"
    )
    return line + (
        f" (the load's peak, {rate(peak)}, is above it: while the peak lasts, a storm holds)"
        if peak > threshold
        else ""
    )
