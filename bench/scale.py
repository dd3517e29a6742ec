"""Scale: wall cost per simulated task as one dimension grows ×10 at a time, the others at their smallest.

Dimensions: workers (4 → 1,000, offered load raised with them so ρ stays 0.7), queue backlog (1e3 → 1e6 tasks
held), DAG stages (5 → 50), concurrent faults (0 → 100) and, in real time against a real daemon, SSE
subscribers (0 → 100). The virtual ones run the daemon's Experiment + Controller (with its telemetry
listeners) on a VirtualEventLoop. Every step of a dimension is built, warmed up and prepared first; then the
steps are timed in interleaved chunks (1, 2, 3, 1, 2, 3, …) so that each sees the same spells of load on a
shared, noisy machine, and each table's ratio is against the smallest setting timed that way. A step
over 1.5× is timed once more under cProfile and the top chaosd functions by cumulative time are printed.

    python bench/scale.py                    # every dimension, full steps
    python bench/scale.py --quick            # smaller steps and fewer tasks
    python bench/scale.py --only backlog     # one of: workers, backlog, stages, faults, sse
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import statistics
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from _daemon import start_daemon
from _virtual_daemon import VirtualDaemon

from chaosd.config.settings import load_settings

MEAN_SERVICE = 0.010  # s, the whole path: split evenly over its stages
RHO = 0.7
SMALL_WORKERS = 4
SMALL_STAGES = 5
FLAG = 1.5


def chain(n: int) -> list[dict[str, Any]]:
    """``n`` compute stages in a chain (no ``next``: list order), exponential, ``MEAN_SERVICE / n`` each."""
    return [{"name": f"s{i}", "service": {"distribution": "exponential", "mean": MEAN_SERVICE / n}} for i in range(n)]


def layered(n: int, layers: int = SMALL_STAGES) -> list[dict[str, Any]]:
    """``n`` stages in ``layers`` layers (one entry stage, the rest spread over the others), each stage listing
    the whole next layer as successors: a task walks ``layers`` stages whatever ``n`` is."""
    rest = n - 1
    widths = [1] + [rest // (layers - 1) + (1 if i < rest % (layers - 1) else 0) for i in range(layers - 1)]
    names = [[f"l{k}_{j}" for j in range(w)] for k, w in enumerate(widths)]
    mean = MEAN_SERVICE / layers
    stages = []
    for k, layer in enumerate(names):
        successors = names[k + 1] if k + 1 < len(names) else []
        for name in layer:
            stages.append({"name": name, "service": {"distribution": "exponential", "mean": mean}, "next": successors})
    return stages


def base(workers: int = SMALL_WORKERS, stages: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "seed": 1,
        "load": {"rate": RHO * workers / MEAN_SERVICE, "producers": 4, "arrival": "poisson"},
        "workers": {"count": workers},
        "queue": {"capacity": 10_000, "when_full": "reject"},
        "stages": stages if stages is not None else chain(SMALL_STAGES),
    }


@dataclass
class Step:
    """One setting of a dimension: how to build it, and what to do before the timed phase."""

    label: str
    overlay: dict[str, Any]
    visits: int = SMALL_STAGES  # stages a task walks (µs per visit = µs/task ÷ visits)
    prepare: Callable[[VirtualDaemon], str] | None = None  # after the warm-up; returns a note on what it did
    warm: float | None = None  # simulated s before ``prepare`` (default: 20 % of the timed tasks' time, 1–10 s)


class Live:
    """One step's daemon, built, warmed up and prepared; timed a chunk at a time, interleaved with the others."""

    def __init__(self, step: Step, tasks: int, min_sim: float, rounds: int) -> None:
        self.step = step
        settings = load_settings(overlay=step.overlay)
        self.daemon = VirtualDaemon(settings)
        rate = min(settings.load.rate, settings.workers.count / MEAN_SERVICE)  # tasks completed per s
        self.daemon.advance(step.warm if step.warm is not None else max(1.0, min(10.0, 0.2 * tasks / rate)))
        self.note = step.prepare(self.daemon) if step.prepare is not None else ""
        self.daemon.advance(1.0)
        self.chunk = max(min_sim, tasks / rate) / rounds
        self.depth0 = self.daemon.exp.pipeline.queue.depth
        self.tasks = 0
        self.sim = 0.0
        self.wall = 0.0
        self.chunks: list[float] = []  # µs/task of each chunk

    def run_chunk(self, prof: cProfile.Profile | None = None) -> tuple[int, float]:
        ledger = self.daemon.exp.pipeline.ledger
        done0 = ledger.total.completed
        start = time.perf_counter()
        if prof is not None:
            prof.enable()
        self.daemon.advance(self.chunk)
        if prof is not None:
            prof.disable()
        wall = time.perf_counter() - start
        done = ledger.total.completed - done0
        return done, wall

    def timed_chunk(self) -> None:
        done, wall = self.run_chunk()
        self.tasks += done
        self.sim += self.chunk
        self.wall += wall
        self.chunks.append(wall / max(1, done) * 1e6)

    @property
    def us_task(self) -> float:
        return self.wall / self.tasks * 1e6 if self.tasks else float("inf")

    @property
    def us_visit(self) -> float:
        return self.us_task / self.step.visits

    def close(self) -> None:
        if "backlog" in self.note:
            self.note += f"; depth {self.depth0} → {self.daemon.exp.pipeline.queue.depth} over the timed chunks"
        if "faults active" in self.note:
            self.note += f"; {len(self.daemon.exp.injector.active())} still active after the timed chunks"
        self.daemon.close()


