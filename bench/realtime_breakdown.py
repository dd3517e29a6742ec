"""Where real time goes, task by task, in M/M/2 at ρ 0.7 — and how far the real clock's numbers are from virtual time's.

The pipeline: 2 workers, one ``exponential`` stage of mean 10 ms, poisson arrivals at 140 tasks/s from 4 producers,
the default telemetry, detector and throttle. Four runs of the same seed (the same random draws): virtual time, the
real clock, the real clock with no catch-up (each service timed from the worker's wake-up, the negative control),
and the real clock again with every task's timeline recorded. The plain runs give the real/virtual ratios of mean
sojourn, mean wait and p95 sojourn; the recorded run gives, per task:

- arrival timer: how late a scheduled arrival's callback fired;
- admission: from that reading (the task's ``accepted_at``) to the task being queued or handed to a worker;
- dispatch: from the later of "queued" and "its worker was free" (the worker's previous task acknowledged) to the
  worker's start;
- service: how late the service's end fired against the time it was scheduled for, and the span the worker spent
  against the sampled service (the inflation a queue feels);
- completion: from the end of service to the outcome written to the ledger and acknowledged;

against the clock's own lateness: a bare sleep on the same loop during the recorded run (about 80 a second).
Also the telemetry tick's cost (the loop is blocked while it runs). The recorded run's clock wrapper adds a call per
recorded callback, so its ratios are not the ones printed: those come from the plain pair.

    python bench/realtime_breakdown.py            # 30 s per real run
    python bench/realtime_breakdown.py --quick    # 8 s per real run
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
from collections.abc import Callable
from typing import Any

from chaosd.config.settings import Settings, load_settings
from chaosd.core.clock import LoopClock, new_event_loop, wall_time
from chaosd.experiment.runner import Experiment, run_offline
from chaosd.pipeline.callback_walk import CallbackWalk
from chaosd.pipeline.producer import Producer
from chaosd.pipeline.task import Task
from chaosd.views import ReportView

OVERLAY: dict[str, Any] = {
    "seed": 1,
    "load": {"arrival": "poisson", "rate": 140.0},
    "workers": {"count": 2},
    "stages": [{"name": "work", "service": {"distribution": "exponential", "mean": 0.01}}],
}
WARMUP_SHARE = 0.1


class _RecordingClock:
    """The loop's clock, recording how late the producers' arrivals and the workers' service ends fire (and when)."""

    def __init__(self, inner: LoopClock) -> None:
        self._inner = inner
        self.now = inner.now
        self.virtual = inner.virtual
        self.catch_up = inner.catch_up
        self.cancel = inner.cancel
        self.sleep = inner.sleep
        self.crashed = inner.crashed
        # The callbacks whose lateness is recorded: a producer's next arrival, a walk's end of a service.
        self._kinds: dict[object, str] = {Producer._arrive: "arrival", CallbackWalk._served: "service"}
        self.late: dict[str, list[float]] = {"arrival": [], "service": []}
        self.woke: dict[object, float] = {}  # each walk's last service end

    def call_at(self, when: float, callback: Callable[..., object], *args: object) -> object:
        kind = self._kinds.get(getattr(callback, "__func__", None))
        if kind is None:
            return self._inner.call_at(when, callback, *args)
        return self._inner.call_at(when, self._fired, kind, when, callback, args)

    def _fired(self, kind: str, when: float, callback: Callable[..., object], args: tuple[object, ...]) -> None:
        woke = self.now()
        self.late[kind].append(woke - when)
        if kind == "service":
            self.woke[getattr(callback, "__self__", None)] = woke
        callback(*args)

    async def sleep_until(self, when: float) -> None:
        await self._inner.sleep_until(when)


def _patch(obj: object, name: str, fn: Callable[..., Any]) -> None:
    """Replace one method on one instance (the hot path looks its calls up on the instance each time)."""
    setattr(obj, name, fn)


class _Timeline:
    """Per-task readings taken by wrapping the pipeline's hot-path calls on their instances."""

    def __init__(self, exp: Experiment, clock: _RecordingClock) -> None:
        p = exp.pipeline
        now = clock.now
        self.admission: list[float] = []
        self.dispatch: list[float] = []
        self.inflation: list[float] = []
        self.completion: list[float] = []
        self.tick: list[float] = []
        queued: dict[int, float] = {}
        started: dict[int, float] = {}
        drawn = [0.0]  # the last service drawn: its task is the next one assigned (the walk draws, then claims)
        sampled: dict[int, float] = {}
        free: dict[str, float] = {}
        walks = {w.agent.id: w._walk for w in p.workers}
        dispatcher: Any = p.dispatcher  # the in-memory Dispatcher (this pipeline's), whose hot-path calls are wrapped
        offer, assign, ack = p.queue.offer, dispatcher.assign, dispatcher.ack

        def offer_(task: Task, t: float) -> bool:
            ok = offer(task, t)
            done = now()
            queued[task.id] = done
            self.admission.append(done - task.accepted_at)
            return ok

        def assign_(task: Task, worker: str, t: float) -> None:
            assign(task, worker, t)
            ready = max(queued.pop(task.id, t), free.get(worker, t))
            self.dispatch.append(t - ready)
            started[task.id] = t
            sampled[task.id] = drawn[0]

        def ack_(task_id: int, worker: str) -> None:
            ack(task_id, worker)
            done = now()
            free[worker] = done
            woke = clock.woke.pop(walks.get(worker), None)
            start = started.pop(task_id, None)
            if woke is not None and start is not None:
                self.inflation.append(woke - start - sampled.pop(task_id, 0.0))
                self.completion.append(done - woke)

        _patch(p.queue, "offer", offer_)
        _patch(dispatcher, "assign", assign_)
        _patch(dispatcher, "ack", ack_)
        for stage in p.stages.values():
            sample = stage.sample

            def sample_(sample: Callable[[], float] = sample) -> float:
                value = sample()
                drawn[0] = value
                return value

            _patch(stage, "sample", sample_)
        telemetry_tick, on_tick = exp.telemetry.tick, exp._on_tick

        def tick_(lateness: float = 0.0, cpu_wait: float = 0.0) -> Any:
            begun = wall_time()
            snap = telemetry_tick(lateness, cpu_wait)
            on_tick(snap)
            self.tick.append(wall_time() - begun)
            return snap

        _patch(exp.telemetry, "tick", tick_)
        _patch(exp, "_on_tick", lambda snap: None)  # run inside tick_, to time both


