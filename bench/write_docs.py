"""Write docs/benchmarks.md from the bench scripts' own output: each section the current figures, their date and
the command that measured them.

Every bench script in ``BENCHES`` is run as a child process (its own interpreter, from the repository root) and
its standard output becomes its section. A section says when it was measured, with which command, at which
commit, how long it took and how loaded the machine was; nothing else in the file is hand-written, so there is no
history to go stale (``git log docs/benchmarks.md`` keeps that).

    python bench/write_docs.py                       # every bench (about 25 minutes)
    python bench/write_docs.py --only admission,scale  # re-measure these; keep the other sections as they are
    python bench/write_docs.py --check               # exit 1 if the file is not what this script writes

A bench that fails keeps its previous section and makes the script exit 1, naming it.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"


@dataclass(frozen=True)
class Bench:
    name: str  # the script, bench/<name>.py, and the section's key
    title: str
    args: tuple[str, ...]  # the command's arguments as measured
    what: str  # what it measures, against which baseline
    target: str = ""
    markdown: bool = False  # its output is Markdown already (else it goes in a text block)
    timeout: float = 1800.0


BENCHES = (
    Bench(
        "virtual_speed",
        "Virtual-time speed",
        (),
        "The full pipeline (agent runtime, leases, telemetry, injector) at 1,000 tasks/s in virtual time, in "
        "simulated seconds per wall second, against a bare `asyncio.Queue` pipeline on the same virtual loop",
        "≥ 40 simulated s per wall s; at most 1.18× bare",
    ),
    Bench(
        "peers",
        "Virtual-time speed against SimPy and Ciw",
        (),
        "The `saturation` scenario's M/M/4 at ρ 0.9 (360 tasks/s, 10 ms exponential service) three ways, "
        "interleaved: chaosd's full pipeline in virtual time, SimPy's bare model (a `Resource` of 4) and Ciw (one "
        "node, 4 servers), in simulated seconds per wall second, with each one's mean wait against Erlang C's",
        "chaosd at least as fast as SimPy's bare model (ratio ≥ 1)",
    ),
    Bench(
        "engine",
        "The virtual-time engine against SimPy",
        ("--compiled",),
        "From one run, interleaved pairs: M/M/4 at ρ 0.9 (detector and throttle off) against SimPy's bare model, and "
        "the default config at 200/s and 1,000/s against a SimPy model of the same stages, telemetry tick and "
        "admission, in simulated seconds per wall second; wall time of one 600 s run against ten 60 s runs; max RSS "
        "of fresh processes running 600 s and 3,600 s. First on the checkout's editable install (plain Python), then "
        "the comparisons again on a wheel of it, whose hot path mypyc compiles (what `pip install .` installs)",
        "M/M/4 ≥ 2× SimPy; the default config ≥ 1× its SimPy model; 600 s within 1.15× of 10 × 60 s; RSS within 5 MB",
        timeout=900.0,
    ),
    Bench(
        "resilience_speed",
        "Virtual-time speed with faults",
        (),
        "The default agent DAG at 200 tasks/s: fault-free, `cascading_storm`, and survival mode with every "
        "action every 10 s, interleaved",
        "faults cost no speed",
    ),
    Bench(
        "realtime_throughput",
        "Real-time throughput",
        (),
        "Tasks/s at zero service time, 1 producer and 1 worker, against a bare asyncio producer/queue/consumer",
        "≥ 100k tasks/s; at most 2.5× bare",
    ),
    Bench(
        "telemetry_overhead",
        "Telemetry overhead",
        (),
        "The real-time pipeline with full telemetry (ticker, detector, throttle, injector, score) on vs off",
        "ratio ≤ 2",
    ),
    Bench(
        "timer_accuracy",
        "Timer accuracy",
        (),
        "How late `asyncio.sleep` of 0.5–2.5 ms wakes on epoll, `poll()`, `select()` and chaosd's loop",
        "chaosd's loop about as accurate as `select()`",
    ),
    Bench(
        "realtime_breakdown",
        "Real time against virtual time",
        (),
        "M/M/2 at ρ 0.7 (default telemetry, detector, throttle) on the real clock against virtual time for the "
        "same seed: where each task's real time goes (arrival timer, admission, dispatch, service, completion) "
        "against a bare sleep's lateness in the same run, and the real/virtual ratios of mean sojourn, mean wait "
        "and p95 sojourn, with catch-up and without (each service timed from its wake-up)",
        "ratios within 1.02 (mean sojourn), 1.04 (mean wait), 1.03 (p95 sojourn)",
    ),
    Bench(
        "dependency_proxy",
        "Dependency fault proxy",
        (),
        "Per-call cost of a python stage's calls through its dependency's fault proxy with no fault (small GET, "
        "64 KiB GET with a pooled aiohttp session; TCP echo round trip), against the same local service called "
        "directly, interleaved",
        "adds at most 0.5 ms per call with no fault",
    ),
    Bench(
        "scrape_and_spans",
        "Scrapes and spans",
        (),
        "`/metrics` scrape latency against a real daemon, idle and saturated (queue full); spans dropped at "
        "the default 1-in-1,000 sampling at maximum throughput",
        "p95 ≤ 10 ms; 0 spans dropped",
    ),
    Bench(
        "metrics_under_load",
        "Scrapes at 1,000 tasks/s and after a simulated week",
        (),
        "`/metrics` p50/p95/max over HTTP from two real daemons offered 1,000 tasks/s, scraped in turn: as shipped "
        "(the pipeline's series rendered once a telemetry tick) against the same build rendering at each scrape; "
        "then the tick's render and a scrape timed after a simulated week of survival (the daemon's parts on the "
        "virtual clock) against its first hour",
        "p95 ≤ 10 ms at 1,000 tasks/s; the render no slower after a week",
    ),
    Bench(
        "api_latency",
        "API latency",
        (),
        "p50/p99 of `GET /api/v1/status` and `POST /api/v1/faults` (+ `DELETE`), 500 sequential requests per "
        "route, against a real daemon idle (ρ 0.5) and saturated (about 2× capacity)",
    ),
    Bench(
        "connections",
        "Idle connections",
        ("--max", "8000"),
        "Idle connections a real daemon holds, opened 1,000 at a time, with a `GET /api/v1/status` after each "
        "step: its latency, the daemon's RSS and open descriptors",
        "holds `api.max_connections` (8,192 by default)",
    ),
    Bench(
        "arena_burst",
        "The Arena under an event storm",
        (),
        "A click in the Arena (headless Chromium, real daemon) answered while 5,000 events land at once, "
        "against a click with none",
        "click < 200 ms during a burst",
    ),
    Bench(
        "scale",
        "Scale",
        ("--quick",),
        "Wall cost per simulated task as one dimension grows ×10 at a time: workers, queue backlog, DAG "
        "stages, concurrent faults, SSE subscribers",
        "every step within 1.5×",
    ),
    Bench(
        "soak",
        "Soak",
        (),
        "The daemon's parts on the virtual clock in survival mode for a simulated week: RSS and every "
        "long-lived structure's size each simulated hour, then the answers timed with that history held",
        "RSS ≤ 1 MB per simulated day after day 1 and ≤ 8 MB from 8 h to 48 h, no structure growing; a tick ≤ 1 ms, "
        "`/metrics` ≤ 10 ms",
    ),
    Bench(
        "memory",
        "Memory in simulated time",
        (),
        "Max RSS of offline runs (`config/chaosd.toml`, 200 tasks/s) of 60 s, 600 s and 3,600 s, each in a fresh "
        "interpreter, and the soak's daemon RSS at 8 h and 48 h; a control with the stage histograms never drained "
        "must grow",
        "600 s and 3,600 s within 5 MB; the daemon grows ≤ 8 MB from 8 h to 48 h",
    ),
    Bench(
        "redis_throughput",
        "Redis Streams throughput",
        ("--quick",),
        "Tasks/s through Redis Streams end to end (the daemon's producers, 4 worker processes, results read back "
        "into the ledger) and drain only (1, 2 and 4 workers), against `redis-benchmark`'s XADD rate and Dramatiq's "
        "4 worker processes on the same Redis, all measured in the same run",
        "end to end ≥ 0.2× the XADD rate",
    ),
    Bench(
        "admission",
        "Admission control",
        ("--markdown",),
        "`none`, `aimd`, `capacity` and an oracle side by side in five situations",
        "the capacity policy's targets, listed in its section",
        markdown=True,
    ),
    Bench(
        "metastable",
        "Retry storms: the threshold, the ways out, the cost",
        (),
        "From one run: the retry_storm pipeline after a 10 s spike at loads from half to twice the predicted storm "
        "threshold (share of seeds out of the storm at the end of 240 s runs); the ways out side by side at twice the "
        "threshold (share of seeds back to 90 % goodput within 20 s of the spike); the default config's speed with a "
        "callers' policy that never fires against callers that wait forever, interleaved pairs",
        "every seed drains below the threshold and none above it; drop_expired, a 10 % budget and admission end the "
        "storm; the callers' model costs ≤ 10 % of engine speed",
        timeout=900.0,
    ),
    Bench(
        "replications",
        "Replications and sweeps on local processes",
        (),
        "Wall time of the same 8 replications (120 s survival runs) and of an 8-point sweep (`overload` over "
        "`load.rate`, 60 s runs) with `--jobs 1` and `--jobs 2`, interleaved with a pure-Python peer; the reports "
        "must be the same bytes",
        "≥ 1.8× with 2 jobs on 2 cores",
    ),
)

HEADER = """# Benchmarks

