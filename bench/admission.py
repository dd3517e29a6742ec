"""Admission control side by side: none, aimd, capacity (the controller) and an oracle that admits exactly the capacity.

Every policy runs every situation with the same seed, in one run of this script:

1. overload     scenarios/overload.yaml: 4 workers x 100/s = 400/s, a ramp to 520/s held from 90 to 120 s.
                Stress: the hold; goodput / 400.
2. spike        the default config (4 workers, ~10 ms a task, 200/s offered, queue 10,000, deadline 1 s) and a
                x100 ``load_spike`` for 20 s from t = 20 s: a spike into a full queue. Stress: the spike; / 400.
3. retry_storm  scenarios/pressure_storm.yaml (pressure failures + stage retries, 280/s, a 5 s spike to 800/s at
                30 s) with the throttle enabled and the policy set. Stress: 30 s after the spike (65 s) to the end;
                / 280.
3b. callers     scenarios/retry_storm.yaml (callers that wait 1 s and retry 3 times, 200 callers/s against 400/s, a
                10 s spike to 800/s at 30 s): a storm that holds itself without admission. Stress: 20 s after the
                spike (60 s) to the end; goodput / 200 (the callers).
4. pool         the default config and a 75 % ``pool_exhaustion`` for 20 s from t = 20 s (capacity 400/s -> 100/s
                -> 400/s). Stress: the fault; / 100.
5. stall        the default config (rho ~ 0.5) in real time, in a child process (this script with ``--child``); the
                parent stops the child as a CPU-throttled container is stopped: SIGSTOP 300 ms / SIGCONT 200 ms for
                10 s from t = 20 s. Stress: the whole measured run (2 s to the end); goodput / offered (200).

The oracle is this bench's, not the product's: each tick it sets ``factor = min(1, capacity / offered)`` from the true
capacity (workers able to work / the configured mean service time: 400/s, 100/s during the pool exhaustion, the
nominal 400/s in retry_storm) and the true offered rate (the load shape x any load_spike), and bounds the queue at
capacity x deadline. It is plugged into the experiment at the start of the run (see ``install_oracle``).

Columns (all counts from the ledger's cumulative totals read at each telemetry tick, 0.1 s apart):
  goodput     completions within the deadline per second over the stress, as a share of the capacity (the stall:
              of the offered rate)
  x oracle    that goodput over the oracle's in the same situation
  p95 max     the largest 1 s window sojourn p95 of the ticks in the stress (the snapshots' ``sojourn_p95``)
  p95 all     the sojourn p95 of every task that ended in the stress (histogram difference)
  shed        refused (any reason) / attempts offered over the stress
  admit       time to full admission: from when capacity (or the normal load) returns -- the hold's end, the
              spike's end, the fault's end, the stall's end -- to the last tick that saw a refusal before 5 s
              without any (tick resolution 0.1 s; 0 = no refusal after it; "never" = still refusing at the end)
  good back   from the same instant until the 1 s window goodput stays >= 90 % of the 1 s offered rate for 5 s
  alarms      the detector's alarms (report collapse.alarms) / collapses (count) / stalls

    python bench/admission.py                 # ~5 min: four real-time minutes for the stall
    python bench/admission.py --quick         # shorter runs, a 20 s stall
    python bench/admission.py --skip-realtime # virtual time only: seconds per situation
    python bench/admission.py --markdown       # the results as Markdown (bench/write_docs.py's section)
"""

from __future__ import annotations

import argparse
import bisect
import csv
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from chaosd.admission.detector import DetectorState
from chaosd.admission.throttle import Throttle, ThrottleAction
from chaosd.config.settings import Settings, load_settings
from chaosd.core.histogram import percentiles
from chaosd.experiment.runner import Experiment, run_offline
from chaosd.experiment.scenario import find_scenario, load_scenario, settings_for
from chaosd.telemetry.snapshot import Snapshot

