"""What the daemon serves about its experiment: the status snapshot, the score, the report so far, readiness
problems and the sizes of what it holds in memory."""

from __future__ import annotations

from chaosd.daemon.gate import Gate
from chaosd.daemon.plan_runs import PlanRunner
from chaosd.daemon.windows import Windows
from chaosd.experiment.runner import Experiment
from chaosd.telemetry.stages import StageWindow
from chaosd.views import DagView, ReportView, ScoreBody, StatusBody

__all__ = ["StatusBoard"]


class StatusBoard:
    """Reads the live experiment, its plans and windows into the bodies the API answers with."""

    def __init__(self, experiment: Experiment, plans: PlanRunner, windows: Windows, gate: Gate) -> None:
        self._exp = experiment
        self._plans = plans
        self._windows = windows
        self._gate = gate
        # The status body's per-stage figures: read per status request, over about the telemetry window.
        self._stage_window = StageWindow(
            lambda: experiment.pipeline.stages, experiment.clock.now, experiment.settings.telemetry.window
        )

    def pipeline_problems(self) -> list[str]:
        """Why the pipeline cannot serve now (for /readyz): its backend unreachable, or no telemetry yet."""
        problems = []
        backend = getattr(self._exp.pipeline, "backend_health", None)
        if backend is not None and (down := backend()):
            problems.append(down)  # the Redis runtime: unreachable now, and why
        if self._exp.telemetry.latest is None:
            problems.append("pipeline: no telemetry yet")
        return problems

    def status(self, run_id: str, started_unix: float) -> StatusBody:
        """The pipeline's snapshot: agents, leader, DAG, queue, detector, throttle, telemetry, score, plans."""
        exp = self._exp
        p = exp.pipeline
        snap = exp.telemetry.latest
        backend = getattr(p, "backend_health", None)
        plans = self._plans
        return {
            "run_id": run_id,
            "started_unix": started_unix,
            "uptime_s": p.elapsed(),
            "agents": [
                {"id": a.id, "kind": a.kind, "state": a.state, "restarts": a.restart_count, "gave_up": a.gave_up}
                for a in p.agents.values()
            ],
            "leader": p.dispatcher.leader_id,
            "route": list(p.route_names or ()),
            "dag": self._dag(),
            "queue": {"depth": p.queue.depth, "capacity": p.queue.capacity},
            "detector": exp.detector.state.value,
            "throttle_factor": exp.throttle.factor,
            "admission": {
                "policy": exp.throttle.policy,
                "limit": exp.throttle.limit,
                "standing": exp.throttle.standing,
                "capacity_per_s": snap.capacity_rate if snap is not None else 0.0,
                "shed_per_s": snap.shed_rate if snap is not None else 0.0,
            },
            "backend": backend() if backend is not None else None,
            "telemetry": snap.as_dict() if snap is not None else None,
            "score": exp.live_score().as_dict(),
            "faults_active": len(exp.injector.active()),
            "lever": exp.injector.lever,
            "survival": plans.survival.state if plans.survival is not None else "idle",
            "scenario": plans.scenario.state if plans.scenario is not None else "idle",
            "stopping": self._gate.closed,
        }

    def _dag(self) -> DagView:
        """The route's graph now: what is removed or avoided, and each stage's recent figures."""
        p = self._exp.pipeline
        return {
            "nodes": sorted(p.dag.edges),
            "edges": sorted(f"{a}->{b}" for a, succ in p.dag.edges.items() for b in succ),
            "removed_nodes": sorted(p.dag.removed_nodes),
            "removed_edges": sorted(f"{a}->{b}" for a, b in p.dag.removed_edges),
            "breakers_open": sorted(p.avoided),
            "dependencies": [f"{n}/{d}" for n, stage in sorted(p.stages.items()) for d in sorted(stage.dependencies)],
            "stages": self._stage_window.figures(),
        }

    def score(self) -> ScoreBody:
        """The daemon's live score, with its fault totals."""
        exp = self._exp
        return {
            **exp.live_score().as_dict(),
            "faults_injected": exp.injector.injected,
            "faults_recovered": exp.injector.outcomes["recovered"],
        }

    def report(self) -> ReportView:
        """The run report so far, listing the newest history.report faults and incidents."""
        return self._exp.report(listed=self._exp.settings.history.report)

    def sizes(self) -> dict[str, int]:
        """How many entries each long-lived in-memory structure holds now (for bounds, soak and tests)."""
        exp = self._exp
        p = exp.pipeline
        return {
            "faults": len(exp.injector.faults),
            "faults_pending": len(exp.injector.in_play),
            "incidents": len(exp.injector.incidents),
            "timeline": exp.timeline_points,
            "plan_log": len(exp.plan_log) + sum(len(run.log) for run in self._plans.kept()),
            "collapse_episodes": len(exp.detector.episodes),
            "throttle_actions": len(exp.throttle.actions),
            "restarts": sum(len(a.restarts) for a in p.agents.values()),
            "events": len(exp.events),
            "windows": len(self._windows),
            "dispatch_log": p.dispatcher.log_size,
            "in_flight": len(p.ledger.in_flight),
            "queue_blocked": len(p.queue.blocked),
        }
