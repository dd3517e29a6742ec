"""SimPy models of the work bench/engine.py gives chaosd: the bare M/M/4, and the default config's pipeline (what the
second includes: bench/engine.py's docstring)."""

from __future__ import annotations

import array
import math
import random
import time
from bisect import bisect_left, insort
from collections import deque
from collections.abc import Generator, Iterable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import simpy

from chaosd.config.settings import Settings, StageConfig

WARMUP_SHARE = 0.1  # of each run, left out of its measurements on both sides
MM4_RATE = 360.0
MM4_MEAN = 0.010
ROUTE = ("plan", "search", "recall", "context", "answer")  # the default route with nothing broken


@dataclass(frozen=True)
class Outcome:
    """One run: its wall time and what it simulated over the measured window."""

    wall: float
    completed: float  # per simulated second
    refused: float  # per simulated second
    sojourn: float  # mean, seconds


# --- SimPy: M/M/4 --------------------------------------------------------------------------------------------------


def simpy_mm4(seed: int, duration: float) -> Outcome:
    """SimPy's bare M/M/4: a Resource of 4, a process per customer, each sojourn ending after the warm-up recorded."""
    env = simpy.Environment()
    servers = simpy.Resource(env, capacity=4)
    arrivals = random.Random(f"simpy:{seed}:arrivals")
    service = random.Random(f"simpy:{seed}:service")
    warmup = duration * WARMUP_SHARE
    sojourns: list[float] = []
    mu = 1.0 / MM4_MEAN

    def customer() -> Generator[simpy.Event, None, None]:
        arrived = env.now
        with servers.request() as request:
            yield request
            yield env.timeout(service.expovariate(mu))
        if env.now >= warmup:
            sojourns.append(env.now - arrived)

    def source() -> Generator[simpy.Event, None, None]:
        while True:
            yield env.timeout(arrivals.expovariate(MM4_RATE))
            env.process(customer())

    started = time.perf_counter()
    env.process(source())
    env.run(until=duration)
    wall = time.perf_counter() - started
    return Outcome(wall, len(sojourns) / (duration - warmup), 0.0, math.fsum(sojourns) / max(1, len(sojourns)))


# --- SimPy: the default config -------------------------------------------------------------------------------------

_LOW, _FACTOR = 1e-6, 1.05
_LOG_LOW, _INV_LOG = math.log(_LOW), 1.0 / math.log(_FACTOR)
_BUCKETS = math.ceil((math.log(1e5) - _LOG_LOW) * _INV_LOG) + 2
_UPPER = _LOW * _FACTOR ** np.arange(_BUCKETS, dtype=np.float64)
_EDGES = _UPPER[:-1]  # a sample above every edge is in the top bucket


class Histogram:
    """Log buckets ×1.05: a sample is appended to a typed array, and binned with numpy when read (as chaosd does)."""

    def __init__(self) -> None:
        self.counts = np.zeros(_BUCKETS, dtype=np.int64)
        self.pending = array.array("d")
        self.add = self.pending.append
        self.total = 0.0

    def snapshot(self) -> np.ndarray[Any, np.dtype[np.int64]]:
        pending = self.pending
        if pending:
            x = np.frombuffer(pending, dtype=np.float64)
            self.total += float(x.sum())
            index = _EDGES.searchsorted(x, side="left")  # the bucket edges below each sample, as chaosd bins them
            del x  # the view on the buffer goes before the buffer is emptied
            self.counts += np.bincount(index, minlength=_BUCKETS)
            del pending[:]
        return self.counts.copy()


def percentiles(counts: np.ndarray[Any, np.dtype[np.int64]], qs: Iterable[float]) -> list[float]:
    cum = counts.cumsum()
    total = int(cum[-1])
    if not total:
        return [0.0 for _ in qs]
    where = cum.searchsorted([q * total for q in qs]).tolist()
    return [float(_UPPER[min(i, _BUCKETS - 1)]) for i in where]