def top_chaosd(stats: pstats.Stats, tasks: int, n: int = 10) -> list[str]:
    """The ``n`` chaosd functions with the most cumulative time (coroutines count each resumption)."""
    rows = []
    for (filename, line, func), (_, ncalls, tottime, cumtime, _) in stats.stats.items():  # type: ignore[attr-defined]
        if "/chaosd/" in filename and "/bench/" not in filename:
            where = filename.split("/chaosd/", 1)[1]
            rows.append((cumtime, tottime, ncalls, f"chaosd/{where}:{line}({func})"))
    rows.sort(reverse=True)
    out = [f"      {'cum s':>8} {'tot s':>8} {'calls':>10} {'cum µs/task':>12}  function"]
    for cum, tot, calls, name in rows[:n]:
        out.append(f"      {cum:8.3f} {tot:8.3f} {calls:10d} {cum / max(1, tasks) * 1e6:12.2f}  {name}")
    return out


def run_dimension(
    title: str, how: str, steps: list[Step], tasks: int, min_sim: float, rounds: int, *, per_visit: bool = False
) -> None:
    """Every step built first, then timed in ``rounds`` interleaved chunks (step 1, 2, …, 1, 2, …): each step's
    total sees the same spells of machine load. Ratio: total wall per task over the smallest setting's."""
    lives = []
    for step in steps:
        start = time.perf_counter()
        lives.append(Live(step, tasks, min_sim, rounds))
        print(f"   .. {title}: {step.label} ready in {time.perf_counter() - start:.1f} wall s", flush=True)
    for _ in range(rounds):
        for live in lives:
            live.timed_chunk()
    key = (lambda lv: lv.us_visit) if per_visit else (lambda lv: lv.us_task)
    ref = key(lives[0])
    print(f"\n== {title}")
    print(f"   {how}")
    print(
        f"   {'setting':<28} {'tasks':>9} {'sim s':>8} {'wall s':>8} {'µs/task':>9} {'µs/visit':>9} "
        f"{'chunks min–max µs/task':>23} {'ratio':>6}"
    )
    flagged = []
    for i, live in enumerate(lives):
        ratio = key(live) / ref
        mark = f"  > {FLAG}×" if ratio > FLAG else ""
        if ratio > FLAG:
            flagged.append(i)
        spread = f"{min(live.chunks):.1f}–{max(live.chunks):.1f}"
        print(
            f"   {live.step.label:<28} {live.tasks:9d} {live.sim:8.1f} {live.wall:8.2f} {live.us_task:9.2f} "
            f"{live.us_visit:9.2f} {spread:>23} {ratio:6.2f}{mark}"
        )
    print(
        f"   ratio: {'µs per stage visit' if per_visit else 'µs per task'} over the smallest setting's; "
        f"each step timed in {rounds} chunks interleaved with the other steps'"
    )
    for i in flagged:
        live = lives[i]
        prof = cProfile.Profile()
        done, wall = live.run_chunk(prof)
        print(
            f"   profile of {live.step.label}: one more chunk ({live.chunk:g} simulated s, {done} tasks, "
            f"{wall:.1f} wall s under cProfile), top chaosd functions by cumulative time:"
        )
        print("\n".join(top_chaosd(pstats.Stats(prof), done)))
    for live in lives:
        live.close()
        if live.note:
            print(f"   note, {live.step.label}: {live.note}")