POLICIES = ("none", "aimd", "capacity", "oracle")
QUIET = 5.0  # seconds without a refusal that count as full admission
BACK = 0.9  # goodput back: this share of the offered rate

# The stall's duty cycle: a container at its CPU quota is stopped for the rest of each period.
STOP_S = 0.3
RUN_S = 0.2


# --- the oracle ----------------------------------------------------------------------------------


class Oracle(Throttle):
    """Admits exactly the capacity: it knows the true capacity and offered rate, which no product policy can."""

    def __init__(self, exp: Experiment) -> None:
        s = exp.settings
        super().__init__(
            s.throttle.model_copy(update={"enabled": False}),
            s.history.entries,
            tick=s.telemetry.tick,
            capacity=s.queue.capacity,
            deadline=s.load.deadline,
        )
        self.policy = "oracle"  # type: ignore[assignment]
        self._pipeline = exp.pipeline
        self._deadline = s.load.deadline

    def true_capacity(self) -> float:
        """Workers able to work over the configured mean service time (the route's expected service)."""
        p = self._pipeline
        able = sum(1 for w in p.workers if w.agent.gate_open)
        return able / p.mean_service if p.mean_service > 0 else math.inf

    def update(self, state: DetectorState, snap: Snapshot) -> ThrottleAction | None:
        p = self._pipeline
        capacity = self.true_capacity()
        offered = p.shape.rate_at(snap.t) * p.surge.factor
        self.factor = 1.0 if offered <= capacity else capacity / offered
        if math.isfinite(capacity):
            self.limit = min(self.queue_capacity, max(1, math.ceil(capacity * self._deadline)))
        self.capacity_rate = capacity
        self.lowest_factor = min(self.lowest_factor, self.factor)
        self.lowest_limit = min(self.lowest_limit, self.limit)
        return None


def install_oracle(exp: Experiment) -> Oracle:
    """Put the oracle where the experiment's throttle was: the tick's ``throttle.update`` and the producers' factor.

    The product has no hook for another admission object (``Experiment`` builds its ``Throttle`` and hands it to
    ``make_pipeline``, whose producers keep it as ``_admission``), so the references are replaced here, before the
    first tick and the first arrival.
    """
    oracle = Oracle(exp)
    exp.throttle = oracle
    p = exp.pipeline
    p.admission = oracle
    for producer in p.producers:
        producer._admission = oracle
    p.queue.limit = oracle.limit
    return oracle


# --- situations ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fault:
    at: float
    action: str
    target: str | None
    params: dict[str, object]
    ttl: float


@dataclass(frozen=True)
class Situation:
    name: str
    settings: Settings
    duration: float
    warmup: float
    window: tuple[float, float]  # the stress, seconds since the start
    divisor: float  # goodput is reported as a share of this (capacity, or the offered rate)
    divisor_label: str
    returns: float  # when capacity (or the normal load) returns: full admission is timed from here
    faults: tuple[Fault, ...] = ()
    realtime: bool = False
    stall: tuple[float, float] | None = None  # (start, length) of the SIGSTOP/SIGCONT duty cycle


def _scenario_settings(name: str) -> Settings:
    path = find_scenario(name)
    return settings_for(load_scenario(path), path, None)