class Job:
    __slots__ = ("accepted_at", "attempts", "id", "measured")

    def __init__(self, job_id: int, t: float, measured: bool) -> None:
        self.id = job_id
        self.accepted_at = t
        self.measured = measured
        self.attempts = 0


class Stage:
    """One stage of the route: its kind's work per attempt (see the module docstring)."""

    def __init__(self, cfg: StageConfig, rng: random.Random) -> None:
        self.cfg = cfg
        self.kind = cfg.kind
        self.rng = rng
        self.lambd = 1.0 / cfg.service.mean
        self.timeout = cfg.timeout
        self.simple = cfg.timeout == 0 and cfg.kind in ("compute", "tool", "llm")
        self.latency = Histogram()
        self.failures = 0
        self.retries = 0
        self.successes = 0
        self.streak = 0
        self.open_until = float("-inf")
        self.entries = cfg.entries
        self.corrupted: set[int] = set()
        self.restored = 0
        self.connected = True

    def attempts(self, env: simpy.Environment) -> Generator[simpy.Event, None, bool]:
        """The stage's attempts for one task; whether it failed for good."""
        cfg = self.cfg
        attempt = 0
        while True:
            begun = env.now
            service = self.rng.expovariate(self.lambd)
            if self.kind == "memory":
                entry = self.rng.randrange(self.entries)
                if entry in self.corrupted:
                    self.corrupted.discard(entry)
                    self.restored += 1
                    service += cfg.restore_time
            ok = self.connected
            if self.timeout > 0.0 and service > self.timeout:
                yield env.timeout(self.timeout)
                ok = False
            else:
                yield env.timeout(service)
            self.latency.add(env.now - begun)
            if ok:
                self.successes += 1
                self.streak = 0
                return False
            self.failures += 1
            self.streak += 1
            attempt += 1
            if attempt > cfg.retries:
                return True
            self.retries += 1
            backoff = cfg.backoff
            yield env.timeout(min(backoff.max, backoff.base * backoff.factor ** (attempt - 1)))


class Counts:
    __slots__ = ("accepted", "completed", "failed", "late", "offered", "queue_full", "shed")

    def __init__(self) -> None:
        self.offered = self.accepted = self.completed = self.failed = self.late = self.shed = self.queue_full = 0


@dataclass
class Reading:
    t: float
    offered: int
    accepted: int
    ended: int
    failed: int
    good: int
    shed: int
    busy_area: float
    depth: int
    head_age: float
    wait: np.ndarray[Any, np.dtype[np.int64]]
    sojourn: np.ndarray[Any, np.dtype[np.int64]]


