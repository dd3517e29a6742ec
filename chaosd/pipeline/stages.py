"""Stages a task walks through: service-time draws, timeouts, retries, and each kind's own recovery.

tool → a hung call is cut at the timeout, retried, and finally degraded; llm → retried on the
fallback model; memory → checksums catch corruption, the entry is restored from the checkpoint;
mcp → while disconnected calls fail fast and a reconnect loop retries with backoff; python → the
user's handler is awaited, with the same timeout, retries, breaker and faults around it.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import random
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Final, Literal, Protocol

from chaosd.config.handlers import Handler, HandlerError, StageContext, load_handler
from chaosd.config.settings import ServiceConfig, StageConfig
from chaosd.core.clock import Clock
from chaosd.core.errors import ConfigError
from chaosd.core.histogram import LogHistogram
from chaosd.faults.proxy import NO_FAULTS, DependencyFaults, FaultProxy
from chaosd.pipeline.backoff import backoff_delay
from chaosd.pipeline.ledger import Ledger
from chaosd.pipeline.queue import IngressQueue
from chaosd.pipeline.resources import McpConnection, MemoryStore
from chaosd.pipeline.task import Task
from chaosd.views import BreakerState, FailReason

__all__ = ["DEGRADED", "Degraded", "StageRunner", "StageStats", "make_sampler"]

# What ``StageRunner.run`` returns when the stage gave up but the task goes on without its result.
Degraded = Literal["degraded"]
DEGRADED: Final = "degraded"

# A tool call hanging under a tool_timeout fault, when the stage sets no timeout of its own.
DEFAULT_HANG_TIMEOUT = 0.1

_log = logging.getLogger("chaosd")
_ln = math.log


def make_sampler(service: ServiceConfig, rng: random.Random) -> Callable[[], float]:
    """A function drawing one service time (seconds) from the configured distribution."""
    mean = service.mean
    if service.distribution == "exponential":
        lambd = 1.0 / mean
        # random.Random.expovariate's own formula (the same on every Python chaosd supports), written out: one
        # Python call per draw instead of two, and the same draws.
        draw, log = rng.random, math.log
        return lambda: -log(1.0 - draw()) / lambd
    if service.distribution == "constant":
        return itertools.repeat(mean).__next__  # the same value at each call, from C: no Python frame per draw
    if service.distribution == "lognormal":
        sigma = service.sigma
        mu = math.log(mean) - sigma * sigma / 2  # keeps the configured mean
        lognormvariate = rng.lognormvariate
        return lambda: lognormvariate(mu, sigma)
    low, high = service.low or 0.0, service.high or 0.0
    uniform = rng.uniform
    return lambda: uniform(low, high)


class StageStats:
    """What one stage did, attempt by attempt; every figure only grows (readers take differences).

    Every attempt adds its duration to ``latency`` (the fast path of a stage that cannot fail too, with its
    service time), so the attempts are ``latency.count`` and the successful ones are the attempts less
    ``failures``: one C call per attempt on the hot path, nothing more.
    """

    __slots__ = ("breaker_closed", "breaker_opened", "failures", "latency", "retries")

    def __init__(self) -> None:
        self.latency = LogHistogram()  # seconds per attempt
        self.failures: dict[FailReason, int] = {}  # failed attempts by reason
        self.retries = 0  # attempts that were retries of a failed one
        self.breaker_opened = 0  # closed or half-open -> open
        self.breaker_closed = 0  # open or half-open -> closed

    @property
    def attempts(self) -> int:
        return self.latency.count

    def failed(self, reason: FailReason) -> None:
        self.failures[reason] = self.failures.get(reason, 0) + 1


class Backlog(Protocol):
    """What a stage's pressure reads: the tasks waiting, and the capacity admission fills up to."""

    @property
    def depth(self) -> int: ...

    @property
    def capacity(self) -> int: ...