def situations(quick: bool) -> dict[str, Situation]:
    default = load_settings()
    overload = _scenario_settings("overload")
    retry = _scenario_settings("pressure_storm")
    callers = _scenario_settings("retry_storm")
    tail = 40.0 if quick else 60.0  # after a 20 s fault at 20 s
    storm_end = 150.0 if quick else retry.run.duration
    stall_len = 20.0 if quick else 60.0
    stall_at = 5.0 if quick else 20.0
    return {
        "overload": Situation(
            "overload",
            overload,
            duration=125.0 if quick else overload.run.duration,
            warmup=10.0,
            window=(90.0, 120.0),
            divisor=400.0,
            divisor_label="÷400 (hold 90–120 s)",
            returns=120.0,
        ),
        "spike": Situation(
            "spike",
            default,
            duration=40.0 + tail,
            warmup=5.0,
            window=(20.0, 40.0),
            divisor=400.0,
            divisor_label="÷400 (spike 20–40 s)",
            returns=40.0,
            faults=(Fault(20.0, "load_spike", None, {"factor": 100.0}, 20.0),),
        ),
        "retry_storm": Situation(
            "retry_storm",
            retry,
            duration=storm_end,
            warmup=10.0,
            window=(65.0, storm_end),
            divisor=280.0,
            divisor_label=f"÷280 (65–{storm_end:g} s)",
            returns=35.0,
        ),
        "callers": Situation(
            "callers",
            callers,
            duration=callers.run.duration,
            warmup=10.0,
            window=(60.0, callers.run.duration),
            divisor=200.0,
            divisor_label=f"÷200 callers (60–{callers.run.duration:g} s)",
            returns=40.0,
        ),
        "pool": Situation(
            "pool",
            default,
            duration=40.0 + tail,
            warmup=5.0,
            window=(20.0, 40.0),
            divisor=100.0,
            divisor_label="÷100 (fault 20–40 s)",
            returns=40.0,
            faults=(Fault(20.0, "pool_exhaustion", "75%", {}, 20.0),),
        ),
        "stall": Situation(
            "stall",
            default,
            duration=stall_len,
            warmup=2.0,
            window=(2.0, stall_len),
            divisor=default.load.rate,
            divisor_label=f"÷offered {default.load.rate:g} (2–{stall_len:g} s)",
            returns=stall_at + 10.0,
            realtime=True,
            stall=(stall_at, 10.0),
        ),
    }


def with_policy(settings: Settings, policy: str) -> Settings:
    """The settings with the throttle enabled and ``policy`` set (the oracle starts from ``none``)."""
    product = "none" if policy == "oracle" else policy
    throttle = settings.throttle.model_copy(update={"enabled": True, "policy": product})
    return settings.model_copy(update={"throttle": throttle})


# --- one run ------------------------------------------------------------------------------------


class Row(NamedTuple):
    """One tick. Counts are the ledger's totals (all cohorts); rates and p95 are the snapshot's 1 s windows.
    ``limit``, ``factor`` and ``state`` are as the previous tick left them (listeners run before the throttle)."""

    t: float
    offered: int  # attempts offered: first ones and callers' retries
    accepted: int
    refused: int
    good: int
    goodput: float
    arrival: float
    admitted: float
    p95: float
    depth: int
    capacity_rate: float
    limit: int
    factor: float
    state: str
    lateness: float


@dataclass
class Result:
    rows: list[Row]
    hist: dict[str, list[int]]  # the sojourn histogram at the stress's start and end
    report: dict[str, Any]
    wall: float
    stops: int = 0  # the stall's SIGSTOPs


class Collector:
    """The on_tick listener: one small row per tick (bounded by the run's ticks), two histogram copies."""

    def __init__(self, sit: Situation) -> None:
        self.exp: Experiment | None = None
        tick = sit.settings.telemetry.tick
        self.rows: deque[Row] = deque(maxlen=math.ceil(sit.duration / tick) + 10)
        self.window = sit.window
        self.hist: dict[str, list[int]] = {}

    def on_tick(self, snap: Snapshot) -> None:
        exp = self.exp
        if exp is None:
            return
        p = exp.pipeline
        total = p.ledger.total
        self.rows.append(
            Row(
                snap.t,
                total.offered + total.retried,  # attempts: callers' retries are offered and refused too
                total.accepted,
                total.rejected,
                p.ledger.good,
                snap.goodput,
                snap.arrival_rate,
                snap.admitted_rate,
                snap.sojourn_p95,
                snap.queue_depth,
                snap.capacity_rate,
                p.queue.limit,
                exp.throttle.factor,
                exp.detector.state.value,
                snap.lateness,
            )
        )
        for key, at in zip(("start", "end"), self.window, strict=True):
            if key not in self.hist and snap.t >= at - 1e-6:
                self.hist[key] = p.sojourn.snapshot().tolist()