class DefaultModel:
    """The default config's pipeline in SimPy (what it includes: the module docstring)."""

    def __init__(self, settings: Settings, duration: float) -> None:
        self.env = simpy.Environment()
        self.s = settings
        self.warmup = duration * WARMUP_SHARE
        by_name = {stage.name: stage for stage in settings.stages}
        seed = settings.seed
        self.route = [Stage(by_name[name], random.Random(f"simpy:{seed}:{name}")) for name in route_of(settings)]
        self.items: deque[Job] = deque()
        self.idle: deque[simpy.Event] = deque()  # workers waiting for a task: the next one is handed to the first
        self.capacity = settings.queue.capacity
        self.limit = self.capacity
        self.total, self.measured = Counts(), Counts()
        self.in_flight: dict[int, Job] = {}
        self.owed: set[int] = set()
        self.assigned: dict[int, tuple[Job, int, float]] = {}
        self.checkpoint: dict[int, tuple[Job, int, float]] = {}
        self.wait, self.sojourn = Histogram(), Histogram()
        self.area = self.area_t = 0.0
        self.busy = 0
        self.busy_area = self.busy_t = 0.0
        self.ids = 0
        self.done = 0  # completions after the warm-up, and their sojourns' sum
        self.done_sojourn = 0.0
        self.lease_expires = 0.0
        self.avoided: set[str] = set()
        self.admission = Admission(settings)
        self.watch = Watch(settings)

    def run(self, duration: float) -> Outcome:
        env, s = self.env, self.s
        for i in range(s.load.producers):
            rng = random.Random(f"simpy:{s.seed}:arrivals:{i}")
            env.process(self.producer(rng, s.load.rate / s.load.producers))
        for i in range(s.workers.count):
            env.process(self.worker(i))
        env.process(self.heartbeat())
        env.process(self.telemetry())
        started = time.perf_counter()
        env.run(until=duration)
        wall = time.perf_counter() - started
        m = self.measured
        span = duration - self.warmup
        return Outcome(wall, self.done / span, (m.shed + m.queue_full) / span, self.done_sojourn / max(1, self.done))

    def producer(self, rng: random.Random, rate: float) -> Generator[simpy.Event, None, None]:
        env, items, idle = self.env, self.items, self.idle
        total, measured, warmup = self.total, self.measured, self.warmup
        while True:
            yield env.timeout(rng.expovariate(rate))
            now = env.now
            self.ids += 1
            job = Job(self.ids, now, now >= warmup)
            books = (total, measured) if job.measured else (total,)
            depth = len(items)
            for counts in books:
                counts.offered += 1
            if depth >= self.limit:
                for counts in books:
                    if depth < self.capacity:
                        counts.shed += 1
                    else:
                        counts.queue_full += 1
                continue
            for counts in books:
                counts.accepted += 1
            self.in_flight[job.id] = job
            self.owed.add(job.id)
            if idle:
                idle.popleft().succeed(job)
                continue
            self.area += depth * (now - self.area_t)
            self.area_t = now
            items.append(job)

    def _busy(self, now: float, change: int) -> None:
        self.busy_area += self.busy * (now - self.busy_t)
        self.busy_t = now
        self.busy += change

    def worker(self, wid: int) -> Generator[simpy.Event, None, None]:
        env, items, idle = self.env, self.items, self.idle
        lease = self.s.orchestrator.task_lease
        assigned, wait_add = self.assigned, self.wait.add
        while True:
            now = env.now
            if items:
                self.area += len(items) * (now - self.area_t)
                self.area_t = now
                job = items.popleft()
            else:
                ready = env.event()
                idle.append(ready)
                job = yield ready
                now = env.now
            wait_add(now - job.accepted_at)
            job.attempts += 1
            self._busy(now, 1)
            assigned[job.id] = (job, wid, now + lease)
            failed = False
            for stage in self.route:
                if stage.simple:
                    service = stage.rng.expovariate(stage.lambd)
                    stage.latency.add(service)
                    yield env.timeout(service)
                elif (yield from stage.attempts(env)):
                    failed = True
                    break
            now = env.now
            del assigned[job.id]
            self._settle(job, now, failed)
            self._busy(now, -1)

    def _settle(self, job: Job, now: float, failed: bool) -> None:
        if self.in_flight.pop(job.id, None) is None:
            return
        self.owed.discard(job.id)
        books = (self.total, self.measured) if job.measured else (self.total,)
        late = now - job.accepted_at > self.s.load.deadline
        for counts in books:
            if failed:
                counts.failed += 1
            else:
                counts.completed += 1
                counts.late += late
        if not failed:
            self.sojourn.add(now - job.accepted_at)
            if now >= self.warmup:
                self.done += 1
                self.done_sojourn += now - job.accepted_at

    def heartbeat(self) -> Generator[simpy.Event, None, None]:
        cfg = self.s.orchestrator
        env = self.env
        checkpoint_at = 0.0
        while True:
            yield env.timeout(cfg.renew_interval)
            now = env.now
            self.lease_expires = now + cfg.lease_ttl
            expired = [job for job, _, deadline in self.assigned.values() if deadline <= now]
            for job in expired:
                del self.assigned[job.id]
            if now - checkpoint_at >= cfg.checkpoint_interval:
                self.checkpoint = dict(self.assigned)
                checkpoint_at = now
            self.avoided = {stage.cfg.name for stage in self.route if now < stage.open_until}
            for stage in self.route:
                if stage.kind == "memory":
                    for entry in sorted(stage.corrupted):
                        stage.corrupted.discard(entry)

    def read(self) -> Reading:
        now = self.env.now
        total = self.total
        return Reading(
            t=now,
            offered=total.offered,
            accepted=total.accepted,
            ended=total.completed + total.failed,
            failed=total.failed,
            good=total.completed - total.late,
            shed=total.shed + total.queue_full,
            busy_area=self.busy_area + self.busy * (now - self.busy_t),
            depth=len(self.items),
            head_age=now - self.items[0].accepted_at if self.items else 0.0,
            wait=self.wait.snapshot(),
            sojourn=self.sojourn.snapshot(),
        )

    def telemetry(self) -> Generator[simpy.Event, None, None]:
        s = self.s
        tick = s.telemetry.tick
        window = max(1, round(s.telemetry.window / tick))
        ring: deque[Reading] = deque([self.read()], maxlen=window + 1)
        drain = max(1, round(10.0 / tick))
        k = 0
        while True:
            k += 1
            yield self.env.timeout(tick)
            new = self.read()
            ring.append(new)
            if k % drain == 0:
                for stage in self.route:
                    stage.latency.snapshot()
            snap = summarise(list(ring), s.workers.count, self.capacity, self.busy)
            self.watch.judge(snap)
            self.limit = self.admission.update(snap)


