"""One rounding policy for every line a person reads: the run summary, ``chaosd inspect``, ``chaosd survival``.

- seconds: 0.1 s from 1 s up, 3 significant digits below (``0.015 s``, ``0.25 s``), ``0 s`` for zero;
- latencies: 0.1 ms below 1 s, else seconds as above;
- shares and percentages: 0.1 % (``92.2%``);
- rates (tasks per second): 0.1 per second;
- yes/no for booleans: no ``True`` in human text.

Reports (JSON) keep their own precision (:func:`chaosd.experiment.report.rounded`); this is only for text. Nothing here
imports the engine or numpy: the client commands use it too.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the views import pydantic: a client command imports this module, not them
    from chaosd.views import DiagnosticView, FaultsSummaryView, FaultView, ReportView

__all__ = [
    "action_rows",
    "cause_rows",
    "fixes",
    "judged_line",
    "millis",
    "number",
    "p95",
    "percent",
    "rate",
    "seconds",
    "secs",
    "shown",
    "table",
    "time_causes",
    "value",
]


_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def shown(text: str) -> str:
    """``text`` safe for a terminal, a log line or a page: every character that is not printable (control
    characters such as ESC, CR and LF, and format characters such as bidirectional overrides) is written as its
    escape (``\\x1b``, ``\\r``, ``\\u202e``), so what a user supplied (a reason, a label, a name) can neither
    colour, move nor forge a line. One function for the CLI, the daemon's log and terminal, and the API's
    messages."""
    if text.isprintable():
        return text  # the usual case, at the cost of one C call
    return "".join(c if c.isprintable() else _NAMED.get(c) or _escape(c) for c in text)


def _escape(c: str) -> str:
    code = ord(c)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def secs(x: float) -> str:
    """A number of seconds, without the unit: ``3.1``, ``0.015``, ``0``."""
    if x == 0 or not math.isfinite(x):
        return "0" if x == 0 else str(x)
    if abs(x) >= 1:
        return f"{x:.1f}"
    return f"{x:.3g}"


def seconds(x: float) -> str:
    """A duration: ``3.1 s``, ``0.015 s``."""
    return f"{secs(x)} s"


def millis(x: float) -> str:
    """A latency given in seconds: in milliseconds to 0.1 ms below 1 s (``20.2 ms``), else as :func:`seconds`."""
    return f"{x * 1000:.1f} ms" if abs(x) < 1 else seconds(x)


def host_stall(stalled: object) -> str:
    """``; the host stalled the daemon 1.1 s …`` for a positive ``stalled_s``, else nothing: what the host, not the
    pipeline, held up before a verdict."""
    if not isinstance(stalled, int | float) or stalled <= 0:
        return ""
    return f"; the host stalled the daemon {seconds(float(stalled))} before the verdict (not judged)"


def percent(share: float) -> str:
    """A share in [0, 1] as a percentage: ``92.2%``."""
    return f"{share * 100:.1f}%"


def rate(per_s: float) -> str:
    """Tasks (or events) per second: ``202.2/s``."""
    return f"{per_s:.1f}/s"


def number(x: float) -> str:
    """A count or a plain number: whole numbers as integers, others to 3 significant digits (0.1 above 100)."""
    if float(x).is_integer():
        return str(int(x))
    return f"{x:.1f}" if abs(x) >= 100 else f"{x:.3g}"


def value(v: str | int | float | bool | None) -> str:
    """A measured or expected value (an expectation's): booleans as yes/no, floats rounded, None as a dash."""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if v is None:
        return "-"
    if isinstance(v, int | float):
        return number(v)
    return str(v)


def p95(values: Sequence[float]) -> float:
    """Nearest rank: the smallest time at least 95 % of the values are within — always an observed value."""
    if not values:
        raise ValueError("p95 of no values")
    ordered = sorted(values)
    return ordered[(95 * len(ordered) + 99) // 100 - 1]  # ceil(0.95·n) in integers: no float rounding at the edge


def table(header: Sequence[str], rows: Iterable[Sequence[str]], align: str) -> list[str]:
    """Columns padded to their widest cell; ``align`` is one ``<`` or ``>`` per column."""
    cells = [tuple(header), *(tuple(r) for r in rows)]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return [
        "  ".join(c.ljust(w) if a == "<" else c.rjust(w) for c, w, a in zip(r, widths, align, strict=True)).rstrip()
        for r in cells
    ]


def judged_line(summary: FaultsSummaryView, faults: Sequence[FaultView] = ()) -> str:
    """``recovered N of M judged (P pending)``: the score's recovery rate, pending and unmeasured faults apart."""
    recovered = int(summary.get("recovered", sum(1 for f in faults if f.get("outcome") == "recovered")))
    failed = int(summary.get("failed", sum(1 for f in faults if f.get("outcome") == "failed")))
    judged = recovered + failed
    extra = []
    pending = summary.get("pending")
    if pending:
        extra.append(f"{pending} pending")
    if summary.get("unmeasured"):
        extra.append(f"{summary['unmeasured']} unmeasured")
    tail = f" ({', '.join(extra)})" if extra else ""
    if not judged:
        return f"none judged yet{tail}"
    return f"recovered {recovered} of {judged} judged, {percent(recovered / judged)}{tail}"


def action_rows(faults: Iterable[FaultView]) -> list[tuple[str, str, str, str, str]]:
    """Per action: faults, recovered, mean and p95 recovery time (a dash where none has a time of its own)."""
    counts: dict[str, int] = {}
    recovered: dict[str, int] = {}
    times: dict[str, list[float]] = {}
    for f in faults:
        action = str(f["action"])
        counts[action] = counts.get(action, 0) + 1
        recovered[action] = recovered.get(action, 0) + (f.get("outcome") == "recovered" or f.get("recovered") is True)
        bucket = times.setdefault(action, [])
        if (recovery_s := f.get("recovery_s")) is not None:
            bucket.append(float(recovery_s))
    return [
        (
            action,
            str(counts[action]),
            str(recovered[action]),
            seconds(math.fsum(times[action]) / len(times[action])) if times[action] else "-",
            seconds(p95(times[action])) if times[action] else "-",
        )
        for action in sorted(counts)
    ]


def _is_time(d: DiagnosticView) -> bool:
    return str(d["cause"]).endswith("_s")


def cause_rows(diagnostics: Iterable[DiagnosticView]) -> list[tuple[str, str, str]]:
    """Count causes only, each with its share of the counted problems (seconds are never among them)."""
    counted = [d for d in diagnostics if not _is_time(d)]
    total = sum(int(d["count"]) for d in counted)
    return [(str(d["cause"]), str(d["count"]), percent(int(d["count"]) / total) if total else "-") for d in counted]


def time_causes(diagnostics: Iterable[DiagnosticView]) -> list[str]:
    """Time causes (``collapsed_s``), in seconds: ``time collapsed 207 s (1 episode(s), final state collapsed)``."""
    lines = []
    for d in diagnostics:
        if not _is_time(d):
            continue
        name = str(d["cause"]).removesuffix("_s").replace("_", " ")
        detail = []
        if "episodes" in d:
            detail.append(f"{d['episodes']} episode(s)")
        if "final_state" in d:
            detail.append(f"final state {d['final_state']}")
        lines.append(f"time {name} {number(d['count'])} s" + (f" ({', '.join(detail)})" if detail else ""))
    return lines


def _failing_fix(r: ReportView) -> str | None:
    """Why the detector said failing, and where to look: the stage with the most failed attempts."""
    collapse = r.get("collapse") or {}
    failing_s = float(collapse.get("time_failing_s") or 0.0)
    if not failing_s:
        return None
    evidence = f"time_failing_s {seconds(failing_s)}, {collapse.get('failing', 0)} failing alarm(s)"
    stages = r.get("stages") or {}
    worst = max(stages.items(), key=lambda kv: (sum(kv[1]["failures"].values()), kv[0]), default=None)
    if worst is not None and worst[1]["failures"]:
        name, st = worst
        reason, n = max(st["failures"].items(), key=lambda kv: (kv[1], kv[0]))
        errors = max(st["handler_errors"].items(), key=lambda kv: (kv[1], kv[0]), default=None)
        raised = f", its handler raising {errors[0]}" if errors else ""
        where = f"stage {name}: {reason} on {n} of {st['attempts']} attempts{raised}"
    else:
        t = r.get("tasks") or {}
        where = f"late {t.get('late', 0)}, degraded {t.get('degraded', 0)}: tasks ended without failing a stage"
    return (
        f"tasks failing while the queue was short ({evidence}; {where}): the work fails, not the load, so admission "
        "control cannot help; fix what the stage calls, or give it retries, a fallback or an alternate path"
    )


def fixes(r: ReportView) -> list[str]:
    """What to fix, from the diagnostics and what the report says of the configuration; each line names its
    evidence. Empty when nothing stands out."""
    causes = {str(d["cause"]): d for d in r.get("diagnostics") or ()}
    found = [
        _dead_agents_fix(r, causes),
        _refusals_fix(r, causes),
        *_routing_fixes(causes),
        _late_fix(r, causes),
        _duplicates_fix(causes),
        _lost_fix(r, causes),
        _failing_fix(r),
        _host_stall_fix(r),
    ]
    return [line for line in found if line]


def _dead_agents_fix(r: ReportView, causes: Mapping[str, DiagnosticView]) -> str | None:
    """Agents dead at the end: why nobody brought them back (the supervisor gave up, is off, or is limited)."""
    dead = causes.get("agents_dead")
    if not dead:
        return None
    runtime = r.get("runtime")
    names = ", ".join(map(str, dead.get("agents") or ())) or str(dead["count"])
    gave_up = list((runtime.get("gave_up") if runtime else None) or ())
    if gave_up:
        return (
            f"dead agents: the supervisor gave up on {', '.join(map(str, gave_up))} (agents_dead: {names}; "
            "runtime.gave_up): raise supervisor.max_restarts or fix what keeps killing them"
        )
    if not (runtime.get("restarts") if runtime else None):
        return (
            f"dead agents and nothing restarted them (agents_dead: {names}; runtime.restarts 0): "
            "turn the supervisor on (supervisor.enabled = true)"
        )
    return f"agents still dead at the end (agents_dead: {names}): check the supervisor's limits"


def _refusals_fix(r: ReportView, causes: Mapping[str, DiagnosticView]) -> str | None:
    """A full queue refused work: turn admission control on, or, when it is on, add capacity."""
    full = causes.get("refused:queue_full")
    if not full:
        return None
    throttle = r.get("throttle") or {}
    policy = throttle.get("policy", "aimd" if throttle.get("enabled") else "none")
    if policy == "none":
        return (
            f"refusals with admission control off (refused:queue_full {full['count']}; throttle.policy none): "
            'turn admission control on (throttle.policy = "capacity")'
        )
    return (
        f"the queue still refused work (refused:queue_full {full['count']}; throttle.policy {policy}): "
        "add workers or lower the load"
    )


def _routing_fixes(causes: Mapping[str, DiagnosticView]) -> list[str]:
    """Tasks failed for want of a route: the stage needs an alternate path."""
    return [
        f"a stage with no alternate path ({reason} {causes[reason]['count']}): "
        "give the stage an alternate (a fallback edge) so its work can be routed around it"
        for reason in ("failed:no_route", "failed:node_removed")
        if reason in causes
    ]


def _late_fix(r: ReportView, causes: Mapping[str, DiagnosticView]) -> str | None:
    """Late tasks behind a standing queue: bound the wait."""
    late = causes.get("late")
    queue = r.get("queue") or {}
    mean_depth = float(queue.get("mean_depth") or 0.0)
    if not (late and mean_depth >= 1.0):
        return None
    capacity = queue.get("capacity")
    of = f" of {capacity}" if capacity else ""
    return (
        f"late tasks from a standing queue (late {late['count']}; queue.mean_depth {number(mean_depth)}{of}): "
        "bound the wait (throttle.policy capacity, a smaller queue) or add workers"
    )


def _duplicates_fix(causes: Mapping[str, DiagnosticView]) -> str | None:
    """Duplicated effects at the sink: make it idempotent."""
    dup = causes.get("duplicated")
    if not dup:
        return None
    examples = dup.get("examples") or ()
    ids = f"; first task ids {', '.join(map(str, examples))}" if examples else ""
    return f"duplicated effects (duplicated {dup['count']}{ids}): make the sink idempotent (sink.idempotent = true)"


def _lost_fix(r: ReportView, causes: Mapping[str, DiagnosticView]) -> str | None:
    """A lost task is chaosd's bug, never the configuration's."""
    tasks = r.get("tasks") or {}
    lost = causes.get("lost") or ({"count": tasks["lost"]} if tasks.get("lost") else None)
    if not lost:
        return None
    return f"lost tasks (lost {lost['count']}): a task nobody holds is a bug; report it with this run's seed"


def _host_stall_fix(r: ReportView) -> str | None:
    """The daemon's own process stalled during incidents: their recovery times include the host's pauses."""
    stalled = [i for i in r.get("incidents") or () if float(i.get("stalled_s") or 0.0) > 0]
    if not stalled:
        return None
    worst = max(stalled, key=lambda i: float(i["stalled_s"]))
    return (
        f"the host, not the pipeline: the daemon's own process stalled while {len(stalled)} incident(s) were open "
        f"(incident {worst['id']}: {seconds(float(worst['stalled_s']))}; stalled_s), so their recovery times "
        "include the host's pauses: give the daemon a CPU of its own or run it on a quieter host"
    )
