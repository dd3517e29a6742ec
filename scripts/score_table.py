"""Regenerate the score table in docs/score.md: every shipped scenario and survival on the default config.

Runs `chaosd run` on every scenario in `scenarios/` (by name, with its own seed), survival with the 13 ARES
actions, survival with every action, and the two negative controls (supervisor off, non-idempotent sink) on
survival with the ARES actions; two runs at a time, each with its own report. Prints a Markdown table.

Usage: python scripts/score_table.py [--write] [--readme PATH] [--out DIR] [--only NAME[,NAME]] [--duration D]

--write replaces what lies between the `<!-- score-table:begin -->` and `<!-- score-table:end -->` markers of
docs/score.md (or of the file --readme names) and nothing else. The runs see no CHAOSD_* variable from the calling
shell: the table is of the default config, plus the negative controls' own overrides. Any failed run (including a
scenario that misses its own `expect:`) makes the script exit 1, naming the run, and leaves the file alone.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from chaosd.cli.exits import EXIT_EXPECTATION
from chaosd.faults.catalogue import CATALOGUE

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "scenarios"
README = ROOT / "docs" / "score.md"  # the file that holds the markers (--readme)
BEGIN = "<!-- score-table:begin -->"
END = "<!-- score-table:end -->"
SCENARIO_SUFFIXES = (".yaml", ".yml", ".json")
ARES_ACTIONS = ",".join(name for name, spec in CATALOGUE.items() if spec.ares)  # in the catalogue's order
SURVIVAL = ["--survival", "--interval", "10s", "--seed", "42"]
SURVIVAL_DURATION = "30m"
DASH = "—"
COLUMNS = (
    "run",
    "seed",
    "simulated (s)",
    "score",
    "grade",
    "availability",
    "recovery rate",
    "recovery speed",
    "consistency",
    "faults",
    "incidents",
    "recovered (%)",
    "mean time-to-heal (s)",
    "mean time-to-restore (s)",
    "lost",
    "duplicated",
)


@dataclass(frozen=True, eq=False)
class Run:
    name: str  # the row's label, the report's file name and what --only matches
    args: tuple[str, ...]  # after `chaosd run`
    env: dict[str, str] = field(default_factory=dict)
    survival: bool = False


def shipped_scenarios() -> list[str]:
    names = {p.stem for p in SCENARIOS.iterdir() if p.is_file() and p.suffix in SCENARIO_SUFFIXES}
    return sorted(names)


def all_runs() -> list[Run]:
    ares = (*SURVIVAL, "--actions", ARES_ACTIONS)
    return [
        *(Run(name, (name,)) for name in shipped_scenarios()),
        Run("survival", ares, survival=True),
        Run("survival-all", tuple(SURVIVAL), survival=True),
        Run("survival-no-supervisor", ares, {"CHAOSD_SUPERVISOR__ENABLED": "false"}, survival=True),
        Run("survival-non-idempotent", ares, {"CHAOSD_SINK__IDEMPOTENT": "false"}, survival=True),
    ]


def command(run: Run, report: Path, duration: str | None) -> list[str]:
    args = [sys.executable, "-m", "chaosd", "run", *run.args, "--quiet", "--report", str(report)]
    if duration is not None:
        args += ["--duration", duration]
    elif run.survival:
        args += ["--duration", SURVIVAL_DURATION]
    return args


def execute(run: Run, out: Path, duration: str | None) -> tuple[dict[str, Any] | None, str | None]:
    """One `chaosd run`: its report, or why it failed (with the command, to rerun it by hand)."""
    report = out / f"{run.name}.json"
    report.unlink(missing_ok=True)  # never read a stale report from an earlier --out
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHAOSD_")} | run.env
    args = command(run, report, duration)
    done = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    shown = " ".join([*(f"{k}={v}" for k, v in run.env.items()), "python", *args[1:]])
    if done.returncode == EXIT_EXPECTATION and report.exists():
        unmet = [
            f"{e.get('check', '?')} (wanted {e.get('expected')!r}, got {e.get('measured')!r})"
            for e in json.loads(report.read_text(encoding="utf-8")).get("expectations", [])
            if not e.get("passed")
        ]
        return None, f"missed its own expectations: {'; '.join(unmet)}\n    {shown}"
    if done.returncode != 0:
        last = (done.stderr.strip() or done.stdout.strip() or "(no output)").splitlines()[-1]  # the error itself
        return None, f"chaosd run exited {done.returncode}: {last}\n    {shown}"
    if not report.exists():
        return None, f"chaosd run wrote no report at {report}\n    {shown}"
    return json.loads(report.read_text(encoding="utf-8")), None


def dim(value: float | None, digits: int = 1) -> str:
    return DASH if value is None else f"{value:.{digits}f}"


def mean_recovery(faults: list[dict[str, Any]], clock: str) -> float | None:
    times = [f["recovery_s"] for f in faults if f["clock"] == clock and f["recovery_s"] is not None]
    return sum(times) / len(times) if times else None


def row(name: str, r: dict[str, Any]) -> list[str]:
    score, faults, tasks = r["score"], r["faults"], r["tasks"]
    recovered = sum(1 for f in faults if f["outcome"] == "recovered")
    return [
        name,
        str(r["seed"]),
        f"{r['duration_s']:g}",
        dim(score["total"]),
        score["grade"] or DASH,
        dim(score["availability"]),
        dim(score["recovery_rate"]),
        dim(score["recovery_speed"]),
        dim(score["consistency"]),
        str(len(faults)),
        str(len(r["incidents"])),
        dim(100 * recovered / len(faults) if faults else None),
        dim(mean_recovery(faults, "heal"), 2),
        dim(mean_recovery(faults, "restore"), 2),
        str(tasks["lost"]),
        str(tasks["duplicated"]),
    ]


def why(name: str, r: dict[str, Any]) -> str:
    """One line on what the score is made of, from the report: what cost availability, how the faults
    recovered, what the audit found, and what the detector saw."""
    score, tasks, collapse = r["score"], r["tasks"], r["collapse"]
    offered = max(1, tasks["offered"])
    parts = []
    if score["availability"] is not None:
        costs = [
            f"{d['count']:,} {d['cause'].replace('refused:', 'refused as ').replace('failed:', 'failed by ')}"
            f" ({100 * d['count'] / offered:.1f} % of offered)"
            for d in r["diagnostics"]
            if d["count"] and (d["cause"].startswith(("refused:", "failed:")) or d["cause"] in ("late", "degraded"))
        ][:2]
        parts.append(f"availability {score['availability']:.1f}" + (f": {', '.join(costs)}" if costs else ""))
    faults = r["faults"]
    unplanned = [i for i in r["incidents"] if i.get("unplanned")]
    if faults:
        recovered = sum(1 for f in faults if f["outcome"] == "recovered")
        parts.append(f"{recovered} of {len(faults)} faults recovered in {len(r['incidents'])} incident(s)")
    elif not unplanned:
        parts.append("no fault, so no recovery to score")
    for i in unplanned:
        how = "recovered" if i["recovery_s"] is None else f"recovered in {i['recovery_s']:.1f} s"
        verdict = how if i["outcome"] == "recovered" else i["outcome"]
        parts.append(f"an incident nobody injected at {i['started_at']:.0f} s, {verdict}")
    if tasks["lost"] or tasks["duplicated"]:
        parts.append(f"consistency {dim(score['consistency'])}: {tasks['lost']} lost, {tasks['duplicated']} duplicated")
    alarms = collapse["alarms"]
    parts.append(
        f"{alarms} alarm(s): {collapse['time_overloaded_s']:.0f} s overloaded, {collapse['time_collapsed_s']:.0f} s "
        f"collapsed (admission {r['throttle']['policy']})"
        if alarms
        else f"no alarm (admission {r['throttle']['policy']})"
    )
    return f"- **{name}** ({score['grade'] or DASH}): " + "; ".join(parts) + "."


def table(rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return "\n".join(lines)


def block(results: Sequence[tuple[Run, dict[str, Any]]], subset: str) -> str:
    """The lead-in line and the table: what goes between the markers."""
    versions = sorted({r["chaosd_version"] for _, r in results})
    formulas = sorted({str(r["score"]["version"]) for _, r in results})
    made = datetime.now(UTC).date().isoformat()
    lead = f"Made on {made} with chaosd {', '.join(versions)} (score formula v{', v'.join(formulas)})"
    lead += f", a subset: `{subset}`." if subset else "."

    reasons = "\n".join(why(run.name, r) for run, r in results)
    return (
        lead
        + "\n\n"
        + table([row(run.name, r) for run, r in results])
        + "\n\nWhy each scores what it does:\n\n"
        + reasons
    )


def replace_between_markers(text: str, content: str, where: Path) -> str:
    begins, ends = text.count(BEGIN), text.count(END)
    if begins != 1 or ends != 1:
        raise SystemExit(f"score_table: {where} needs exactly one {BEGIN} and one {END} (found {begins} and {ends})")
    head, rest = text.split(BEGIN)
    if END not in rest:
        raise SystemExit(f"score_table: in {where}, {END} comes before {BEGIN}")
    _, tail = rest.split(END)
    return f"{head}{BEGIN}\n{content}\n\n{END}{tail}"  # the blank line ends the table before the marker


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="replace the table between the markers of docs/score.md")
    parser.add_argument("--readme", type=Path, default=README, help="the file --write rewrites (docs/score.md)")
    parser.add_argument("--out", type=Path, help="where the reports go (a new temporary directory)")
    parser.add_argument("--only", help="comma-separated runs to make (default: all); see the table's run column")
    parser.add_argument("--duration", help="simulated time for every run selected, e.g. 60s (default: own/30m)")
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time (2)")
    args = parser.parse_args(argv)

    runs = all_runs()
    if args.only:
        wanted = [n.strip() for n in args.only.split(",") if n.strip()]
        known = {run.name for run in runs}
        unknown = [n for n in wanted if n not in known]
        if unknown or not wanted:
            parser.error(
                f"--only: unknown run {', '.join(unknown) or '(none given)'}; known: {', '.join(sorted(known))}"
            )
        runs = [run for run in runs if run.name in wanted]
    if args.jobs < 1:
        parser.error("--jobs: must be at least 1")
    out: Path = args.out or Path(tempfile.mkdtemp(prefix="chaosd-scores-"))
    out.mkdir(parents=True, exist_ok=True)

    # Longest first (survival runs are 30 simulated minutes), so two workers finish together.
    order = sorted(runs, key=lambda run: not run.survival)
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        done = pool.map(lambda run: execute(run, out, args.duration), order)
        outcomes = {run.name: outcome for run, outcome in zip(order, done, strict=True)}

    failed = [(run, why) for run in runs if (why := outcomes[run.name][1]) is not None]
    for run, why in failed:
        print(f"score_table: run {run.name!r} failed: {why}", file=sys.stderr)
    if failed:
        print(
            f"score_table: {len(failed)} of {len(runs)} runs failed; reports in {out}; nothing written", file=sys.stderr
        )
        return 1

    subset = " ".join(
        (["--only", args.only] if args.only else []) + (["--duration", args.duration] if args.duration else [])
    )
    results = [(run, report) for run in runs if (report := outcomes[run.name][0]) is not None]
    content = block(results, subset)
    print(content)
    print(f"score_table: reports in {out}", file=sys.stderr)
    if args.write:
        path: Path = args.readme
        text = path.read_bytes().decode("utf-8")  # bytes: keep the rest of the file exactly as it is
        path.write_bytes(replace_between_markers(text, content, path).encode("utf-8"))
        print(f"score_table: wrote the table into {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
