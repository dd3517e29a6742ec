"""The run report: task accounting, queue, latency, collapse episodes, throttle — and its summary."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TypeVar, cast

import numpy as np
import numpy.typing as npt

from chaosd.core.errors import ReportNotWritten
from chaosd.core.histogram import percentiles
from chaosd.core.humanize import (
    action_rows,
    cause_rows,
    fixes,
    judged_line,
    millis,
    number,
    percent,
    rate,
    seconds,
    shown,
    table,
    time_causes,
    value,
)
from chaosd.experiment.verdict import verdict_view
from chaosd.faults.catalogue import CATALOGUE
from chaosd.views import (
    CollapseView,
    IncidentCause,
    IncidentView,
    LatencyBlock,
    PhasesView,
    PredictionView,
    ReplicationsView,
    ReportView,
    StageReportView,
    ThrottleView,
)

__all__ = ["explain_recovery", "latency_block", "render_summary", "rounded", "write_report"]


_LEAVES = frozenset({int, str, bool, type(None)})
T = TypeVar("T")


def rounded(value: T) -> T:
    """Floats to 6 decimals (microseconds), recursively: reports stay readable and byte-stable.

    The same shape comes back (a view stays its view); mappings come back as dicts, tuples as lists.
    """
    return cast(T, _rounded(value))  # rebuilt key for key, item for item: same shape


def _rounded(value: object) -> object:
    # Exact types first, leaves inline: a report holds tens of thousands of values, and a call per value
    # (or an ABC check) would be most of a long run's report time.
    kind = type(value)
    if kind is float:
        return round(cast(float, value), 6)  # its exact type is float
    if kind is dict:
        return {
            k: round(v, 6) if type(v) is float else v if type(v) in _LEAVES else _rounded(v)
            for k, v in cast(dict[object, object], value).items()  # its exact type is dict
        }
    if kind is list or kind is tuple:
        return [
            round(v, 6) if type(v) is float else v if type(v) in _LEAVES else _rounded(v)
            for v in cast(list[object] | tuple[object, ...], value)  # its exact type is list or tuple
        ]
    if isinstance(value, float):  # a float subclass (numpy's float64)
        return round(float(value), 6)
    if isinstance(value, Mapping):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_rounded(v) for v in value]
    return value


def latency_block(counts: npt.NDArray[np.int64], total: float) -> LatencyBlock:
    n = int(counts.sum())
    p50, p95, p99 = percentiles(counts, (0.5, 0.95, 0.99))
    return {"count": n, "mean": total / n if n else 0.0, "p50": p50, "p95": p95, "p99": p99}


def write_report(report: ReportView, path: Path) -> None:
    """Write atomically: a reader never sees half a report, and a write that fails (a full disk, a read-only
    directory) leaves no temporary file behind and raises ReportNotWritten with the OS's reason."""
    text = json.dumps(report, indent=2, sort_keys=True) + "\n"
    tmp = path.with_name(path.name + ".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text)
        tmp.replace(path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise ReportNotWritten(str(path), exc.strerror or str(exc)) from exc


def write_report_or_keep(report: ReportView, path: Path) -> tuple[Path | None, str | None]:
    """Write the report where asked, else keep it in a fallback file in the system's temporary directory:
    (where it was written, None) or (the fallback written, or None when that failed too; the one line saying so)."""
    try:
        write_report(report, path)
        return path, None
    except ReportNotWritten as exc:
        failed = exc
    fallback = Path(tempfile.gettempdir()) / f"chaosd-report-{os.getpid()}.json"
    try:
        write_report(report, fallback)
    except ReportNotWritten as again:
        return None, f"chaosd: {failed}; nor to {fallback}: {again.reason}: the report is lost"
    return fallback, f"chaosd: {failed}; the report is kept in {fallback} instead"


def _latency(block: LatencyBlock) -> str:
    return (
        f"mean {millis(block['mean'])} · p50 {millis(block['p50'])} · p95 {millis(block['p95'])} · "
        f"p99 {millis(block['p99'])}"
    )


def render_summary(r: ReportView, before_verdict: Sequence[str] = ()) -> str:
    """The run's text summary: what was offered and done, did it heal (faults, per action), why (causes, time
    causes apart), what to fix, and last the verdict (``before_verdict``: lines the caller adds ahead of it, so
    the verdict stays the last line a script reads). Every number goes through :mod:`chaosd.core.humanize`'s
    rounding."""
    lines = _measure_lines(r)
    if "score" in r:
        lines.extend(_fault_lines(r))
        lines.extend(_score_lines(r))
    lines.extend(_stage_lines(r.get("stages") or {}))
    lines.append(_admission(r["throttle"]))
    todo = fixes(r)
    lines.append("  what to fix" + ("" if todo else "  nothing stands out"))
    lines.extend(f"    - {line}" for line in todo)
    lines.extend(before_verdict)
    verdict = r.get("verdict") or verdict_view(r)  # a report written before verdicts: judged now
    lines.append(f"  verdict    {'pass' if verdict['passed'] else 'FAIL'}: {verdict['reason']}")
    # A line's user-supplied parts (a scenario's name, a lever's reason) cannot break it, colour it or forge one.
    return "\n".join(shown(line) for line in lines)


def _measure_lines(r: ReportView) -> list[str]:
    """What the run was and what it measured: load, tasks, throughput, queue, latencies, the detector's episodes."""
    t = r["tasks"]
    q = r["queue"]
    w = r["latency"]["wait"]
    s = r["latency"]["sojourn"]
    c = r["collapse"]
    diagnostics = r.get("diagnostics") or []
    # The audit names the first few duplicated task ids in the `duplicated` diagnostics entry.
    named = next((d.get("examples") for d in diagnostics if d["cause"] == "duplicated"), None)
    ld = r["load"]
    lines = [
        f"chaosd run: {r['scenario'] or 'config load'} · seed {r['seed']} · {r['clock']} clock · "
        f"{seconds(r['duration_s'])} (warm-up {seconds(r['warmup_s'])} excluded)",
        f"  load       offered ρ {ld['offered_rho']:.3f} · {number(ld['base_rate'])} tasks/s base, "
        f"{number(ld['peak_rate'])} peak (ρ {ld['peak_rho']:.3f}) · utilisation {r['utilisation']:.3f}",
        f"  tasks      offered {t['offered']} · accepted {t['accepted']} · completed {t['completed']} · "
        f"failed {t['failed']} · rejected {t['rejected']} · in flight {t['in_flight']} · "
        f"lost {t['lost']} · duplicated {t['duplicated']}"
        + (f" (first task ids: {', '.join(map(str, named))})" if named else ""),
        f"  throughput {rate(r['throughput']['completed_per_s'])} completed · "
        f"{rate(r['throughput']['goodput_per_s'])} goodput",
        f"  queue      mean depth {q['mean_depth']:.2f} · max {q['max_depth']} of {q['capacity']}"
        + (f" (+{q['max_over_capacity']} over capacity)" if q.get("max_over_capacity") else "")
        + (f" · up to {q['max_blocked']} producer(s) blocked" if q.get("max_blocked") else ""),
        f"  wait       {_latency(w)} · over {w['count']} started after warm-up",
        f"  sojourn    {_latency(s)} · over {s['count']} completed after warm-up",
        f"  detector   {c['alarms']} alarm(s), {c['count']} collapsed{_failing_count(c)} · "
        f"{seconds(c['time_overloaded_s'])} overloaded, {seconds(c['time_collapsed_s'])} collapsed, "
        f"{_failing_time(c)}{c['stalls']} stall(s) ({seconds(c['time_stalled_s'])}) · final state {c['final_state']}",
    ]
    lines.extend(_callers_lines(r))
    for e in c["episodes"]:
        cleared = "not cleared by the end" if e["cleared_at"] is None else f"cleared at {seconds(e['cleared_at'])}"
        lines.append(
            f"             {e['kind']} detected at {seconds(e['detected_at'])} ({e['reason']}), {cleared} · "
            f"{seconds(e['duration_s'])}"
        )
    return lines


def _fault_lines(r: ReportView) -> list[str]:
    """Did it heal: the faults injected and judged, by action, the incidents nobody injected, the recoveries."""
    fs = r["faults_summary"]
    lines = [
        f"  faults     {fs['injected']} injected · {judged_line(fs)} · {fs['failed']} failed"
        + (f" · lever pulled: {fs['lever']}" if fs["lever"] else "")
    ]
    rows = action_rows(r.get("faults") or [])
    if rows:
        listed = fs.get("faults_listed", len(r.get("faults") or []))
        note = f" (the newest {listed} of {fs['injected']})" if listed < fs["injected"] else ""
        lines.append(f"  by action{note}")
        header = ("action", "faults", "recovered", "mean recovery", "p95 recovery")
        lines.extend("    " + row for row in table(header, rows, "<>>>>"))
    lines.extend(_unplanned_lines(r.get("incidents") or []))
    lines.extend(_recovery_lines(r.get("incidents") or []))
    return lines


def _score_lines(r: ReportView) -> list[str]:
    """The judgement: the score (and its replications), the causes of what went wrong, and the expectations."""
    sc = r["score"]
    diagnostics = r.get("diagnostics") or []
    lines = []
    if sc["total"] is None:
        lines.append(f"  score      none yet: nothing measured (formula v{sc['version']})")
    else:
        lines.append(
            f"  score      {sc['total']:.1f} ({sc['grade']}) · availability {_dim(sc['availability'])} · "
            f"recovery {_dim(sc['recovery'])} · consistency {_dim(sc['consistency'])} · formula v{sc['version']}"
        )
    if "replications" in r:
        lines.append(_replications_line(r["replications"]))
    top = ", ".join(f"{cause} {count} ({share})" for cause, count, share in cause_rows(diagnostics)[:4])
    if top:
        lines.append(f"  causes     {top}")
    for line in time_causes(diagnostics):
        lines.append(f"             {line}")
    for x in r.get("expectations", []):
        mark = "pass" if x["passed"] else "FAIL"
        runs = x.get("runs")
        each = f"; {sum(run['passed'] for run in runs)} of {len(runs)} runs pass" if runs else ""
        lines.append(
            f"  expect     {mark}: {x['check']} {value(x['expected'])} (measured {value(x['measured'])}{each})"
        )
    return lines


def _failing_count(c: CollapseView) -> str:
    """``, 1 failing``: the alarms that were failing, told only where there were some."""
    return f", {c['failing']} failing" if c.get("failing") else ""


def _failing_time(c: CollapseView) -> str:
    """``86.2 s metastable, 12.0 s failing, ``: the time in the metastable and failing states, told only where there
    was some."""
    failing, storm = c.get("time_failing_s", 0.0), c.get("time_metastable_s", 0.0)
    return (f"{seconds(storm)} metastable, " if storm else "") + (f"{seconds(failing)} failing, " if failing else "")


def _replications_line(rep: ReplicationsView) -> str:
    """``score 85.4 ± 1.1 (95 % CI, 8 runs) · grade B in 8 of 8``: the score over every replication."""
    n, score = rep["n"], rep["score"]
    runs = f"{n} run{'s' if n != 1 else ''}"
    if score["mean"] is None:
        shown = f"none: no run measured one ({runs})"
    elif score["ci95"] is None:
        shown = f"{score['mean']:.1f} (one run: no CI)"
    else:
        shown = f"{score['mean']:.1f} ± {(score['ci95'][1] - score['ci95'][0]) / 2:.1f} (95 % CI, {runs})"
    counts = rep["grade_counts"]  # a JSON report's keys come back sorted: listed here best grade first
    grades = ", ".join(f"{g} in {counts[g]} of {n}" for g in ("A+", "A", "B", "C", "D", "F", "none") if g in counts)
    return f"  runs       score {shown} · grade {grades}"


def _unplanned_lines(incidents: list[IncidentView]) -> list[str]:
    """One line per incident nobody injected: when, its verdict, and its cause."""
    lines = []
    for i in incidents:
        if not i.get("unplanned"):
            continue
        cause = i.get("cause")
        if cause is not None and cause["stage"] is not None:
            why = f"{cause['stage']} · {cause['reason']}" + (f" ({cause['error']})" if cause["error"] else "")
            why += f", {cause['failed']} failed attempts"
        else:
            why = ", ".join(cause["signals"]) if cause is not None else "unknown"
        verdict = i["outcome"] if i["recovery_s"] is None else f"recovered in {seconds(i['recovery_s'])}"
        lines.append(
            f"  unplanned  incident #{i['id']} at {seconds(i['started_at'])}, no fault injected: {verdict} · {why}"
        )
    return lines


_EXPLAINED = 5  # the slowest recoveries the summary explains


def _recovery_lines(incidents: list[IncidentView]) -> list[str]:
    """The slowest recoveries, each with the phase that took most of its time and what would shorten it."""
    timed = [i for i in incidents if i["recovery_s"] and i["phases"]["dominant"] is not None]
    slowest = sorted(timed, key=lambda i: (-(i["recovery_s"] or 0.0), i["id"]))[:_EXPLAINED]
    if not slowest:
        return []
    lines = ["  recovery   the slowest, and where the time went"]
    for i in slowest:
        what = "unplanned" if i["unplanned"] else " + ".join(i["actions"])
        why = explain_recovery(i["recovery_s"], i["phases"], i["prediction"], i["actions"], i["cause"])
        lines.append(f"    #{i['id']} {what} {why}")
    return lines


def explain_recovery(
    took: float | None,
    ph: PhasesView,
    p: PredictionView | None,
    actions: Sequence[str] = (),
    cause: IncidentCause | None = None,
) -> str:
    """``11.7 s: 10.0 s draining 2,000 tasks at 200/s of spare capacity; more workers would shorten it``: a
    recovery of ``took`` seconds, the phase that dominated it (of ``ph``), the fluid model's time (``p``); an
    incident nobody injected names its ``cause`` instead of a mechanism."""
    spans, dominant = ph["spans"], ph["dominant"]
    if took is None or spans is None or dominant is None:
        return "no recovery time"
    span = seconds(spans[dominant])
    if dominant == "detection":
        why = f"{span} before it showed out of tolerance; telemetry.window and recovery.tolerance set how soon"
    elif dominant == "heal" and not actions and cause is not None and cause["stage"] is not None:
        error = f", {cause['error']}" if cause["error"] else ""
        why = f"{span} until {cause['stage']} stopped failing ({cause['reason']}{error}); nothing was injected"
    elif dominant == "heal":
        timers = sorted({timer for a in actions if a in CATALOGUE and (timer := CATALOGUE[a].heal_timer) is not None})
        why = f"{span} until the mechanism healed; " + (
            f"{' and '.join(timers)} sets it" if timers else "its own timers set it"
        )
    elif dominant == "drain" and p is not None and p["backlog"]:
        spare = p["capacity_rate"] - p["arrival_rate"]
        why = (
            f"{span} draining {p['backlog']:,} tasks at {rate(spare)} of spare capacity; more workers would shorten it"
        )
    elif dominant == "drain":
        why = f"{span} draining the backlog; more workers would shorten it"
    else:
        why = (
            f"{span} for p95, goodput and errors to settle once the queue drained (over telemetry.window); "
            "the slow or failing tasks are the ones to look at"
        )
    model = ""
    if p is not None:
        model = f" (fluid model {seconds(p['predicted_s'])})" if p["predicted_s"] is not None else " (cannot drain)"
    return f"{seconds(took)}{model}: {why}"


def _stage_lines(stages: Mapping[str, StageReportView]) -> list[str]:
    """Per stage over the measured window: attempts, failed (the two commonest reasons), retries, p95, breaker."""
    rows = []
    for name, st in stages.items():
        attempts = st["attempts"]
        failed = attempts - st["succeeded"]
        top = sorted(st["failures"].items(), key=lambda kv: (-kv[1], kv[0]))[:2]
        why = ", ".join(f"{reason} {n}" for reason, n in top)
        errors = sorted(st["handler_errors"].items(), key=lambda kv: (-kv[1], kv[0]))[:1]
        why += "".join(f" ({error} {n})" for error, n in errors)
        b = st["breaker"]
        breaker = b["state"] + (f", opened {b['opened']}×" if b["opened"] else "")
        rows.append(
            (
                name,
                st["kind"],
                str(attempts),
                f"{failed} ({percent(failed / attempts)})" if attempts else "0",
                why or "-",
                str(st["retries"]),
                millis(st["p95_s"]) if attempts else "-",
                breaker,
            )
        )
    if not rows:
        return []
    header = ("stage", "kind", "attempts", "failed", "why", "retries", "p95", "breaker")
    return ["  by stage", *("    " + row for row in table(header, rows, "<<>><>><"))]


def _admission(th: ThrottleView) -> str:
    policy = th.get("policy", "aimd" if th["enabled"] else "none")
    if policy == "capacity":
        return (
            f"  admission  capacity · limit {th['limit']} waiting (lowest {th['lowest_limit']}) · measured capacity "
            f"{rate(th['capacity_per_s'])} · target wait {seconds(th['target_s'])} · refused {th['refused']}"
        )
    if policy == "aimd":
        return (
            f"  admission  aimd · {th['decreases']} decrease(s), {th['increases']} increase(s) · lowest factor "
            f"{th['lowest_factor']:.3f} · final {th['final_factor']:.3f} · refused {th['refused']}"
        )
    return "  admission  none"


def _dim(value: float | None) -> str:
    """A score dimension, or a dash where nothing was measured (no judged fault, nothing accepted)."""
    return "—" if value is None else f"{value:.1f}"


def _callers_lines(r: ReportView) -> list[str]:
    """Callers that retry or give up: attempts against callers, and the storm threshold of their policy (nothing
    when every caller waits forever for a single attempt)."""
    t, storm = r["tasks"], r.get("storm")
    if storm is None or (storm["timeout_s"] <= 0 and not t.get("retried") and not t.get("abandoned")):
        return []
    callers = t["offered"]
    attempts = callers + t.get("retried", 0)
    per = f" (×{attempts / callers:.2f} per caller)" if callers else ""
    threshold = storm["threshold_per_s"]
    verdict = (
        "no storm can hold"
        if not storm["storm_possible"] or threshold is None
        else f"storm threshold {rate(threshold)}, the load is {'above' if storm['self_sustaining'] else 'below'} it"
    )
    return [
        f"  callers    {callers} · attempts {attempts}{per} · abandoned {t.get('abandoned', 0)} · "
        f"wasted {t.get('wasted', 0)} · gave up {t.get('gave_up', 0)} · {verdict}"
    ]
