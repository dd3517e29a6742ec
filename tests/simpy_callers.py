"""A SimPy model of chaosd's callers, written without chaosd's code: Poisson callers who time out, retry and leave,
in front of one FIFO queue of c exponential servers. The second opinion the clients' tests compare chaosd against."""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Literal, cast

import simpy

__all__ = ["COUNTERS", "Result", "simulate", "verdict"]

# Per-second series, each counted in the second the event happens.
COUNTERS = (
    "callers",  # first attempts
    "attempts",  # first attempts and retries, refused ones included
    "retries",
    "accepted",  # attempts the queue took
    "refused",  # attempts a full queue turned away
    "abandoned",  # attempts whose caller stopped waiting (timeout); they stay queued unless dropped
    "completed",  # attempts served to the end
    "goodput",  # completions whose caller still waited
    "wasted",  # completions whose caller had left
    "dropped",  # drop_expired: attempts a server discarded because their caller had left
    "gave_up",  # callers out of retries, out of budget, or failed in a way they do not retry
)
BUDGET_WINDOW = 10.0  # seconds over which a retry budget compares retries with first attempts

Reason = Literal["timeout", "refused"]


@dataclass(frozen=True)
class Result:
    """One run: the per-second series, their totals, and who was still at it when the run ended."""

    duration: float
    series: dict[str, tuple[int, ...]]
    totals: dict[str, int]
    still_waiting: int  # callers waiting on an attempt or in a backoff at the end
    in_system: int  # attempts still queued or in service at the end

    def rate(self, name: str, start: float = 0.0, end: float | None = None) -> float:
        """The mean per-second count of ``name`` over the whole seconds in [start, end)."""
        first, last = math.ceil(start), math.floor(self.duration if end is None else end)
        window = self.series[name][first:last]
        return sum(window) / max(1, len(window))


@dataclass(frozen=True)
class _Policy:
    timeout: float  # 0 = forever
    retries: int
    retry_on: frozenset[str]
    backoff: tuple[float, float, float, float]  # base, factor, max, jitter
    budget: float | None
    drop_expired: bool


class _Attempt:
    __slots__ = ("answer",)

    def __init__(self, env: simpy.Environment) -> None:
        # Triggered once: True by the server that completes it while its caller waits, False when the caller leaves.
        self.answer = env.event()

    def expire(self, _: simpy.Event) -> None:
        if not self.answer.triggered:  # a completion in the same instant came first
            self.answer.succeed(False)


def _window_count(stamps: deque[float], now: float) -> int:
    while stamps and stamps[0] <= now - BUDGET_WINDOW:
        stamps.popleft()
    return len(stamps)