Written by `python bench/write_docs.py` from the bench scripts' own output; each section gives the command that
measured it, the date and the commit. The machine is shared and noisy, so each script measures chaosd against a
baseline or a peer in the same run (interleaved where it can) and prints ratios as well as absolute figures. Run
one from the repository root to measure it again.
"""

_SECTION = re.compile(r"^## (?P<title>.+?)\n(?P<body>.*?)(?=^## |\Z)", re.M | re.S)
_KEY = re.compile(r"^<!-- bench: (?P<name>[a-z_]+), digest (?P<digest>[0-9a-f]{16}) -->\n", re.M)


def digest(section: str) -> str:
    """Of a section as the script wrote it, less its marker line: a hand edit anywhere in it no longer matches."""
    return hashlib.sha256(_KEY.sub("", section, count=1).rstrip("\n").encode()).hexdigest()[:16]


def tampered(text: str) -> list[str]:
    """The sections whose text is not what the script wrote (their digest does not match)."""
    bad = []
    for m in _SECTION.finditer(text):
        key = _KEY.search(m.group("body"))
        if key is not None and digest(m.group(0)) != key.group("digest"):
            bad.append(key.group("name"))
    return bad


def command(bench: Bench) -> str:
    return " ".join(["python", f"bench/{bench.name}.py", *bench.args])


def table() -> str:
    rows = ["| script | what it measures | target |", "|---|---|---|"]
    rows += [f"| `{command(b)}` | {b.what} | {b.target} |" for b in BENCHES]
    return "\n".join(rows)


def sections(text: str) -> dict[str, str]:
    """The measured sections of an existing file, by bench name (the marker each section starts with)."""
    found: dict[str, str] = {}
    for m in _SECTION.finditer(text):
        key = _KEY.search(m.group("body"))
        if key is not None:
            found[key.group("name")] = m.group(0).rstrip("\n")
    return found


def render(measured: dict[str, str]) -> str:
    parts = [HEADER, "## The bench scripts\n\n" + table()]
    for bench in BENCHES:
        parts.append(measured.get(bench.name) or _section(bench, "\nNot measured yet."))
    return "\n\n".join(p.strip("\n") for p in parts) + "\n"


def revision() -> str:
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "chaosd", "bench"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "an unknown commit"
    return f"commit {head}" + (" with uncommitted changes" if dirty else "")


def measure(bench: Bench) -> str:
    """Run one bench; its section. Raises RuntimeError (with the script's stderr tail) if it fails."""
    load = os.getloadavg()[0]
    began = time.perf_counter()
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / f"{bench.name}.py"), *bench.args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=bench.timeout,
        check=False,
    )
    wall = time.perf_counter() - began
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        raise RuntimeError(f"{command(bench)} exited {done.returncode}: {tail}")
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    machine = f"load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end, {os.cpu_count()} CPUs"
    lines = [
        "",
        f"Measured {date} with `{command(bench)}` ({wall:.0f} s wall, {revision()}; {machine}).",
        "",
    ]
    out = done.stdout.strip("\n")
    lines += [out] if bench.markdown else ["```text", out, "```"]
    return _section(bench, "\n".join(lines))