# --- the dimensions -----------------------------------------------------------------------------


def workers_dim(quick: bool) -> tuple[str, str, list[Step]]:
    counts = [4, 40, 400] if quick else [4, 40, 400, 1000]
    how = (
        f"a {SMALL_STAGES}-stage chain ({MEAN_SERVICE * 1000:g} ms in all), offered rate = {RHO} × workers / "
        f"{MEAN_SERVICE * 1000:g} ms (ρ {RHO}), 4 producers, queue 10,000 (reject)"
    )
    steps = [Step(f"{n} workers @ {RHO * n / MEAN_SERVICE:g}/s", base(n)) for n in counts]
    return "workers", how, steps


def backlog_dim(quick: bool) -> tuple[str, str, list[Step]]:
    sizes = [1_000, 10_000, 100_000] if quick else [1_000, 10_000, 100_000, 1_000_000]
    mu = SMALL_WORKERS / MEAN_SERVICE
    how = (
        f"queue capacity = backlog, when_full = block, offered 20 × the service rate ({20 * mu:g}/s against "
        f"{mu:g}/s served): the queue is filled before the timed phase, then stays full, producers blocked "
        "waiting for room (each completion lets one task in); throttle off so admission is not cut"
    )

    def filler(n: int) -> Callable[[VirtualDaemon], str]:
        def fill(daemon: VirtualDaemon) -> str:
            queue = daemon.exp.pipeline.queue
            start = time.perf_counter()
            while queue.depth < n:
                daemon.advance(max(0.5, n / (19 * mu) / 20))
            return (
                f"backlog full at {queue.depth} by {daemon.now():.0f} simulated s, filling took "
                f"{time.perf_counter() - start:.1f} wall s after the warm-up (not timed)"
            )

        return fill

    steps = []
    for n in sizes:
        overlay = base()
        overlay["load"]["rate"] = 20 * mu
        overlay["queue"] = {"capacity": n, "when_full": "block"}
        overlay["throttle"] = {"enabled": False}
        steps.append(Step(f"backlog {n:,}", overlay, prepare=filler(n)))
    return "backlog", how, steps


def stages_dims(quick: bool) -> list[tuple[str, str, list[Step], bool]]:
    counts = [5, 50]
    chain_steps = [Step(f"chain of {n}", base(stages=chain(n)), visits=n) for n in counts]
    layered_steps = [Step(f"{n} stages in 5 layers", base(stages=layered(n))) for n in counts]
    return [
        (
            "stages (chain)",
            f"N stages in a chain, {MEAN_SERVICE * 1000:g} ms / N each, 4 workers at ρ {RHO}: a task walks all N, "
            "so the ratio is per stage visit",
            chain_steps,
            True,
        ),
        (
            "stages (layered)",
            f"N stages in 5 layers (an entry stage, the rest spread over 4 layers, each stage's next = the whole "
            f"next layer), {MEAN_SERVICE * 1000 / 5:g} ms each: a task walks 5 whatever N, so the DAG's size "
            "alone grows",
            layered_steps,
            False,
        ),
    ]