def route_of(settings: Settings) -> tuple[str, ...]:
    """The route with nothing broken: the first stage, then each stage's first successor."""
    stages = {stage.name: stage for stage in settings.stages}
    name: str | None = settings.stages[0].name
    route = []
    while name is not None:
        route.append(name)
        following = stages[name].next
        name = following[0] if following else None
    if tuple(route) != ROUTE:
        raise SystemExit(f"the config's route is {' → '.join(route)}: the SimPy model walks {' → '.join(ROUTE)}")
    return tuple(route)


def summarise(readings: list[Reading], workers: int, capacity: int, busy_now: int) -> dict[str, float]:
    """The window's snapshot, from its first and last readings (and dQ/dt over all of them)."""
    old, new = readings[0], readings[-1]
    dt = new.t - old.t or 1e-12
    ended = new.ended - old.ended
    busy = new.busy_area - old.busy_area
    mean_service = busy / ended if ended else 0.01
    wait = percentiles(new.wait - old.wait, (0.5, 0.95, 0.99))
    sojourn = percentiles(new.sojourn - old.sojourn, (0.5, 0.95, 0.99))
    n = len(readings)
    mean_t = sum(r.t for r in readings) / n
    mean_d = sum(r.depth for r in readings) / n
    sxx = sum((r.t - mean_t) ** 2 for r in readings)
    sxy = sum((r.t - mean_t) * (r.depth - mean_d) for r in readings)
    return {
        "t": new.t,
        "depth": new.depth,
        "fill": new.depth / capacity,
        "utilisation": min(1.0, busy / (dt * workers)),
        "busy_share": busy_now / workers,
        "slope": sxy / sxx if sxx > 0 else 0.0,
        "arrival": (new.offered - old.offered) / dt,
        "throughput": ended / dt,
        "goodput": (new.good - old.good) / dt,
        "errors": (new.failed - old.failed) / ended if ended else 0.0,
        "shed": (new.shed - old.shed) / dt,
        "mean_service": mean_service,
        "capacity_rate": workers / mean_service,
        "head_age": new.head_age,
        "wait_p95": wait[1],
        "p95": sojourn[1],
        "p99": sojourn[2],
    }