def make_plan(
    collector: Collector, sit: Situation, oracle: bool, started: Callable[[], None] | None = None
) -> Callable[[Experiment], Coroutine[Any, Any, None]]:
    async def plan(exp: Experiment) -> None:
        collector.exp = exp
        if oracle:
            install_oracle(exp)
        if started is not None:
            started()
        t0 = exp.pipeline.t0
        for fault in sit.faults:
            await exp.clock.sleep_until(t0 + fault.at)
            exp.injector.inject(fault.action, fault.target, fault.params, fault.ttl)

    return plan


def _slim(report: dict[str, Any]) -> dict[str, Any]:
    return {
        "collapse": {k: report["collapse"][k] for k in ("alarms", "count", "stalls", "final_state")},
        "tasks": {k: report["tasks"][k] for k in ("offered", "rejected", "rejected_by", "late", "failed")},
        "throttle": {k: report["throttle"][k] for k in ("policy", "lowest_factor", "lowest_limit", "final_factor")},
    }


def run_one(sit: Situation, policy: str, started: Callable[[], None] | None = None) -> Result:
    collector = Collector(sit)
    start = time.perf_counter()
    report = run_offline(
        with_policy(sit.settings, policy),
        duration=sit.duration,
        warmup=sit.warmup,
        virtual=not sit.realtime,
        scenario=sit.name,
        plan=make_plan(collector, sit, policy == "oracle", started),
        on_tick=collector.on_tick,
    )
    wall = time.perf_counter() - start
    if collector.exp is not None and "end" not in collector.hist:  # the stress runs to the end of the run
        collector.hist["end"] = collector.exp.pipeline.sojourn.snapshot().tolist()
    return Result(list(collector.rows), collector.hist, _slim(report), wall)


def child(policy: str, quick: bool) -> None:
    """The stall's pipeline, stopped and continued by the parent: says STARTED at t = 0, then RESULT <json>."""

    def started() -> None:
        print("STARTED", flush=True)

    result = run_one(situations(quick)["stall"], policy, started)
    payload = {"rows": result.rows, "hist": result.hist, "report": result.report, "wall": result.wall}
    print("RESULT " + json.dumps(payload), flush=True)


def run_stall(sit: Situation, policy: str, quick: bool) -> Result:
    """Run the stall's pipeline in a child process and stop/continue it from here."""
    assert sit.stall is not None
    at, length = sit.stall
    cmd = [sys.executable, os.path.abspath(__file__), "--child", policy] + (["--quick"] if quick else [])
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    stops = 0
    try:
        line = proc.stdout.readline()
        if line.strip() != "STARTED":
            proc.wait()
            raise RuntimeError(f"stall child ({policy}) did not start: {line!r}, exit {proc.returncode}")
        t0 = time.monotonic()
        time.sleep(max(0.0, t0 + at - time.monotonic()))
        until = t0 + at + length
        while time.monotonic() < until:
            os.kill(proc.pid, signal.SIGSTOP)
            stops += 1
            time.sleep(STOP_S)
            os.kill(proc.pid, signal.SIGCONT)
            time.sleep(RUN_S)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
    out, _ = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"stall child ({policy}) exited {proc.returncode}")
    payload = next(json.loads(x[len("RESULT ") :]) for x in out.splitlines() if x.startswith("RESULT "))
    rows = [Row(*r) for r in payload["rows"]]
    return Result(rows, payload["hist"], payload["report"], time.perf_counter() - start, stops)


# --- measures ------------------------------------------------------------------------------------


@dataclass
class Measures:
    goodput: float  # per second over the stress
    share: float  # goodput / divisor
    p95_max: float
    p95_all: float
    shed: float
    admit: float | None  # None: still refusing at the end
    back: float | None
    alarms: tuple[int, int, int]
    last60: float | None = None  # retry_storm: goodput over the last 60 s / offered
    ratio: float | None = None  # to the oracle
    extra: dict[str, Any] = field(default_factory=dict)