def faults_dim(quick: bool) -> tuple[str, str, list[Step]]:
    counts = [0, 10, 100]
    producers = max(counts)
    how = (
        f"4 workers at ρ {RHO}, {producers} producers sharing the rate (distinct targets); N slow_agent faults with "
        "factor 1.0 (the fault is held and judged every tick, the service is unchanged) on producer-0…N-1, "
        "TTL 1e6 s, injected through Controller.inject after an 8 s warm-up; faults.max_concurrent raised to 1,000"
    )

    def injector(n: int) -> Callable[[VirtualDaemon], str]:
        def inject(daemon: VirtualDaemon) -> str:
            for i in range(n):
                daemon.call(daemon.controller.faults.inject, "slow_agent", f"producer-{i}", {"factor": 1.0}, 1e6)
            active = len(daemon.exp.injector.active())
            return f"{active} faults active" if n else ""

        return inject

    steps = []
    for n in counts:
        overlay = base()
        overlay["load"]["producers"] = producers
        overlay["faults"] = {"max_concurrent": 1000, "max_ttl": 1e6, "default_ttl": 10.0}
        # Injected once the baseline is in (recovery.baseline_min 5 s fault-free), so each is judged every tick.
        steps.append(Step(f"{n} faults", overlay, prepare=injector(n), warm=8.0))
    return "faults", how, steps


# --- SSE subscribers, real time ---------------------------------------------------------------


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _completed(base_url: str) -> int:
    with urllib.request.urlopen(base_url + "/api/v1/report", timeout=30) as resp:
        return int(json.loads(resp.read())["tasks"]["completed"])


