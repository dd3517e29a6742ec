"""Stages a task walks through: service-time draws, timeouts, retries with backoff, failures."""

from __future__ import annotations

import math
import random
from collections.abc import Callable

from chaosd.clock import Clock
from chaosd.config import BackoffConfig, ServiceConfig, StageConfig
from chaosd.pipeline.ledger import Ledger
from chaosd.pipeline.queue import IngressQueue

__all__ = ["StageRunner", "backoff_delay", "make_sampler"]


def make_sampler(service: ServiceConfig, rng: random.Random) -> Callable[[], float]:
    """A function drawing one service time (seconds) from the configured distribution."""
    mean = service.mean
    if service.distribution == "exponential":
        lambd = 1.0 / mean
        expovariate = rng.expovariate
        return lambda: expovariate(lambd)
    if service.distribution == "constant":
        return lambda: mean
    if service.distribution == "lognormal":
        sigma = service.sigma
        mu = math.log(mean) - sigma * sigma / 2  # keeps the configured mean
        lognormvariate = rng.lognormvariate
        return lambda: lognormvariate(mu, sigma)
    low, high = service.low or 0.0, service.high or 0.0
    uniform = rng.uniform
    return lambda: uniform(low, high)


def backoff_delay(cfg: BackoffConfig, attempt: int, rng: random.Random) -> float:
    """Exponential backoff before retry number ``attempt`` (1-based), capped, with optional jitter."""
    delay = min(cfg.max, cfg.base * cfg.factor ** (attempt - 1))
    if cfg.jitter:
        delay = delay * (1 - cfg.jitter) + rng.uniform(0.0, delay * cfg.jitter)
    return delay


class StageRunner:
    """Runs one stage of a task on the worker that holds it; returns a failure reason or None.

    A failed attempt hangs until the stage timeout when one is set (reason ``timeout``, the way an
    overloaded dependency fails) and otherwise errors after its service time (reason ``error``).
    An attempt whose service time exceeds the timeout is cut at the timeout.
    """

    def __init__(
        self,
        cfg: StageConfig,
        rng: random.Random,
        queue: IngressQueue,
        ledger: Ledger,
        clock: Clock,
    ) -> None:
        self.name = cfg.name
        self.cfg = cfg
        self._rng = rng
        self._sample = make_sampler(cfg.service, rng)
        self._queue = queue
        self._ledger = ledger
        self._sleep = clock.sleep
        self._pressure = cfg.pressure.enabled
        # No way to fail: the worker may draw the service time and wait for it inline.
        self.simple = cfg.timeout == 0 and cfg.failure_probability == 0 and not self._pressure
        self.sample = self._sample

    def failure_probability(self) -> float:
        p = self.cfg.failure_probability
        if self._pressure:
            pressure = self.cfg.pressure
            saturation = self._queue.depth / self._queue.capacity
            if saturation > pressure.threshold:
                extra = min(1.0, (saturation - pressure.threshold) / (1 - pressure.threshold))
                extra *= pressure.max_probability
                p = p + extra - p * extra
        return p

    async def run(self) -> str | None:
        cfg = self.cfg
        timeout = cfg.timeout
        sleep = self._sleep
        attempt = 0
        while True:
            service = self._sample()
            p = self.failure_probability() if self._pressure or cfg.failure_probability else 0.0
            failed = p > 0.0 and self._rng.random() < p
            if timeout > 0.0 and (failed or service > timeout):
                await sleep(timeout)
                reason = "timeout"
            elif failed:
                await sleep(service)
                reason = "error"
            else:
                if service > 0.0:
                    await sleep(service)
                return None
            attempt += 1
            if attempt > cfg.retries:
                return reason
            self._ledger.retries += 1
            await sleep(backoff_delay(cfg.backoff, attempt, self._rng))