def _row_at(rows: Sequence[Row], ts: Sequence[float], t: float) -> Row:
    """The first tick at or after ``t`` (the last tick if none)."""
    i = bisect.bisect_left(ts, t - 1e-6)
    return rows[min(i, len(rows) - 1)]


def full_admission(rows: Sequence[Row], since: float) -> float | None:
    """From ``since`` to the last tick with a refusal before QUIET s without one; 0 if none; None: never quiet."""
    prev: Row | None = None
    last: float | None = None
    for r in rows:
        if r.t <= since + 1e-6:
            prev = r
            continue
        if prev is not None and r.refused > prev.refused:
            last = r.t
        prev = r
        if r.t - (last if last is not None else since) >= QUIET:
            return 0.0 if last is None else max(0.0, last - since)
    return None


def goodput_back(rows: Sequence[Row], since: float) -> float | None:
    """From ``since`` until the window goodput stays >= BACK x the window offered rate for QUIET s."""
    run_start: float | None = None
    for r in rows:
        if r.t <= since + 1e-6:
            continue
        if r.goodput >= BACK * r.arrival:
            if run_start is None:
                run_start = r.t
            if r.t - run_start >= QUIET:
                return max(0.0, run_start - since)
        else:
            run_start = None
    return None


def measure(sit: Situation, res: Result) -> Measures:
    rows = res.rows
    ts = [r.t for r in rows]
    a, b = sit.window
    ra, rb = _row_at(rows, ts, a), _row_at(rows, ts, b)
    span = rb.t - ra.t or 1e-9
    goodput = (rb.good - ra.good) / span
    offered = rb.offered - ra.offered
    shed = (rb.refused - ra.refused) / offered if offered else 0.0
    inside = [r.p95 for r in rows if ra.t < r.t <= rb.t + 1e-6]
    h0, h1 = res.hist.get("start"), res.hist.get("end")
    p95_all = float("nan")
    if h0 and h1:
        p95_all = percentiles(np.asarray(h1, dtype=np.int64) - np.asarray(h0, dtype=np.int64), (0.95,))[0]
    c = res.report["collapse"]
    m = Measures(
        goodput=goodput,
        share=goodput / sit.divisor,
        p95_max=max(inside, default=0.0),
        p95_all=p95_all,
        shed=shed,
        admit=full_admission(rows, sit.returns),
        back=goodput_back(rows, sit.returns),
        alarms=(c["alarms"], c["count"], c["stalls"]),
    )
    if sit.name == "retry_storm":
        end = rows[-1]
        r60 = _row_at(rows, ts, end.t - 60.0)
        good60 = (end.good - r60.good) / (end.t - r60.t)
        offered60 = (end.offered - r60.offered) / (end.t - r60.t)
        m.last60 = good60 / offered60 if offered60 else 0.0
    if sit.name == "stall":
        tasks = res.report["tasks"]
        m.extra["refused_minute"] = tasks["rejected"] / tasks["offered"] if tasks["offered"] else 0.0
        m.extra["stops"] = res.stops
        m.extra["max_lateness"] = max((r.lateness for r in rows), default=0.0)
    return m


# --- output --------------------------------------------------------------------------------------

HEADER = (
    "situation",
    "policy",
    "goodput",
    "x oracle",
    "p95 max",
    "p95 all",
    "shed",
    "admit",
    "good back",
    "alarms",
    "note",
)


def _secs(x: float | None) -> str:
    return "never" if x is None else f"{x:.1f} s"