def sse_dim(quick: bool) -> None:
    counts = [0, 10, 100]
    window = 5.0 if quick else 15.0
    rate = 0.5 * SMALL_WORKERS / MEAN_SERVICE  # real sleeps overshoot: ρ 0.5 leaves room for a busy machine
    env = {
        "CHAOSD_LOAD__RATE": str(rate),
        "CHAOSD_THROTTLE__ENABLED": "false",  # else a slow machine trips the detector and admission is cut
        "CHAOSD_STAGES": json.dumps(chain(SMALL_STAGES)),
        "CHAOSD_API__MAX_SSE_SUBSCRIBERS": "200",
    }
    how = (
        f"a real daemon (bench/_daemon.py), {SMALL_STAGES}-stage chain, 4 workers, offered {rate:g}/s (ρ 0.5), "
        "throttle off; "
        f"N GET /api/v1/events streams held open by aiohttp clients reading everything; per step {window:g} s: "
        "the daemon's CPU time (/proc/<pid>/stat, utime + stime) over tasks completed (GET /api/v1/report)"
    )

    async def measure(pid: int, url: str) -> list[tuple[str, int, float, float, int]]:
        rows = []
        received: list[int] = []
        streams: list[asyncio.Task[None]] = []
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None)) as session:

            async def stream(slot: int) -> None:
                async with session.get(url + "/api/v1/events") as resp:
                    resp.raise_for_status()
                    async for chunk in resp.content.iter_any():
                        received[slot] += chunk.count(b"\ndata:") + chunk.startswith(b"data:")

            await asyncio.sleep(2.0)  # the daemon settles
            for label, n in [(f"{c} subscribers", c) for c in counts] + [(f"{counts[0]} subscribers (again)", 0)]:
                while len(streams) < n:
                    received.append(0)
                    streams.append(asyncio.create_task(stream(len(received) - 1)))
                while len(streams) > n:
                    streams.pop().cancel()
                await asyncio.sleep(1.0)  # streams open and replay nothing; the rate is steady
                got0 = sum(received)
                done0 = await asyncio.to_thread(_completed, url)
                cpu0, t0 = _cpu_s(pid), time.perf_counter()
                await asyncio.sleep(window)
                cpu1, t1 = _cpu_s(pid), time.perf_counter()
                done1 = await asyncio.to_thread(_completed, url)
                rows.append((label, done1 - done0, cpu1 - cpu0, t1 - t0, sum(received) - got0))
                print(f"   .. sse: {label} {(cpu1 - cpu0) / max(1, done1 - done0) * 1e6:.1f} CPU µs/task", flush=True)
            for task in streams:
                task.cancel()
            await asyncio.gather(*streams, return_exceptions=True)
        return rows

    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_daemon(Path(tmp), env)
        try:
            rows = asyncio.run(measure(proc.pid, url))
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    ref = statistics.fmean(cpu / tasks for label, tasks, cpu, _, _ in rows if label.startswith(f"{counts[0]} "))
    print("\n== SSE subscribers (real time)")
    print(f"   {how}")
    print(
        f"   {'setting':<26} {'tasks':>7} {'wall s':>7} {'tasks/s':>8} {'CPU s':>6} {'CPU %':>6} "
        f"{'CPU µs/task':>12} {'events rx':>10} {'ratio':>6}"
    )
    for label, tasks, cpu, wall, got in rows:
        ratio = cpu / tasks / ref
        mark = f"  > {FLAG}×" if ratio > FLAG else ""
        print(
            f"   {label:<26} {tasks:7d} {wall:7.1f} {tasks / wall:8.1f} {cpu:6.2f} {cpu / wall * 100:6.1f} "
            f"{cpu / tasks * 1e6:12.1f} {got:10d} {ratio:6.2f}{mark}"
        )
    print(
        "   ratio: daemon CPU µs per task over the mean of the 0-subscriber runs; CPU clock ticks are 10 ms, "
        "events rx = SSE data frames all clients received in the window (no faults: score events, one per 5 s)"
    )
    if any(cpu / tasks / ref > FLAG for label, tasks, cpu, _, _ in rows):
        print(
            "   (a step is over 1.5×: profile the daemon with `python -m cProfile -o out.prof -m chaosd` under the "
            "same environment and load; this bench does not restart it under the profiler)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller steps and fewer tasks")
    parser.add_argument("--only", choices=["workers", "backlog", "stages", "faults", "sse"], help="one dimension")
    parser.add_argument("--tasks", type=int, default=None, help="tasks per timed phase (default 30,000; quick 5,000)")
    args = parser.parse_args()
    tasks = args.tasks or (5_000 if args.quick else 30_000)
    # At least 10 telemetry ticks timed; at the low rates the task count makes the phase much longer anyway, and
    # at the high ones a periodic job (the 5 s score event) weighs next to nothing per task.
    min_sim = 1.0
    rounds = 3 if args.quick else 5
    wall0 = time.perf_counter()
    print(
        f"per step: ≥ {tasks:,} tasks or ≥ {min_sim:g} simulated s timed in {rounds} interleaved chunks, after a "
        "warm-up; wall µs per completed task on the virtual clock (the daemon's Experiment + Controller and its "
        "telemetry listeners)"
    )
    only = args.only
    if only in (None, "workers"):
        title, how, steps = workers_dim(args.quick)
        run_dimension(title, how, steps, tasks, min_sim, rounds)
    if only in (None, "backlog"):
        title, how, steps = backlog_dim(args.quick)
        run_dimension(title, how, steps, tasks, min_sim, rounds)
    if only in (None, "stages"):
        for title, how, steps, per_visit in stages_dims(args.quick):
            run_dimension(title, how, steps, tasks, min_sim, rounds, per_visit=per_visit)
    if only in (None, "faults"):
        title, how, steps = faults_dim(args.quick)
        run_dimension(title, how, steps, tasks, min_sim, rounds)
    if only in (None, "sse"):
        sse_dim(args.quick)
    print(f"\nscale: {time.perf_counter() - wall0:.0f} wall s in all")


if __name__ == "__main__":
    main()