def _real_run(
    settings: Settings, duration: float, *, catch_up: float | None = None, record: bool = False
) -> tuple[ReportView, float, _RecordingClock | None, _Timeline | None, list[float]]:
    """A real-clock run as ``run_offline`` makes one, and the seconds its loop waited for a CPU; ``catch_up``
    overrides the clock's (0: services timed from each wake-up), ``record`` records the timeline and a bare sleep's
    lateness beside it."""
    loop = new_event_loop(virtual=False)
    plain = LoopClock(loop)
    if catch_up is not None:
        plain.catch_up = catch_up
    clock = _RecordingClock(plain) if record else None
    bare: list[float] = []
    cpu_wait: list[float] = []

    async def probe() -> None:
        rng = random.Random(7)
        while True:
            d = rng.uniform(0.005, 0.02)
            t = plain.now()
            await plain.sleep(d)
            bare.append(plain.now() - t - d)

    async def main() -> tuple[ReportView, _Timeline | None]:
        exp = Experiment(settings, clock or plain, warmup=WARMUP_SHARE * duration, virtual=False)
        exp.telemetry.listen(lambda snap: cpu_wait.append(snap.cpu_wait))
        timeline = _Timeline(exp, clock) if clock is not None else None
        probing = asyncio.create_task(probe()) if record else None
        try:
            report = await exp.run(duration)
        finally:
            if probing is not None:
                probing.cancel()
        return report, timeline

    try:
        report, timeline = loop.run_until_complete(main())
    finally:
        loop.close()
    return report, sum(cpu_wait), clock, timeline, bare


def _ms(values: list[float]) -> str:
    if not values:
        return "      —"
    ordered = sorted(values)
    p95 = ordered[int(0.95 * (len(ordered) - 1))]
    return f"mean {statistics.fmean(values) * 1e3:7.3f} ms · p95 {p95 * 1e3:7.3f} ms · n {len(values)}"


def _latency(report: ReportView) -> tuple[float, float, float]:
    lat = report["latency"]
    return lat["sojourn"]["mean"], lat["wait"]["mean"], lat["sojourn"]["p95"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--duration", type=float, default=None, help="seconds per real-clock run (default 30)")
    args = parser.parse_args()
    duration = args.duration or (8.0 if args.quick else 30.0)
    settings = load_settings(None, OVERLAY)
    warmup = WARMUP_SHARE * duration
    virtual = _latency(run_offline(settings, duration=duration, warmup=warmup, virtual=True))
    real_report, real_cpu, *_ = _real_run(settings, duration)
    unpaced_report, unpaced_cpu, *_ = _real_run(settings, duration, catch_up=0.0)
    real, unpaced = _latency(real_report), _latency(unpaced_report)
    _, recorded_cpu, clock, timeline, bare = _real_run(settings, duration, record=True)
    assert clock is not None and timeline is not None
    print(f"M/M/2 at rho 0.7, {duration:g} s per run, seed 1; catch-up {clock.catch_up * 1e3:g} ms")
    print(f"  bare sleep lateness  {_ms(bare)}")
    print(f"  arrival timer        {_ms(clock.late['arrival'])}")
    print(f"  admission            {_ms(timeline.admission)}")
    print(f"  dispatch             {_ms(timeline.dispatch)}")
    print(f"  service wake-up      {_ms(clock.late['service'])}")
    print(f"  service − sampled    {_ms(timeline.inflation)}")
    print(f"  completion           {_ms(timeline.completion)}")
    print(f"  telemetry tick       {_ms(timeline.tick)}")
    print(
        f"the loop waited for a CPU {real_cpu:.2f} s, {unpaced_cpu:.2f} s (catch-up 0) and {recorded_cpu:.2f} s"
        f" (recorded) of {duration:g} s"
    )
    mean_bare = statistics.fmean(bare)
    print(f"ratio service wake-up / bare sleep lateness: {statistics.fmean(clock.late['service']) / mean_bare:.2f}×")
    print(f"ratio (service − sampled) / bare sleep lateness: {statistics.fmean(timeline.inflation) / mean_bare:.2f}×")
    for name, r, u, v in zip(("mean sojourn", "mean wait", "p95 sojourn"), real, unpaced, virtual, strict=True):
        print(
            f"ratio real/virtual {name}: {r / v:.4f} ({r * 1e3:.3f} ms vs {v * 1e3:.3f} ms);"
            f" catch-up 0 (each service from its wake-up): {u / v:.4f}"
        )


if __name__ == "__main__":
    main()
