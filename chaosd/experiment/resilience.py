"""The report's sections on the faults and what they cost: the diagnostics of lost goodput, the fault totals, and
what the runtime did to recover."""

from __future__ import annotations

from chaosd.config.settings import Settings
from chaosd.experiment.score import diagnose
from chaosd.faults import Injector
from chaosd.pipeline import Pipeline
from chaosd.views import CollapseView, DiagnosticView, FaultsSummaryView, ReportTasks, RuntimeView
from chaosd.views.wire import PENDING

__all__ = ["diagnostics", "faults_summary", "runtime_view"]


def diagnostics(p: Pipeline, injector: Injector, t: ReportTasks, collapse: CollapseView) -> list[DiagnosticView]:
    """What cost goodput, largest share first, each with what names it (task ids, agents, episodes)."""
    undetected = sum(store.undetected_reads for store in p.memory.values())
    causes: dict[str, int] = {}
    for reason, n in t["failed_by"].items():
        causes[f"failed:{reason}"] = n
    for reason, n in t["rejected_by"].items():
        causes[f"refused:{reason}"] = n
    causes["late"] = t["late"]
    causes["lost"] = t["lost"]
    causes["duplicated"] = t["duplicated"]
    causes["lease_expired"] = p.dispatcher.lease_expired
    causes["corruption_undetected"] = undetected
    causes["degraded"] = t["degraded"]  # completed in time without a stage's result: not good
    causes["faults_failed"] = injector.outcomes["failed"]
    dead = sorted(a.id for a in p.agents.values() if not a.alive)
    causes["agents_dead"] = len(dead)
    causes["collapsed_s"] = round(collapse["time_collapsed_s"])
    found: list[DiagnosticView] = [{"cause": c.cause, "count": c.count, "share": c.share} for c in diagnose(causes)]
    for d in found:
        if d["cause"] == "duplicated":
            d["examples"] = list(p.audit.measured.examples)  # the audit names the first few task ids
        elif d["cause"] == "agents_dead":
            d["agents"] = dead  # still dead at the end: the supervisor is off, or gave up on them
        elif d["cause"] == "collapsed_s":  # seconds in congestion collapse, and whether it outlived the run
            d["episodes"], d["final_state"] = len(collapse["episodes"]), collapse["final_state"]
    return found


def faults_summary(
    settings: Settings, injector: Injector, *, faults_listed: int, incidents_listed: int
) -> FaultsSummaryView:
    """The totals over every fault and incident of the run, however many the report lists."""
    return {
        "incidents": injector.incidents.total,
        "incidents_recovered": injector.book.outcomes["recovered"],
        "injected": injector.injected,
        "recovered": injector.outcomes["recovered"],
        "failed": injector.outcomes["failed"],
        "unmeasured": injector.outcomes["unmeasured"],
        "pending": sum(1 for f in injector.in_play if f.outcome in PENDING),
        # A fault in a shared incident has no time of its own: it is not in its action's mean.
        "mean_recovery_s_by_action": {
            a: s.mean for a, s in sorted(injector.recovery_by_action.items()) if s.mean is not None
        },
        # The report lists the newest faults and incidents (history.faults); the counts are of all.
        "faults_listed": faults_listed,
        "incidents_listed": incidents_listed,
        "baseline": baseline.as_dict() if (baseline := injector.baseline()) is not None else None,
        "slo": {"availability": settings.slo.availability, "p95": settings.slo.p95},
        "lever": injector.lever,
    }


def runtime_view(p: Pipeline) -> RuntimeView:
    """How the runtime coped: elections, redispatches, expired leases, restarts, and who leads at the end."""
    return {
        "elections": p.dispatcher.elections,
        "redispatched": p.dispatcher.redispatched,
        "lease_expired": p.dispatcher.lease_expired,
        "deduplicated": p.ledger.deduplicated,
        "restarts": p.supervisor.restarts,
        "gave_up": sorted(p.supervisor.gave_up),
        "leader": p.dispatcher.leader_id,
        "route": list(p.route_names or ()),
    }