def table_rows(sits: dict[str, Situation], results: dict[tuple[str, str], Measures]) -> list[list[str]]:
    out = []
    for name, sit in sits.items():
        for policy in POLICIES:
            m = results.get((name, policy))
            if m is None:
                continue
            note = ""
            if m.last60 is not None:
                left = "left" if m.last60 >= 0.9 else "stuck"
                note = f"last 60 s goodput {m.last60:.2f} of offered: {left}"
            if "refused_minute" in m.extra:
                note = (
                    f"refused {m.extra['refused_minute']:.1%} of the minute; {m.extra['stops']} stops, "
                    f"max tick lateness {m.extra['max_lateness']:.2f} s"
                )
            out.append(
                [
                    f"{name} {sit.divisor_label}" if policy == POLICIES[0] else "",
                    policy,
                    f"{m.share:.2f}",
                    "-" if m.ratio is None else f"{m.ratio:.2f}",
                    f"{m.p95_max:.3f} s",
                    f"{m.p95_all:.3f} s",
                    f"{m.shed:.1%}",
                    _secs(m.admit),
                    _secs(m.back),
                    "/".join(map(str, m.alarms)),
                    note,
                ]
            )
    return out


def render_text(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [list(HEADER), *rows]) for i in range(len(HEADER))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(HEADER, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines)