class Admission:
    """The capacity policy's limit on the tasks waiting, set each tick from the measured capacity."""

    def __init__(self, s: Settings) -> None:
        cfg = s.throttle
        horizon = s.load.deadline or 1.0
        self.capacity = s.queue.capacity
        self.max_wait = cfg.max_wait * horizon
        self.target = min(self.max_wait, cfg.target or horizon / 4)
        self.ages: deque[float] = deque(maxlen=max(1, round(cfg.standing / s.telemetry.tick)))
        self.standing = False

    def update(self, snap: dict[str, float]) -> int:
        self.ages.append(snap["head_age"])
        rate, mean_service = snap["capacity_rate"], snap["mean_service"]
        standing = len(self.ages) == self.ages.maxlen and min(self.ages) > self.target
        self.standing = short = standing or (self.standing and snap["shed"] > 0)
        delay = self.target if short else max(self.target, self.max_wait - mean_service)
        return min(self.capacity, max(math.ceil(rate * delay), math.ceil(rate * mean_service), 1))


class Watch:
    """A detector's signals with hold windows and a median p95 baseline, and a steady-state window of running sums."""

    def __init__(self, s: Settings) -> None:
        cfg = s.detector
        self.cfg = cfg
        ticks = max(1, round(cfg.hold / s.telemetry.tick))
        self.holds: dict[str, deque[bool]] = {k: deque(maxlen=ticks) for k in ("growth", "over", "collapse")}
        self.ages: deque[float] = deque(maxlen=max(1, round(cfg.standing_window / s.telemetry.tick)))
        self.baseline: deque[float] = deque(maxlen=max(1, round(cfg.baseline_window / s.telemetry.tick)))
        self.ordered: list[float] = []
        self.baseline_p95 = 0.0
        self.alarms = 0
        self.steady: deque[tuple[float, float, float]] = deque(maxlen=max(1, round(10.0 / s.telemetry.tick)))
        self.sums = [0.0, 0.0, 0.0]
        self.timeline: deque[dict[str, float]] = deque(maxlen=s.history.timeline)
        self.every = s.run.timeline
        self.next_point = self.every

    def judge(self, snap: dict[str, float]) -> None:
        cfg = self.cfg
        saturated = max(snap["fill"], snap["utilisation"], snap["busy_share"]) >= cfg.saturation
        self.ages.append(snap["head_age"])
        standing = min(self.ages) > cfg.standing_queue * snap["mean_service"]
        growing = saturated and standing and snap["slope"] > cfg.min_growth * snap["capacity_rate"]
        shedding = snap["shed"] > cfg.shed_share * snap["arrival"]
        over = growing or snap["fill"] >= cfg.saturation or shedding
        collapsing = saturated and snap["goodput"] < cfg.collapse_goodput * min(snap["arrival"], snap["capacity_rate"])
        slow = self.baseline_p95 > 0 and snap["p95"] >= (1 + cfg.latency_growth) * self.baseline_p95
        for key, signal in (("growth", growing), ("over", over), ("collapse", collapsing)):
            self.holds[key].append(signal)
        held = [k for k, h in self.holds.items() if len(h) == h.maxlen and sum(h) >= cfg.hold_fraction * len(h)]
        self.alarms += bool(held)
        if not (over or collapsing or slow or held) and snap["p95"] > 0:
            self._learn(snap["p95"])
        self._steady((snap["goodput"], snap["errors"], snap["p95"]))
        if snap["t"] + 1e-9 >= self.next_point:
            self.next_point += self.every
            self.timeline.append({k: round(v, 6) for k, v in snap.items()})

    def _learn(self, p95: float) -> None:
        baseline, ordered = self.baseline, self.ordered
        if len(baseline) == baseline.maxlen:
            del ordered[bisect_left(ordered, baseline[0])]
        baseline.append(p95)
        insort(ordered, p95)
        self.baseline_p95 = ordered[len(ordered) // 2]

    def _steady(self, values: tuple[float, float, float]) -> None:
        steady, sums = self.steady, self.sums
        if len(steady) == steady.maxlen:
            for i, old in enumerate(steady[0]):
                sums[i] -= old
        steady.append(values)
        for i, value in enumerate(values):
            sums[i] += value


def simpy_default(settings: Settings, duration: float) -> Outcome:
    """The default config's pipeline for ``duration`` simulated seconds, on the settings' seed."""
    started = time.perf_counter()
    outcome = DefaultModel(settings, duration).run(duration)
    return replace(outcome, wall=time.perf_counter() - started)