def _section(bench: Bench, body: str) -> str:
    return _marked(bench.name, f"## {bench.title}\n\n{body}")


def _marked(name: str, section: str) -> str:
    """The section with its marker (its bench and digest) after the heading."""
    title, rest = section.split("\n\n", 1)
    return f"{title}\n\n<!-- bench: {name}, digest {digest(section)} -->\n{rest}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=None, help="comma-separated bench names (default: all)")
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is not what this script writes")
    parser.add_argument("--out", type=Path, default=DOC, help="the file to write (default: docs/benchmarks.md)")
    args = parser.parse_args()
    names = [b.name for b in BENCHES]
    existing = args.out.read_text(encoding="utf-8") if args.out.exists() else ""
    measured = sections(existing)
    if args.check:
        bad = tampered(existing)
        ok = render(measured) == existing and not bad
        verdict = "as written by bench/write_docs.py" if ok else "differs from what bench/write_docs.py writes"
        print(f"{args.out}: {verdict}" + (f" (edited by hand: {', '.join(bad)})" if bad else ""))
        return 0 if ok else 1
    wanted = args.only.split(",") if args.only else names
    unknown = sorted(set(wanted) - set(names))
    if unknown:
        parser.error(f"--only: unknown bench(es) {', '.join(unknown)} (valid: {', '.join(names)})")
    failed = []
    for bench in BENCHES:
        if bench.name not in wanted:
            continue
        print(f"{command(bench)} …", file=sys.stderr, flush=True)
        try:
            measured[bench.name] = measure(bench)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            failed.append(bench.name)
            print(f"  failed, its previous section kept: {exc}", file=sys.stderr, flush=True)
        args.out.write_text(render(measured), encoding="utf-8")  # after each: a later failure loses nothing
    print(f"wrote {args.out}" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
