"""``chaosd inspect``: the running daemon's report so far, summed up (score, recoveries per action, causes, what
to fix), or whole as JSON.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from chaosd.cli.answers import as_report, json_text
from chaosd.cli.exits import EXIT_OK
from chaosd.cli.transport import Client, Out, Subcommands
from chaosd.core.humanize import action_rows, cause_rows, fixes, judged_line, seconds, table, time_causes
from chaosd.core.humanize import rate as rate_per_s
from chaosd.views.wire import TERMINAL

if TYPE_CHECKING:  # the views import pydantic, which a client command never needs at run time
    from chaosd.views import ReportView

__all__ = ["add_inspect_command", "inspect", "inspect_lines"]


def add_inspect_command(sub: Subcommands, common: argparse.ArgumentParser) -> None:
    """Register ``inspect``; ``common`` holds the daemon's address and token."""
    p = sub.add_parser("inspect", parents=[common], help="score, recoveries per action and causes so far")
    p.add_argument("--json", action="store_true", help="print the whole report as JSON")


def inspect(client: Client, args: argparse.Namespace, out: Out, err: Out) -> int:
    """Print the daemon's report so far: summed up, or with ``--json`` whole."""
    report = client.request("GET", "/api/v1/report")
    if args.json:
        out(json_text(report))
        return EXIT_OK
    for line in inspect_lines(as_report(report)):
        out(line)
    return EXIT_OK


def _callers(report: ReportView) -> list[str]:
    """Callers that retry or give up: attempts per caller, what was abandoned and wasted, and the storm threshold of
    the policy in force (nothing while every caller waits forever for one attempt)."""
    t, storm = report.get("tasks"), report.get("storm")
    if storm is None or t is None or (storm["timeout_s"] <= 0 and not t.get("retried") and not t.get("abandoned")):
        return []  # no callers' policy, or a daemon older than the callers: nothing to say
    callers, attempts = t["offered"], t["offered"] + t.get("retried", 0)
    per = f" (×{attempts / callers:.2f} per caller)" if callers else ""
    threshold = storm["threshold_per_s"]
    where = (
        "no storm can hold"
        if threshold is None or not storm["storm_possible"]
        else f"storm threshold {rate_per_s(threshold)}, the load {'above' if storm['self_sustaining'] else 'below'} it"
    )
    return [
        f"callers    {callers} · attempts {attempts}{per} · abandoned {t.get('abandoned', 0)} · "
        f"wasted {t.get('wasted', 0)} · gave up {t.get('gave_up', 0)}",
        f"storm      {where} · {storm['reason']}",
    ]


def inspect_lines(report: ReportView) -> list[str]:
    """The inspect summary: score, recovery as the score judges it, fault counts, mean and p95 recovery per
    action, count causes with their shares and time causes apart, what to fix."""
    faults = report["faults"]
    summary = report["faults_summary"]
    score = report.get("score")
    injected = summary.get("injected", len(faults))
    recovered = summary.get("recovered", sum(1 for f in faults if f.get("outcome") == "recovered"))
    failed = summary.get("failed", sum(1 for f in faults if f.get("outcome") == "failed"))
    pending = summary.get("pending", sum(1 for f in faults if f.get("outcome") not in TERMINAL))
    rate = judged_line(summary, faults) if injected else "n/a (no faults injected)"
    lines = [
        f"score      {score['total']:.1f} ({score['grade']})" if score and score.get("total") is not None
        else "score      - (not scored yet)",
        f"recovery   {rate}",
        f"faults     {injected} total · {recovered} recovered · {failed} failed · {pending} pending",
    ]  # fmt: skip
    collapse, admission = report.get("collapse"), report.get("throttle")
    if collapse:
        lines.append(
            f"detector   {collapse['final_state']} now · {collapse.get('alarms', collapse['count'])} alarm(s), "
            f"{collapse['count']} collapsed · {seconds(collapse.get('time_overloaded_s', 0.0))} overloaded, "
            f"{seconds(collapse['time_collapsed_s'])} collapsed"
            + (f", {seconds(storm)} metastable" if (storm := collapse.get("time_metastable_s", 0.0)) else "")
            + (f", {seconds(failing)} failing" if (failing := collapse.get("time_failing_s", 0.0)) else "")
            + f" · {collapse.get('stalls', 0)} stall(s)"
        )
    lines.extend(_callers(report))
    if admission:
        policy = admission.get("policy", "aimd" if admission["enabled"] else "none")
        if policy == "capacity":
            detail = f"limit {admission['limit']} waiting · capacity {rate_per_s(admission['capacity_per_s'])} · "
        elif policy == "aimd":
            detail = f"factor {admission['final_factor']:.3f} (lowest {admission['lowest_factor']:.3f}) · "
        else:
            detail = ""
        lines.append(f"admission  {policy} · {detail}refused {admission['refused']}")
    rows = action_rows(faults)
    if rows:
        # The report lists only the newest faults; the counts above are of them all.
        listed = summary.get("faults_listed", len(faults))
        lines.append(
            "recovery time by action" + (f" (the newest {listed} of {injected} faults)" if listed < injected else "")
        )
        lines.extend("  " + r for r in table(("action", "faults", "recovered", "mean", "p95"), rows, "<>>>>"))
    diagnostics = report["diagnostics"]
    causes = cause_rows(diagnostics)
    if causes:
        lines.append("diagnostics by cause")
        lines.extend("  " + r for r in table(("cause", "count", "share"), causes, "<>>"))
    lines.extend("  " + line for line in time_causes(diagnostics))
    todo = fixes(report)
    if todo:
        lines.append("what to fix")
        lines.extend(f"  - {line}" for line in todo)
    return lines