class _Model:
    def __init__(
        self, seed: int, policy: _Policy, servers: int, capacity: int, mean_service: float, duration: float
    ) -> None:
        self.env = simpy.Environment()
        self.policy = policy
        self.capacity = capacity
        self.mean_service = mean_service
        self.bins = math.ceil(duration)
        self.counts = {name: [0] * self.bins for name in COUNTERS}
        self.queue: simpy.Store = simpy.Store(self.env)
        self.arrivals = random.Random(f"callers:{seed}:arrivals")
        self.service = random.Random(f"callers:{seed}:service")
        self.jitter = random.Random(f"callers:{seed}:jitter")
        self.firsts: deque[float] = deque()  # first attempts in the budget window
        self.retried: deque[float] = deque()  # retries the budget admitted in its window
        self.waiting = 0
        self.idle: dict[int, simpy.Event] = {}  # servers waiting for an attempt, and their take
        self.off_until = [0.0] * servers  # a capacity loss stands a server by until then
        self.processes = [self.env.process(self.server(index)) for index in range(servers)]
        self.busy = 0

    def count(self, name: str) -> None:
        self.counts[name][min(int(self.env.now), self.bins - 1)] += 1

    def source(self, pieces: Sequence[tuple[float, float, float]]) -> Generator[simpy.Event, None, None]:
        """Poisson arrivals at a piecewise-constant rate: (start, end, rate) pieces covering the run."""
        for start, end, rate in pieces:
            if self.env.now < start:
                yield self.env.timeout(start - self.env.now)
            while rate > 0:
                gap = self.arrivals.expovariate(rate)
                if self.env.now + gap >= end:  # memoryless: the next piece draws afresh from its start
                    break
                yield self.env.timeout(gap)
                self.env.process(self.caller())

    def caller(self) -> Generator[simpy.Event, None, None]:
        env, policy = self.env, self.policy
        self.count("callers")
        if policy.budget is not None:
            self.firsts.append(env.now)
        self.waiting += 1
        made = 0
        while True:
            if made:
                self.count("retries")
            made += 1
            reason = yield from self.attempt()
            if reason is None:
                break
            if reason not in policy.retry_on or made > policy.retries or not self.budget_allows():
                self.count("gave_up")
                break
            delay = self.backoff(made)
            if delay > 0:
                yield env.timeout(delay)
        self.waiting -= 1

    def attempt(self) -> Generator[simpy.Event, bool, Reason | None]:
        """One attempt, from its offer to its answer: None on success, else why the caller stopped waiting."""
        self.count("attempts")
        if len(self.queue.items) >= self.capacity and not self.queue.get_queue:  # no idle server to take it either
            self.count("refused")
            return "refused"
        self.count("accepted")
        attempt = _Attempt(self.env)
        self.queue.put(attempt)
        if self.policy.timeout > 0:
            self.env.timeout(self.policy.timeout).callbacks.append(attempt.expire)
        served = yield attempt.answer
        if served:
            return None
        self.count("abandoned")
        return "timeout"

    def budget_allows(self) -> bool:
        if self.policy.budget is None:
            return True
        now = self.env.now
        if _window_count(self.retried, now) + 1 > self.policy.budget * _window_count(self.firsts, now):
            return False
        self.retried.append(now)  # a retry counts against the budget from the moment it is granted
        return True

    def backoff(self, retry: int) -> float:
        base, factor, cap, jitter = self.policy.backoff
        if base <= 0:
            return 0.0
        delay = min(cap, base * factor ** (retry - 1))
        return delay * (1 - jitter) + self.jitter.uniform(0, delay * jitter)

    def server(self, index: int) -> Generator[simpy.Event, _Attempt, None]:
        env = self.env
        while True:
            if env.now < self.off_until[index]:
                yield env.timeout(self.off_until[index] - env.now)
            take = self.queue.get()
            self.idle[index] = take
            try:
                attempt = yield take
            except simpy.Interrupt:
                if not take.triggered:
                    take.cancel()
                    del self.idle[index]
                    continue
                attempt = cast(_Attempt, take.value)  # handed over in the same instant as the loss: busy already
            del self.idle[index]
            if self.policy.drop_expired and attempt.answer.triggered:
                self.count("dropped")
                continue
            self.busy += 1
            yield env.timeout(self.service.expovariate(1.0 / self.mean_service))
            self.busy -= 1
            self.count("completed")
            if attempt.answer.triggered:
                self.count("wasted")
            else:
                self.count("goodput")
                attempt.answer.succeed(True)

    def in_system(self) -> int:
        # a server handed an attempt in the run's last instant holds it before it resumes
        handed = sum(1 for take in self.idle.values() if take.triggered)
        return len(self.queue.items) + self.busy + handed

    def lose(self, servers: int, at: float, length: float) -> Generator[simpy.Event, None, None]:
        """From ``at`` only ``servers`` servers take work: the others finish what they hold, then stand by."""
        yield self.env.timeout(at)
        for index in range(servers, len(self.off_until)):
            self.off_until[index] = at + length
            if index in self.idle:
                self.processes[index].interrupt()


def _pieces(lam: float, spike: tuple[float, float, float] | None, duration: float) -> list[tuple[float, float, float]]:
    if spike is None:
        return [(0.0, duration, lam)]
    rate, at, length = spike
    end = min(duration, at + length)
    return [(0.0, at, lam), (at, end, rate), (end, duration, lam)]


def simulate(
    *,
    seed: int,
    lam: float,
    c: int,
    mean_service: float,
    capacity: int,
    timeout: float,
    retries: int,
    retry_on: Sequence[str] = ("timeout", "refused"),
    backoff: tuple[float, float, float, float] = (0.0, 2.0, 1.0, 0.0),
    budget: float | None = None,
    drop_expired: bool = False,
    duration: float,
    spike: tuple[float, float, float] | None = None,
    loss: tuple[int, float, float] | None = None,
) -> Result:
    """Run the callers for ``duration`` simulated seconds. ``spike`` = (rate, at, for) replaces λ for a while;
    ``loss`` = (servers, at, for) leaves only that many servers taking work for a while; ``timeout`` 0 waits forever.
    """
    policy = _Policy(timeout, retries, frozenset(retry_on), backoff, budget, drop_expired)
    model = _Model(seed, policy, c, capacity, mean_service, duration)
    if loss is not None:
        model.env.process(model.lose(*loss))
    model.env.process(model.source(_pieces(lam, spike, duration)))
    model.env.run(until=duration)
    series = {name: tuple(values) for name, values in model.counts.items()}
    totals = {name: sum(values) for name, values in series.items()}
    return Result(duration, series, totals, model.waiting, model.in_system())


def verdict(result: Result, *, after: float, lam: float, tolerance: float = 0.9) -> Literal["recovers", "storm"]:
    """Recovers when the goodput from ``after`` to the end averages at least ``tolerance`` × λ."""
    return "recovers" if result.rate("goodput", after) >= tolerance * lam else "storm"