class StageRunner:
    """Runs one stage of a task on the worker that holds it; returns a failure reason or None.

    A failed attempt hangs until the stage timeout when one is set (reason ``timeout``, the way an
    overloaded dependency fails) and otherwise errors after its service time (reason ``error``).
    Faults set the flags below; ``simple`` is true while nothing can go wrong, so the worker may
    serve the stage inline.
    """

    def __init__(
        self,
        cfg: StageConfig,
        rng: random.Random,
        queue: IngressQueue,
        ledger: Ledger,
        clock: Clock,
        *,
        memory: MemoryStore | None = None,
        mcp: McpConnection | None = None,
        dependencies: Mapping[str, str] | None = None,
    ) -> None:
        self.name = cfg.name
        self.kind = cfg.kind
        self.cfg = cfg
        self._rng = rng
        self.sample = make_sampler(cfg.service, rng)
        # An exponential service time drawn where it is used, by the sampler's own formula (the same draws): a simple
        # stage's walk then makes no call for it. 0.0 for the other distributions, which ``sample`` draws.
        self.exp_rate = 1.0 / cfg.service.mean if cfg.service.distribution == "exponential" else 0.0
        self.draw = rng.random
        self._fallback = make_sampler(cfg.fallback, rng) if cfg.fallback is not None and cfg.kind != "python" else None
        self.has_fallback = self._fallback is not None
        self._may_fail = False  # whether an attempt draws for a failure: set by refresh, not read per attempt
        # python: imported once here, at build; the service time is only the handler's expected duration.
        self.handler: Handler | None = _build_handler(cfg) if cfg.kind == "python" else None
        # The handler's calls still running, cancelled ones too until they end: the stage's teardown waits for them.
        self.calls: set[asyncio.Task[None]] = set()
        self._params = MappingProxyType(dict(cfg.params))
        self.cfg_params: Mapping[str, object] = self._params
        self._init_dependencies(dependencies or {})
        self.state: object = None  # what the stage's setup returned
        self.stats = StageStats()
        self.handler_errors: dict[str, int] = {}  # attempts whose handler raised, by exception type
        self.handler_timeouts = 0  # attempts whose handler was cut at the stage timeout
        self._queue: Backlog = queue
        self._ledger = ledger
        self._sleep = clock.sleep
        self._now = clock.now
        self.memory = memory
        self.mcp = mcp
        # Fault flags
        self.removed = False
        self.hang = False  # tool_timeout
        self.hang_timeout = cfg.timeout or DEFAULT_HANG_TIMEOUT
        self.llm_down = False  # llm_failure: the primary model errors
        self.jitter = 0.0  # latency_jitter: extra delay drawn from [0, jitter]
        # Outcomes a recovery check can watch
        # Degraded outcomes: a hung tool call given up on (the task goes on without it), or a task
        # completed with this optional stage skipped while removed or open (the worker counts those).
        self.degraded = 0
        self.fallback_served = 0
        self.successes = 0
        self._init_breaker(cfg)
        self.simple = True
        self.plain = False
        self.refresh()

    def _init_dependencies(self, dependencies: Mapping[str, str]) -> None:
        """Dependencies: name -> kind (http, tcp); the URL a handler calls each at (its proxy, once started);
        what each catalogue action does to each of them now, and the faults that makes."""
        self.dependencies: Mapping[str, str] = MappingProxyType(dict(dependencies))
        self._urls: dict[str, str] = {}
        self.urls: Mapping[str, str] = MappingProxyType(self._urls)
        self.proxies: dict[str, FaultProxy] = {}  # where this process serves the stage: started by its lifespan
        self.dependency_layers: dict[str, dict[str, Mapping[str, float]]] = {name: {} for name in self.dependencies}
        self.dependency_faults: dict[str, DependencyFaults] = dict.fromkeys(self.dependencies, NO_FAULTS)
        self._dependency_fault_names: tuple[str, ...] = ()

    def _init_breaker(self, cfg: StageConfig) -> None:
        """Circuit breaker: after breaker_threshold failed attempts in a row it opens for breaker_reset seconds — the
        orchestrator routes around an open tool, an open llm goes straight to its fallback — then lets a trial
        through (half-open)."""
        self._fail_streak = 0
        # No failed attempt since the breaker last closed (nothing for a success to reset): a walk books its usual
        # success itself while this holds, without calling :meth:`succeeded`.
        self.clean = True
        self.open_until = float("-inf")
        self.trips = 0  # times the breaker opened
        self._open_for = cfg.breaker_reset  # doubles while trials keep failing, up to 16 ×
        self._tripped = False  # opened and not closed since: half-open once open_until has passed
        self.on_trip: Callable[[], None] | None = None  # the orchestrator reroutes at once, not at its next beat

    def read_backlog(self, backlog: Backlog) -> None:
        """Pressure reads this backlog from now on (a Redis worker's: the stream's, not its own empty queue)."""
        self._queue = backlog

    @property
    def failures(self) -> dict[FailReason, int]:
        return self.stats.failures

    def dependency_fault(self, dependency: str, action: str, fields: Mapping[str, float] | None) -> None:
        """Set (or lift, with None) what one catalogue action does to the calls to ``dependency``."""
        layers = self.dependency_layers[dependency]
        if fields is None:
            layers.pop(action, None)
        else:
            layers[action] = fields
        merged: dict[str, float] = {}
        for fields_ in layers.values():  # each action sets fields of its own
            merged.update(fields_)
        self.set_dependency_faults(dependency, DependencyFaults.from_json(merged))

    def set_dependency_faults(self, dependency: str, faults: DependencyFaults) -> None:
        """What acts on the calls to ``dependency`` now (a Redis worker is told the whole of it)."""
        self.dependency_faults[dependency] = faults
        proxy = self.proxies.get(dependency)
        if proxy is not None:
            proxy.faults = faults
        names = (name for f in self.dependency_faults.values() for name in f.names())
        self._dependency_fault_names = tuple(dict.fromkeys(names))

    def serve_through(self, dependency: str, proxy: FaultProxy) -> None:
        """Calls to ``dependency`` go through ``proxy`` (started) from now on; it takes the faults in force."""
        proxy.faults = self.dependency_faults[dependency]
        self.proxies[dependency] = proxy
        self._urls[dependency] = proxy.url

    def stop_serving_through(self) -> None:
        self.proxies.clear()
        self._urls.clear()

    def refresh(self) -> None:
        cfg = self.cfg
        self._may_fail = bool(cfg.pressure.enabled or cfg.failure_probability)
        # An attempt is its service drawn (and a memory read's restore) and cut at the timeout, unless the fallback
        # serves it or the MCP connection is down (the walk checks both per attempt): the walk draws it itself,
        # without calling attempt.
        self.plain = (
            self.handler is None
            and not self._may_fail
            and not (self.removed or self.hang or self.llm_down or self.jitter)
        )
        # Nothing can go wrong at all: no timeout, nothing of its own kind (memory, MCP, fallback) to check.
        self.simple = self.plain and cfg.timeout == 0 and self.kind in ("compute", "tool", "llm")

    def failure_probability(self) -> float:
        p = self.cfg.failure_probability
        if self.cfg.pressure.enabled:
            pressure = self.cfg.pressure
            saturation = self._queue.depth / self._queue.capacity
            if saturation > pressure.threshold:
                extra = min(1.0, (saturation - pressure.threshold) / (1 - pressure.threshold))
                extra *= pressure.max_probability
                p = p + extra - p * extra
        return p

    def is_open(self, now: float) -> bool:
        return now < self.open_until

    def breaker(self, now: float) -> BreakerState:
        """``open`` until its reset time, then ``half_open`` until a call or a health check succeeds."""
        if now < self.open_until:
            return "open"
        return "half_open" if self._tripped else "closed"

    def _close(self) -> None:
        self._fail_streak = 0
        self.clean = True
        self._open_for = self.cfg.breaker_reset
        if self._tripped:
            self._tripped = False
            self.stats.breaker_closed += 1

    def _failed_attempt(self) -> None:
        self._fail_streak += 1
        self.clean = False
        threshold = self.cfg.breaker_threshold
        if threshold and self._fail_streak >= threshold and not self.is_open(self._now()):
            self._open(self._now())
            if self.on_trip is not None:
                self.on_trip()

    def _open(self, now: float) -> None:
        self.open_until = now + self._open_for
        self._open_for = min(self._open_for * 2, 16 * self.cfg.breaker_reset)
        self.trips += 1
        self._fail_streak = 0
        self._tripped = True
        self.clean = False
        self.stats.breaker_opened += 1

    def healthy(self) -> bool:
        """One trial call by a health check: would an attempt succeed now? (Draws from the stage's stream.)"""
        if self.removed or self.hang or self.llm_down or (self.mcp is not None and not self.mcp.connected):
            return False
        p = self.failure_probability()
        return not (p > 0.0 and self._rng.random() < p)

    def probe(self, now: float) -> bool:
        """Half-open while the route goes around the stage: a health check, not users' tasks, tries it.

        Healthy closes the breaker; otherwise it opens again for twice as long (up to 16 × the reset).
        """
        if self.removed or self.healthy():  # a removed stage is out of the DAG: nothing to probe
            self._close()
            return True
        self._open(now)
        return False

    async def run(self, slow: float = 1.0, task: Task | None = None) -> FailReason | Degraded | None:
        """None when the stage served the task; :data:`DEGRADED` when it went on without; else why it failed.

        The coroutine form of what :class:`~chaosd.pipeline.stage_call.StageCall` does with callbacks: the same
        attempts (:meth:`attempt`), the same books and retries (:meth:`attempted`)."""
        timeout = self.cfg.timeout
        now = self._now
        attempts = 0
        use_fallback = self.starts_on_fallback()
        while True:
            begun = now()
            if self.handler is not None:
                reason = await self._call(self.handler, slow, timeout, task, attempts + 1)
            else:
                delay, reason = self.attempt(slow, timeout, use_fallback)
                if delay > 0.0:
                    await self._sleep(delay)
            attempts += 1
            outcome, use_fallback, backoff = self.attempted(reason, now() - begun, use_fallback, attempts)
            if backoff is None:
                return outcome
            await self._sleep(backoff)

    def starts_on_fallback(self) -> bool:
        """Whether a call goes straight to the fallback model (the primary's breaker is open)."""
        return self.has_fallback and self._now() < self.open_until

    def attempted(
        self, reason: FailReason | None, took: float, use_fallback: bool, attempts: int
    ) -> tuple[FailReason | Degraded | None, bool, float | None]:
        """Book an attempt that ended with ``reason`` after ``took`` seconds, the ``attempts``-th: the call's
        outcome, whether the next attempt uses the fallback, and the backoff before it (None: no retry, the
        call ended with the outcome)."""
        if reason is None:
            self.succeeded(took, use_fallback)
            return None, use_fallback, None
        stats = self.stats
        stats.latency.add(took)
        stats.failed(reason)
        if not use_fallback:
            self._failed_attempt()
        if self.kind == "llm" and self._fallback is not None:
            use_fallback = True
        cfg = self.cfg
        if attempts > cfg.retries:
            if reason == "tool_timeout" and cfg.degrade:
                self.degraded += 1
                return DEGRADED, use_fallback, None
            return reason, use_fallback, None
        self._ledger.retries += 1
        stats.retries += 1
        return None, use_fallback, backoff_delay(cfg.backoff, attempts, self._rng)

    def succeeded(self, took: float, use_fallback: bool) -> None:
        """Book an attempt that served the task after ``took`` seconds: :meth:`attempted` of one that did not fail,
        without the answer it has no use for (the walk's usual attempt)."""
        self.stats.latency.add(took)
        self.successes += 1
        if use_fallback:
            self.fallback_served += 1
        elif not self.clean:  # else closed already, its backoff at the reset
            self._close()

    def attempt(self, slow: float, timeout: float, use_fallback: bool) -> tuple[float, FailReason | None]:
        """One attempt of a stage of chaosd's own kinds, drawn now: how long it takes, and why it failed (None:
        it served the task)."""
        if self.removed:
            return 0.0, "node_removed"
        if self.mcp is not None and not self.mcp.connected:
            return 0.0, "mcp_disconnected"
        if self.hang:
            return self.hang_timeout, "tool_timeout"
        if use_fallback and self._fallback is not None:
            service = self._fallback() * slow
        elif self.exp_rate:
            service = -_ln(1.0 - self.draw()) / self.exp_rate * slow  # sample(), written out: once per attempt
        else:
            service = self.sample() * slow
        if self.jitter:
            service += self._rng.uniform(0.0, self.jitter)
        if self.memory is not None:
            service += self.memory.read(self._rng.random(), self.cfg.restore_time)
        if self.llm_down and not use_fallback:
            return service, "llm_error"
        p = self.failure_probability() if self._may_fail else 0.0
        failed = p > 0.0 and self._rng.random() < p
        if timeout > 0.0 and (failed or service > timeout):
            return timeout, "timeout"
        if failed:
            return service, "error"
        return service, None

    async def _call(
        self, handler: Handler, slow: float, timeout: float, task: Task | None, attempt: int
    ) -> FailReason | None:
        """One attempt of a python stage: the faults act first, in place of the call or before it."""
        sleep = self._sleep
        if self.removed:
            return "node_removed"
        if self.hang:
            await sleep(self.hang_timeout)
            return "tool_timeout"
        if self.llm_down:
            await sleep(self.sample() * slow)  # the model answers with an error after its usual time
            return "llm_error"
        p = self.failure_probability() if self._may_fail else 0.0
        if p > 0.0 and self._rng.random() < p:
            if timeout > 0.0:
                await sleep(timeout)
                return "timeout"
            return "error"
        # A slow worker is late to call by (factor - 1) x the stage's expected time; jitter adds its own draw.
        delay = (slow - 1.0) * self.sample() if slow > 1.0 else 0.0
        if self.jitter:
            delay += self._rng.uniform(0.0, self.jitter)
        faults = tuple(name for name, on in (("slow_agent", slow > 1.0), ("latency_jitter", self.jitter > 0.0)) if on)
        if self._dependency_fault_names:
            faults += self._dependency_fault_names
        deadline = self._now() + timeout if timeout > 0.0 else None
        context = StageContext(
            stage=self.name,
            attempt=attempt,
            timeout=timeout or None,
            deadline=deadline,
            faults=faults,
            task_id=task.id if task is not None else -1,
            params=self._params,
            state=self.state,
            dependencies=self.urls,
        )
        # The clock is the running loop's (clock.now is loop.time), so the deadline is the loop's too.
        scope = asyncio.timeout_at(deadline)
        try:
            async with scope:
                if delay > 0.0:
                    await sleep(delay)
                await handler(task, context)
        except TimeoutError as exc:
            if scope.expired():
                self.handler_timeouts += 1
                return "timeout"
            self._handler_failed(exc)  # the handler's own timeout (its client's): a failure of the handler
            return "handler_error"
        except Exception as exc:  # whatever user code raises is a failed attempt, not a crashed worker
            self._handler_failed(exc)
            return "handler_error"
        return None

    def _handler_failed(self, exc: Exception) -> None:
        cause = type(exc).__name__
        seen = self.handler_errors.get(cause, 0)
        self.handler_errors[cause] = seen + 1
        if not seen:  # the first of each kind with its traceback; the rest are counted
            _log.warning(
                "stage %s: handler raised %s; further ones are counted, not logged", self.name, cause, exc_info=exc
            )


def _build_handler(cfg: StageConfig) -> Handler:
    where = f"stages.{cfg.name}.handler"
    if cfg.handler is None:
        raise ConfigError([("configuration", where, 'required for kind = "python"')])
    try:
        return load_handler(cfg.handler)
    except HandlerError as exc:
        raise ConfigError([("configuration", where, str(exc))]) from None
