"""A run's verdict: did it hold its SLO (or, with no availability objective, were users failing for most of it:
the detector named it failing or collapsed),
and did its scenario's expectations hold? One function judges a report, so the exit code, the report's
``verdict`` and the summary's last line cannot disagree.
"""

from __future__ import annotations

from chaosd.core.humanize import millis, percent, seconds, value
from chaosd.views import FailedRunView, ReportView, VerdictView

__all__ = ["FAILING_MOST", "run_verdict", "service_verdict", "verdict_view"]

# With no availability objective: failing or collapsed (users failing with a short queue, or behind a saturated one,
# a retry storm included)
# for more than this share of the measured window fails.
FAILING_MOST = 0.5


def verdict_view(report: ReportView) -> VerdictView:
    """:func:`run_verdict` as the report's ``verdict`` block."""
    passed, reason = run_verdict(report)
    return {"passed": passed, "reason": reason}


def run_verdict(report: ReportView) -> tuple[bool, str]:
    """(passed, why) for a report: its failed expectations first, then what its service did.

    The service is judged over the measured window: against ``[slo]`` where it sets an objective (availability
    = good tasks / offered tasks with an outcome, p95 sojourn of completed tasks), and where it sets no
    availability, on whether the collapse detector said ``failing`` or ``collapsed`` for more than half of the
    window: either way most users were failing. A report
    of replications fails when any run's service did (its ``replications.failed_runs``).
    """
    missed = [x for x in report.get("expectations", []) if not x["passed"]]
    if missed:
        first = missed[0]
        what = f"{first['check']} {value(first['expected'])} (measured {value(first['measured'])})"
        more = f" and {len(missed) - 1} more" if len(missed) > 1 else ""
        return False, f"expectation failed: {what}{more}"
    replications = report.get("replications")
    if replications is not None:
        failed: list[FailedRunView] = replications.get("failed_runs", [])
        if failed:
            n = replications["n"]
            return False, f"{len(failed)} of {n} runs failed; seed {failed[0]['seed']}: {failed[0]['reason']}"
    return service_verdict(report)  # every run held: the report's own run says how


def service_verdict(report: ReportView) -> tuple[bool, str]:
    """(passed, why) for one run's service over its measured window: its SLO, else whether it was failing."""
    slo = report["faults_summary"]["slo"]
    window = max(0.0, report["duration_s"] - report["warmup_s"])
    held: list[str] = []
    objective = slo["availability"]
    if objective is not None:
        t = report["tasks"]
        wasted = t.get("wasted", 0)
        good = t["completed"] - t["late"] - t["degraded"] - wasted
        # Callers that retry: each ends once, served (a completion it still waited for) or given up.
        judged = t["completed"] - wasted + t["gave_up"] if t.get("retried") else t["offered"] - t["in_flight"]
        if judged > 0:
            measured = good / judged
            words = f"availability {percent(measured)} ({good} good of {judged} offered)"
            if measured < objective:
                return False, f"{words} < the SLO's {percent(objective)} over the measured {seconds(window)}"
            held.append(f"{words} ≥ {percent(objective)}")
    p95 = slo["p95"]
    if p95 is not None:
        measured_p95 = report["latency"]["sojourn"]["p95"]
        if measured_p95 > p95:
            words = f"p95 sojourn {millis(measured_p95)} > the SLO's {millis(p95)}"
            return False, f"{words} over the measured {seconds(window)}"
        held.append(f"p95 sojourn {millis(measured_p95)} ≤ {millis(p95)}")
    if objective is None:
        collapse = report["collapse"]
        failing = float(collapse.get("time_failing_s", 0.0))
        storm = float(collapse.get("time_metastable_s", 0.0))
        collapsed = float(collapse.get("time_collapsed_s", 0.0)) + storm  # a storm is a collapse that holds itself
        share = (failing + collapsed) / window if window > 0 else 0.0
        words = (
            f"failing or collapsed {seconds(failing + collapsed)} of the measured {seconds(window)} ({percent(share)})"
        )
        if share > FAILING_MOST:
            why = (
                "most tasks ended failed, late or degraded while the queue was short"
                if failing >= collapsed
                else "callers kept retrying while the workers served attempts nobody waited for (a retry storm)"
                if storm >= collapsed - storm
                else "goodput fell far below what the workers could serve while the load held"
            )
            return False, f"no availability objective in [slo], and the pipeline was {words}: {why}"
        held.append(f"{words}, at most half allowed with no availability objective")
    return True, "; ".join(held)