def render_markdown(rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
    return "\n".join(lines)


def targets(sits: dict[str, Situation], results: dict[tuple[str, str], Measures]) -> list[tuple[str, bool | None]]:
    """The capacity policy's targets; None: not measured in this run."""

    def cap(name: str) -> Measures | None:
        return results.get((name, "capacity"))

    out: list[tuple[str, bool | None]] = []
    m = cap("overload")
    out.append(
        (
            "overload: goodput >= 95 % of capacity over the hold, p95 max <= deadline (1 s)"
            + (f" [{m.share:.2f}, {m.p95_max:.3f} s]" if m else ""),
            None if m is None else m.share >= 0.95 and m.p95_max <= 1.0,
        )
    )
    m = cap("spike")
    out.append(
        (
            "spike: goodput >= 80 % of capacity during the spike" + (f" [{m.share:.2f}]" if m else ""),
            None if m is None else m.share >= 0.80,
        )
    )
    ratios = {n: results[(n, "capacity")].ratio for n in sits if (n, "capacity") in results}
    measured = {n: r for n, r in ratios.items() if r is not None}
    worst = min(measured.items(), key=lambda kv: kv[1]) if measured else None
    out.append(
        (
            ">= 0.9 of the oracle's goodput everywhere"
            + (" [" + ", ".join(f"{n} {r:.2f}" for n, r in measured.items()) + "]" if measured else ""),
            None if worst is None else worst[1] >= 0.9,
        )
    )
    for name, what in (("pool", "the pool exhaustion ends"), ("spike", "the spike ends")):
        m = cap(name)
        out.append(
            (
                f"full admission within 1 s after {what}" + (f" [{_secs(m.admit)}]" if m else ""),
                None if m is None else m.admit is not None and m.admit <= 1.0,
            )
        )
    m = cap("retry_storm")
    out.append(
        (
            "retry_storm leaves its metastable state (goodput >= 90 % of offered over the last 60 s)"
            + (f" [{m.last60:.2f}]" if m and m.last60 is not None else ""),
            None if m is None or m.last60 is None else m.last60 >= 0.9,
        )
    )
    m = cap("callers")
    out.append(
        (
            "callers' retry storm: none, or it ends (goodput >= 90 % of the callers from 20 s after the spike)"
            + (f" [{m.share:.2f}]" if m else ""),
            None if m is None else m.share >= 0.9,
        )
    )
    m = cap("stall")
    refused = m.extra.get("refused_minute") if m else None
    out.append(
        (
            "stall: refuses <= 5 % over the minute" + (f" [{refused:.1%}]" if refused is not None else ""),
            None if refused is None else refused <= 0.05,
        )
    )
    return out


def verdicts(checks: list[tuple[str, bool | None]]) -> list[str]:
    return [f"{'SKIP' if ok is None else 'PASS' if ok else 'FAIL'}  {text}" for text, ok in checks]


def dump(directory: Path, name: str, policy: str, rows: Sequence[Row]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / f"{name}-{policy}.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(Row._fields)
        w.writerows(rows)


# --- main ----------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs (a 20 s stall)")
    parser.add_argument("--skip-realtime", action="store_true", help="skip the real-time stall")
    parser.add_argument("--only", default=None, help="comma-separated situations (default: all)")
    parser.add_argument(
        "--markdown", action="store_true", help="print the results as Markdown (what bench/write_docs.py records)"
    )
    parser.add_argument("--dump", type=Path, default=None, help="write each run's ticks as CSV into this directory")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child, args.quick)
        return

    began = time.perf_counter()
    load_before = os.getloadavg()[0]
    sits = situations(args.quick)
    if args.only:
        wanted = args.only.split(",")
        unknown = set(wanted) - set(sits)
        if unknown:
            parser.error(f"unknown situations: {', '.join(sorted(unknown))} (valid: {', '.join(sits)})")
        sits = {n: s for n, s in sits.items() if n in wanted}
    if args.skip_realtime:
        sits = {n: s for n, s in sits.items() if not s.realtime}

    results: dict[tuple[str, str], Measures] = {}
    for name, sit in sits.items():
        for policy in POLICIES:
            res = run_stall(sit, policy, args.quick) if sit.realtime else run_one(sit, policy)
            m = measure(sit, res)
            results[(name, policy)] = m
            if args.dump is not None:
                dump(args.dump, name, policy, res.rows)
            clock = "real" if sit.realtime else "virtual"
            print(
                f"  {name}/{policy}: {sit.duration:g} {clock} s in {res.wall:.1f} wall s; goodput {m.share:.2f}",
                file=sys.stderr,
                flush=True,
            )
        oracle = results[(name, "oracle")].goodput
        for policy in POLICIES:
            m = results[(name, policy)]
            m.ratio = m.goodput / oracle if oracle > 0 else None
    wall = time.perf_counter() - began
    # The stall runs in real time on a machine others share: what else ran beside it shows in its numbers.
    machine = f"load average {load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end, {os.cpu_count()} CPUs"

    rows = table_rows(sits, results)
    checks = verdicts(targets(sits, results))
    text = sys.stderr if args.markdown else sys.stdout  # with --markdown, stdout is the Markdown alone
    print(render_text(rows), file=text)
    print(file=text)
    print("capacity policy targets:", file=text)
    for line in checks:
        print("  " + line, file=text)
    if args.quick and "stall" in sits:
        print(
            "  (--quick: the stall's measured run is 18 s, not 58 s, so its refused share is ~3x the full run's)",
            file=text,
        )
    print(f"\nrun time: {wall:.0f} s wall ({machine})", file=text)

    if args.markdown:
        doc = __doc__.split("Columns", 1)[1].split("\n\n", 1)[0]
        body = "\n".join(
            [
                "Seed as in each config. "
                "Policies: `none`, `aimd`, `capacity` (the default controller) and an oracle the bench plugs in, "
                "which admits min(1, capacity / offered) from the true capacity and offered rate and bounds the "
                "queue at capacity × deadline.",
                "",
                "Situations: **overload** = scenarios/overload.yaml, stress the hold 90–120 s, goodput ÷ 400/s; "
                "**spike** = default config + `load_spike` ×100 for 20 s at 20 s, ÷ 400/s; **retry_storm** = "
                "scenarios/retry_storm.yaml with the throttle on, stress 65 s to the end, ÷ 280/s offered; "
                "**pool** = default config + 75 % `pool_exhaustion` for 20 s at 20 s, ÷ 100/s; **stall** = "
                "default config in real time in a child process, SIGSTOP 300 ms / SIGCONT 200 ms for 10 s, stress "
                "the whole measured run, ÷ offered 200/s.",
                "",
                "```text",
                "Columns" + doc.rstrip(),
                "```",
                "",
                render_markdown(rows),
                "",
                "Targets of the capacity policy:",
                "",
                *[f"- {line}" for line in checks],
            ]
        )
        print(body)


if __name__ == "__main__":
    main()
