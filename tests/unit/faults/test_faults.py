"""Every fault in the catalogue does what it says while active, and the pipeline visibly heals from it.

Each test runs the default pipeline (config/chaosd.toml: 4 workers, 200 tasks/s, the agent DAG) in
virtual time, lets a fault-free baseline build up, injects one fault, samples the runtime at chosen
clock times while the fault is active, and then checks the recovery the run report observed.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from conftest import settings

from chaosd.api.app import status_of
from chaosd.core.clock import LoopClock, new_event_loop
from chaosd.core.errors import FaultError
from chaosd.experiment.runner import Experiment
from chaosd.faults import CATALOGUE

Plan = Callable[[Experiment], Coroutine[Any, Any, None]]
Obs = dict[str, Any]

# Off the telemetry tick (0.1 s) and heartbeat (0.25 s) grids, so "after the injection" is unambiguous.
FAULT_AT = 15.05
DEFAULT_ROUTE = ("plan", "search", "recall", "context", "answer")
BACKUP_ROUTE = ("plan", "search_backup", "recall", "context", "answer")
# How long a fault test runs: 25 s past FAULT_AT. The latest verdict here comes 12.2 s after its injection
# (latency_jitter), the latest sample at +12 s and the latest TTL (the pause resume_agent cuts short) ends at
# +20 s. A verdict that came after the end would leave its fault "recovering", which _recovered refuses: a short
# run can fail these tests, never pass them.
RUN = FAULT_AT + 25.0


def _run(plan: Plan, *, duration: float = RUN, overlay: dict[str, Any] | None = None) -> tuple[Experiment, dict]:
    """Run the default pipeline (plus ``overlay``) for ``duration`` clock seconds beside ``plan``."""
    loop = new_event_loop(virtual=True)
    try:
        clock = LoopClock(loop)

        async def main() -> tuple[Experiment, dict]:
            exp = Experiment(settings(overlay or {}), clock, warmup=0.0)
            report = await exp.run(duration, plan=plan)
            return exp, report

        return loop.run_until_complete(main())
    finally:
        loop.close()


async def _at(exp: Experiment, t: float) -> None:
    """Sleep until ``t`` seconds of clock time since the run started."""
    await exp.clock.sleep_until(exp.pipeline.t0 + t)


def _accounted(report: dict) -> None:
    t = report["tasks"]
    assert t["offered"] == t["accepted"] + t["rejected"]
    assert t["accepted"] == t["completed"] + t["failed"] + t["in_flight"] + t["lost"]
    assert t["lost"] == 0 and t["duplicated"] == 0 and t["lost_all_cohorts"] == 0


def _recovered(report: dict, index: int = 0) -> dict:
    """The fault's recovery was observed: mechanism first healed after the injection, service back."""
    fault = report["faults"][index]
    assert fault["mechanism_recovered_at"] is not None
    assert fault["mechanism_recovered_at"] > fault["injected_at"]
    assert fault["service_recovered_at"] is not None
    assert fault["recovered"] is True and fault["outcome"] == "recovered"
    _accounted(report)
    return dict(fault)


def _flags(exp: Experiment) -> dict[str, Any]:
    """Everything a fault can change in the runtime, as plain values."""
    p = exp.pipeline
    return {
        "agents": {a.id: (a.alive, a.paused, a.exhausted, a.partitioned, a.slow) for a in p.agents.values()},
        "stages": {n: (s.removed, s.hang, s.hang_timeout, s.llm_down, s.jitter) for n, s in p.stages.items()},
        "dag": (sorted(p.dag.removed_nodes), sorted(p.dag.removed_edges)),
        "memory": {n: sorted(m.corrupted) for n, m in p.memory.items()},
        "mcp": {n: (c.connected, c.server_up) for n, c in p.mcp.items()},
        "drop": [w.drop_probability for w in p.workers],
        "surge": p.surge.factor,
        "leader": p.dispatcher.leader_id,
    }


# --- leadership and agents -----------------------------------------------------------------------


def test_kill_leader_stops_dispatch_until_a_standby_is_elected() -> None:
    cfg = settings({}).orchestrator
    # The old lease was last renewed at most renew_interval before the kill: it runs out no sooner than this.
    before_expiry = cfg.lease_ttl - cfg.renew_interval - 0.025
    obs: Obs = {}

    async def plan(exp: Experiment) -> None:
        p = exp.pipeline
        await _at(exp, FAULT_AT)
        obs["old_leader"] = p.dispatcher.leader_id
        exp.injector.inject("kill_leader", ttl=8.0)
        await _at(exp, FAULT_AT + 0.1)  # tasks already in service have finished by now
        obs["leader_after_kill"] = p.dispatcher.leader_id
        obs["completed_a"], obs["depth_a"] = p.ledger.total.completed, p.queue.depth
        await _at(exp, FAULT_AT + before_expiry)  # the old lease has not run out yet
        obs["leader_before_expiry"] = p.dispatcher.leader_id
        obs["completed_b"], obs["depth_b"] = p.ledger.total.completed, p.queue.depth
        await _at(exp, FAULT_AT + 2.0)
        obs["new_leader"] = p.dispatcher.leader_id
        obs["elections"] = p.dispatcher.elections
        obs["completed_c"] = p.ledger.total.completed

    _, report = _run(plan)
    assert obs["old_leader"] is not None
    assert obs["leader_after_kill"] is None and obs["leader_before_expiry"] is None
    # No leader, no dispatch: nothing completes and arrivals pile up in the queue.
    assert obs["completed_b"] == obs["completed_a"]
    assert obs["depth_b"] > obs["depth_a"] + 0.6 * 200 * (before_expiry - 0.1)
    assert obs["new_leader"] not in (None, obs["old_leader"])
    assert obs["elections"] == 1
    assert obs["completed_c"] > obs["completed_b"] + 100
    _recovered(report)


def test_killing_the_leader_under_load_fails_over_within_the_lease_and_loses_nothing() -> None:
    overlay = {"load": {"rate": 300.0}}  # ρ = 0.75: every worker usually holds a task
    cfg = settings(overlay).orchestrator
    obs: Obs = {}

    async def plan(exp: Experiment) -> None:
        p = exp.pipeline
        d = p.dispatcher
        await _at(exp, FAULT_AT)
        obs["in_service"] = p.in_service()
        obs["redispatched"], obs["deduplicated"] = d.redispatched, p.ledger.deduplicated
        obs["old_leader"] = d.leader_id
        killed_at = exp.clock.now()
        exp.injector.inject("kill_leader", ttl=8.0)
        while d.leader_id is None and exp.clock.now() - killed_at < 10.0:
            await exp.clock.sleep(0.01)
        obs["failover_s"] = exp.clock.now() - killed_at
        obs["new_leader"] = d.leader_id
        await _at(exp, FAULT_AT + 5.0)
        obs["redispatched_after"], obs["deduplicated_after"] = d.redispatched, p.ledger.deduplicated

    _, report = _run(plan, overlay=overlay)
    assert obs["in_service"] > 0
    assert obs["new_leader"] not in (None, obs["old_leader"])
    assert obs["failover_s"] <= cfg.lease_ttl + cfg.renew_interval + 0.01
    # The new leader re-dispatched what the old one had assigned but never saw acknowledged …
    assert obs["redispatched_after"] > obs["redispatched"]
    # … and the copies of tasks that had in fact finished were absorbed by the idempotent sink.
    assert obs["deduplicated_after"] > obs["deduplicated"]
    t = report["tasks"]
    assert t["lost"] == 0 and t["duplicated"] == 0 and t["lost_all_cohorts"] == 0
    assert t["failed"] == 0
    _recovered(report)


def test_kill_orchestrator_on_a_standby_keeps_the_leader_and_the_standby_comes_back() -> None:
    obs: Obs = {}

    async def plan(exp: Experiment) -> None:
        p = exp.pipeline
        d = p.dispatcher
        await _at(exp, FAULT_AT)
        leader = d.leader_id
        standby = next(r.id for r in d.replicas if r.id != leader)
        obs["leader"], obs["standby"] = leader, standby
        obs["completed_a"] = p.ledger.total.completed
        record = exp.injector.inject("kill_orchestrator", standby, ttl=8.0)
        obs["targets"] = record.targets
        obs["standby_alive_after_kill"] = p.agents[standby].alive
        await _at(exp, FAULT_AT + 0.4)  # before the supervisor's first restart (0.5 s backoff)
        obs["leader_during"] = d.leader_id
        obs["elections_during"] = d.elections
        obs["completed_b"] = p.ledger.total.completed
        await _at(exp, FAULT_AT + 3.0)
        obs["standby_alive_later"] = p.agents[standby].alive
        obs["leader_later"] = d.leader_id
        obs["elections_later"] = d.elections

    _, report = _run(plan)
    assert obs["targets"] == (obs["standby"],)
    assert obs["standby_alive_after_kill"] is False
    # The leader never lost the lease: no election, dispatch carried on.
    assert obs["leader_during"] == obs["leader"] == obs["leader_later"]
    assert obs["elections_during"] == obs["elections_later"] == 0
    assert obs["completed_b"] - obs["completed_a"] > 40  # ≈ 200/s × 0.35 s
    assert obs["standby_alive_later"] is True  # the supervisor resurrected it
    _recovered(report)


def test_kill_agent_kills_a_worker_that_the_supervisor_restarts() -> None:
    obs: Obs = {}

    async def plan(exp: Experiment) -> None:
        p = exp.pipeline
        agent = p.agents["worker-1"]
        await _at(exp, FAULT_AT)
        exp.injector.inject("kill_agent", "worker-1", ttl=8.0)
        obs["alive_after_kill"] = agent.alive
        obs["served_a"] = agent.served
        await _at(exp, FAULT_AT + 0.4)  # the supervisor's first backoff is 0.5 s
        obs["alive_during"], obs["served_b"] = agent.alive, agent.served
        await _at(exp, FAULT_AT + 3.0)
        obs["alive_later"], obs["served_c"] = agent.alive, agent.served
        obs["restarts"] = agent.restart_count

    exp, report = _run(plan)
    assert obs["alive_after_kill"] is False and obs["alive_during"] is False
    assert obs["served_b"] == obs["served_a"]  # a dead worker serves nothing
    assert obs["alive_later"] is True and obs["restarts"] == 1
    assert obs["served_c"] > obs["served_b"] + 20  # and, resurrected, it works again
    assert exp.pipeline.supervisor.gave_up == []
    _recovered(report)


def test_pause_agent_stops_a_worker_until_its_ttl_ends() -> None:
    obs: Obs = {}

    async def plan(exp: Experiment) -> None:
        agent = exp.pipeline.agents["worker-1"]
        await _at(exp, FAULT_AT)
        exp.injector.inject("pause_agent", "worker-1", ttl=8.0)
        await _at(exp, FAULT_AT + 0.1)  # the task it held, if any, has finished
        obs["paused"], obs["state"], obs["served_a"] = agent.paused, agent.state, agent.served
        await _at(exp, FAULT_AT + 7.5)
        obs["served_b"] = agent.served
        obs["completed_during"] = exp.pipeline.ledger.total.completed
        await _at(exp, FAULT_AT + 11.0)
        obs["paused_later"], obs["served_c"] = agent.paused, agent.served

    _, report = _run(plan)
    assert obs["paused"] is True and obs["state"] == "paused"
    assert obs["served_b"] == obs["served_a"]  # a paused worker serves nothing …
    assert obs["completed_during"] > 200 * FAULT_AT  # … while the other three keep up with the load
    assert obs["paused_later"] is False
    assert obs["served_c"] > obs["served_b"] + 20
    fault = _recovered(report)
    assert fault["reverted_by"] == "ttl"


def test_resume_agent_resumes_a_paused_worker_before_its_ttl() -> None:
    obs: Obs = {}

    async def plan(exp: Experiment) -> None:
        agent = exp.pipeline.agents["worker-1"]
        await _at(exp, FAULT_AT)
        exp.injector.inject("pause_agent", "worker-1", ttl=20.0)
        await _at(exp, FAULT_AT + 3.0)
        obs["paused_before"], obs["served_a"] = agent.paused, agent.served
        exp.injector.inject("resume_agent", "worker-1")
        obs["paused_after"] = agent.paused
        await _at(exp, FAULT_AT + 5.0)
        obs["served_b"] = agent.served  # long before the pause's TTL (FAULT_AT + 20)

    _, report = _run(plan)
    assert obs["paused_before"] is True and obs["paused_after"] is False
    assert obs["served_b"] > obs["served_a"] + 20
    pause = _recovered(report, 0)
    resume = _recovered(report, 1)
    assert report["faults"][1]["action"] == "resume_agent"
    # The pause's damage was healed by the resume, well before the pause's own end.
    assert pause["mechanism_recovered_at"] <= resume["injected_at"] + 0.5
    assert pause["mechanism_recovered_at"] < pause["injected_at"] + pause["ttl"]


def test_slow_agent_multiplies_one_workers_service_time() -> None:
    factor = 10.0
    obs: Obs = {}

    async def plan(exp: Experiment) -> None:
        p = exp.pipeline
        workers = {w.agent.id: w.agent for w in p.workers}
        await _at(exp, FAULT_AT)
        exp.injector.inject("slow_agent", "worker-1", {"factor": factor}, ttl=10.0)
        obs["slow"], obs["state"] = workers["worker-1"].slow, workers["worker-1"].state
        await _at(exp, FAULT_AT + 1.0)
        before = {i: a.served for i, a in workers.items()}
        await _at(exp, FAULT_AT + 9.0)
        obs["served"] = {i: a.served - before[i] for i, a in workers.items()}
        obs["mean_service"] = p.mean_service
        await _at(exp, FAULT_AT + 11.0)
        obs["slow_later"] = workers["worker-1"].slow

    _, report = _run(plan)
    assert obs["slow"] == factor and obs["state"] == "slow"
    served = obs["served"]
    # One task at a time, each taking ~factor × the mean service time: a ceiling of 8 s / 0.1 s = 80.
    assert served["worker-1"] <= 1.3 * 8.0 / (factor * obs["mean_service"])
    others = [n for w, n in served.items() if w != "worker-1"]
    assert served["worker-1"] < 0.3 * min(others)
    assert obs["slow_later"] == 1.0
    _recovered(report)


def test_network_partition_cuts_a_worker_off_and_its_task_lease_expires() -> None:
    obs: Obs = {}

    async def plan(exp: Experiment) -> None:
        p = exp.pipeline
        worker = p.workers[1]
        agent = worker.agent
        await _at(exp, FAULT_AT)
        while worker.current is None:  # cut it off while it holds a task
            await exp.clock.sleep(0.001)
        held = worker.current
        obs["expired_a"] = p.dispatcher.lease_expired
        exp.injector.inject("network_partition", agent.id, ttl=8.0)
        obs["partitioned"], obs["state"] = agent.partitioned, agent.state
        await _at(exp, FAULT_AT + 0.2)
        obs["served_a"] = agent.served
        obs["held_still_open"] = held.id in p.ledger.in_flight  # its outcome never reached the sink
        await _at(exp, FAULT_AT + 4.0)  # past the task lease (2 s) and a heartbeat
        obs["served_b"] = agent.served
        obs["expired_b"] = p.dispatcher.lease_expired
        obs["held_ended"] = held.id not in p.ledger.in_flight  # re-dispatched and finished elsewhere
        await _at(exp, FAULT_AT + 10.0)
        obs["partitioned_later"], obs["served_c"] = agent.partitioned, agent.served

    _, report = _run(plan)
    assert obs["partitioned"] is True and obs["state"] == "partitioned"
    assert obs["held_still_open"] is True
    assert obs["served_b"] == obs["served_a"]
    assert obs["expired_b"] > obs["expired_a"]
    assert obs["held_ended"] is True
    assert obs["partitioned_later"] is False and obs["served_c"] > obs["served_b"] + 20
    _recovered(report)


def test_pool_exhaustion_closes_three_quarters_of_the_worker_pool() -> None:
    obs: Obs = {}

    async def plan(exp: Experiment) -> None:
        p = exp.pipeline
        await _at(exp, FAULT_AT)
        record = exp.injector.inject("pool_exhaustion", ttl=6.0)
        obs["targets"] = record.targets
        obs["closed"] = sorted(w.agent.id for w in p.workers if not w.agent.gate.is_set())
        obs["exhausted"] = sorted(w.agent.id for w in p.workers if w.agent.exhausted)
        await _at(exp, FAULT_AT + 1.0)
        completed, depth = p.ledger.total.completed, p.queue.depth
        shed = p.ledger.total.rejected_by.get("shed", 0)
        await _at(exp, FAULT_AT + 5.0)
        obs["rate"] = (p.ledger.total.completed - completed) / 4.0
        obs["growth"] = p.queue.depth - depth
        obs["shed"] = p.ledger.total.rejected_by.get("shed", 0) - shed
        obs["depth"] = p.queue.depth
        obs["mean_service"] = p.mean_service
        await _at(exp, FAULT_AT + 7.0)
        obs["closed_later"] = [w.agent.id for w in p.workers if not w.agent.gate.is_set()]

    _, report = _run(plan)
    assert len(obs["targets"]) == 3 and obs["closed"] == obs["exhausted"] == sorted(obs["targets"])
    # One worker left: at most ~1/mean_service (≈ 100/s) of the 200/s offered gets through; admission control
    # sheds the rest rather than queue what cannot end within the deadline (0.8 s of the one worker's work).
    assert obs["rate"] <= 1.15 / obs["mean_service"]
    assert obs["growth"] + obs["shed"] > 4.0 * 60
    assert obs["shed"] > 4.0 * 60 and obs["depth"] <= 0.8 / obs["mean_service"] * 1.2
    assert obs["closed_later"] == []
    _recovered(report)


def test_drop_messages_loses_dispatches_that_task_leases_bring_back() -> None:
    obs: Obs = {}

    async def plan(exp: Experiment) -> None:
        p = exp.pipeline
        d = p.dispatcher
        await _at(exp, FAULT_AT)
        obs["expired_a"], obs["redispatched_a"] = d.lease_expired, d.redispatched
        exp.injector.inject("drop_messages", params={"probability": 0.3}, ttl=6.0)
        obs["probabilities"] = [w.drop_probability for w in p.workers]
        await _at(exp, FAULT_AT + 2.5)
        obs["dropped_early"] = sum(w.dropped for w in p.workers)
        await _at(exp, FAULT_AT + 5.0)
        obs["dropped"] = sum(w.dropped for w in p.workers)
        obs["expired_b"], obs["redispatched_b"] = d.lease_expired, d.redispatched
        await _at(exp, FAULT_AT + 10.0)  # the fault ended at +6, the last leases at +8
        obs["dropped_total"] = sum(w.dropped for w in p.workers)
        obs["expired_c"] = d.lease_expired
        obs["probabilities_later"] = [w.drop_probability for w in p.workers]

    _, report = _run(plan)
    assert obs["probabilities"] == [0.3] * 4
    # About 30 % of ~1000 dispatches in 5 s were lost …
    assert 150 < obs["dropped"] < 500
    # … and their leases expired and re-dispatched them: every dispatch lost by +2.5 s had its lease
    # (2 s) run out, and a heartbeat sweep it, by +5 s.
    assert obs["expired_b"] - obs["expired_a"] >= obs["dropped_early"] > 0
    assert obs["redispatched_b"] - obs["redispatched_a"] >= obs["expired_b"] - obs["expired_a"]
    assert obs["expired_c"] - obs["expired_a"] >= obs["dropped_total"]
    assert obs["probabilities_later"] == [0.0] * 4
    assert report["tasks"]["failed"] == 0
    _recovered(report)


# --- the workflow DAG and its stages -------------------------------------------------------------


def test_remove_node_reroutes_around_the_tool_through_its_backup() -> None:
    obs: Obs = {}

    async def plan(exp: Experiment) -> None:
        p = exp.pipeline
        backup = p.stages["search_backup"]
        await _at(exp, FAULT_AT)
        obs["route_before"] = p.route_names
        obs["backup_before"] = backup.successes
        exp.injector.inject("remove_node", "search", ttl=8.0)
        await _at(exp, FAULT_AT + 0.3)  # the leader's next heartbeat reroutes
        obs["route_during"] = p.route_names
        search_calls = p.stages["search"].successes
        backup_calls = backup.successes
        await _at(exp, FAULT_AT + 7.0)
        obs["search_calls"] = p.stages["search"].successes - search_calls
        obs["backup_calls"] = backup.successes - backup_calls
        await _at(exp, FAULT_AT + 8.5)
        obs["route_after"] = p.route_names

    _, report = _run(plan)
    assert obs["route_before"] == DEFAULT_ROUTE
    assert obs["route_during"] == BACKUP_ROUTE
    assert obs["backup_before"] == 0
    assert obs["search_calls"] == 0 and obs["backup_calls"] > 200 * 6
    assert obs["route_after"] == DEFAULT_ROUTE
    fault = _recovered(report)
    assert fault["mechanism_recovered_at"] <= fault["injected_at"] + 0.3


def test_remove_edge_reroutes_through_the_remaining_path() -> None:
    obs: Obs = {}

    async def plan(exp: Experiment) -> None:
        p = exp.pipeline
        await _at(exp, FAULT_AT)
        exp.injector.inject("remove_edge", "plan->search", ttl=8.0)
        obs["edges_removed"] = set(p.dag.removed_edges)
        await _at(exp, FAULT_AT + 0.3)
        obs["route_during"] = p.route_names
        calls = p.stages["search_backup"].successes
        await _at(exp, FAULT_AT + 7.0)
        obs["backup_calls"] = p.stages["search_backup"].successes - calls
        await _at(exp, FAULT_AT + 8.5)
        obs["route_after"] = p.route_names
        obs["edges_removed_after"] = set(p.dag.removed_edges)

    _, report = _run(plan)
    assert obs["edges_removed"] == {("plan", "search")}
    assert obs["route_during"] == BACKUP_ROUTE and obs["backup_calls"] > 200 * 6
    assert obs["route_after"] == DEFAULT_ROUTE and obs["edges_removed_after"] == set()
    assert report["tasks"]["failed"] == 0
    _recovered(report)


def test_tool_timeout_hangs_the_tool_and_tasks_complete_degraded_or_around_it() -> None:
    obs: Obs = {}

    async def plan(exp: Experiment) -> None:
        p = exp.pipeline
        search, backup = p.stages["search"], p.stages["search_backup"]
        await _at(exp, FAULT_AT)
        assert exp.telemetry.latest is not None
        obs["p95_before"] = exp.telemetry.latest.sojourn_p95
        obs["degraded_a"], obs["backup_a"] = search.degraded, backup.successes
        exp.injector.inject("tool_timeout", "search", ttl=6.0)
        obs["hang"] = search.hang
        routes, p95 = [], []
        for k in range(1, 23):  # every 0.25 s while the fault is active
            await _at(exp, FAULT_AT + 0.25 * k)
            routes.append(p.route_names)
            p95.append(exp.telemetry.latest.sojourn_p95)
        obs["routes"], obs["p95_max"] = routes, max(p95)
        obs["degraded_b"], obs["backup_b"], obs["trips"] = search.degraded, backup.successes, search.trips
        await _at(exp, FAULT_AT + 7.0)
        obs["hang_later"], obs["degraded_c"] = search.hang, search.degraded
        await _at(exp, FAULT_AT + 12.0)
        obs["degraded_d"], obs["route_later"] = search.degraded, p.route_names

    _, report = _run(plan)
    assert obs["hang"] is True and obs["degraded_a"] == 0
    # Hung calls are cut at the timeout, retried, then complete degraded — they do not fail …
    assert obs["degraded_b"] > 0
    assert report["tasks"]["failed"] == 0
    # … and they are slow: p95 sojourn jumps well above the baseline.
    assert obs["p95_max"] > 3 * obs["p95_before"]
    # The tool's breaker opens and the leader routes around it through the backup tool.
    assert obs["trips"] >= 1
    assert BACKUP_ROUTE in obs["routes"] and obs["backup_b"] - obs["backup_a"] > 200
    assert obs["hang_later"] is False and obs["degraded_d"] == obs["degraded_c"]
    assert obs["route_later"] == DEFAULT_ROUTE
    _recovered(report)


def test_llm_failure_sends_calls_to_the_fallback_model() -> None:
    obs: Obs = {}

    async def plan(exp: Experiment) -> None:
        stage = exp.pipeline.stages["plan"]
        await _at(exp, FAULT_AT)
        obs["fallback_a"] = stage.fallback_served
        exp.injector.inject("llm_failure", ttl=6.0)
        obs["down"] = stage.llm_down
        await _at(exp, FAULT_AT + 5.0)
        obs["fallback_b"] = stage.fallback_served
        await _at(exp, FAULT_AT + 6.5)
        obs["fallback_c"] = stage.fallback_served
        await _at(exp, FAULT_AT + 10.0)
        obs["down_later"], obs["fallback_d"] = stage.llm_down, stage.fallback_served

    _, report = _run(plan)
    assert obs["down"] is True and obs["fallback_a"] == 0
    assert obs["fallback_b"] > 200 * 4  # nearly every task in 5 s
    assert obs["down_later"] is False and obs["fallback_d"] == obs["fallback_c"]
    assert report["tasks"]["failed"] == 0
    _recovered(report)


def test_memory_corrupt_entries_are_caught_and_repaired() -> None:
    obs: Obs = {}

    async def plan(exp: Experiment) -> None:
        store = exp.pipeline.memory["recall"]
        await _at(exp, FAULT_AT)
        repaired = store.repaired
        record = exp.injector.inject("memory_corrupt", params={"entries": 10}, ttl=5.0)
        obs["targets"] = record.targets
        obs["corrupted"] = set(store.corrupted)
        await _at(exp, FAULT_AT + 0.25 + 0.01)  # one heartbeat later: scrubbed
        obs["corrupted_after"] = set(store.corrupted)
        obs["repaired"] = store.repaired - repaired
        obs["values_ok"] = store.values == [f"recall:{i}".encode() for i in range(len(store.values))]
        obs["undetected"] = store.undetected_reads

    _, report = _run(plan)
    assert obs["targets"] == ("recall",)
    assert len(obs["corrupted"]) == 10
    assert obs["corrupted_after"] == set() and obs["repaired"] == 10 and obs["values_ok"] is True
    assert obs["undetected"] == 0
    assert report["score"]["consistency"] == 100.0  # caught by checksums: no undetected corruption
    _recovered(report)


def test_mcp_disconnect_fails_calls_until_the_client_reconnects_after_the_outage() -> None:
    """The connection drops, the server is back after its 1 s outage, and the client reconnects while
    the fault is still active: a lost connection the runtime heals, timed from the injection."""
    ttl = 5.0
    obs: Obs = {}

    async def plan(exp: Experiment) -> None:
        p = exp.pipeline
        conn = p.mcp["context"]
        await _at(exp, FAULT_AT)
        exp.injector.inject("mcp_disconnect", ttl=ttl)
        obs["connected"] = conn.connected
        await _at(exp, FAULT_AT + 0.9)
        obs["connected_during"] = conn.connected
        obs["failed_during"] = p.ledger.total.failed_by.get("mcp_disconnected", 0)
        await _at(exp, FAULT_AT + 3.5)  # the outage, plus reconnect backoffs
        obs["connected_after"] = conn.connected
        obs["reconnected_at"] = conn.reconnected_at
        failed = p.ledger.total.failed_by.get("mcp_disconnected", 0)
        await _at(exp, FAULT_AT + ttl + 3.0)
        obs["failed_after"] = p.ledger.total.failed_by.get("mcp_disconnected", 0) - failed

    _, report = _run(plan)
    assert obs["connected"] is False and obs["connected_during"] is False
    assert 0 < obs["failed_during"] < 100
    assert obs["connected_after"] is True
    # Backoff from 50 ms doubling: the first attempt after the 1 s outage lands by 1.55 s.
    assert FAULT_AT + 1.0 <= obs["reconnected_at"] <= FAULT_AT + 1.6
    assert obs["failed_after"] == 0
    fault = _recovered(report)
    assert fault["clock"] == "heal" and fault["mechanism_recovered_at"] < FAULT_AT + ttl
    # Healed before the TTL: the recovery is not charged the fault's 5 s.
    assert fault["recovery_s"] < 3.0


def test_mcp_disconnect_with_an_outage_as_long_as_the_ttl_heals_only_after_it() -> None:
    ttl = 5.0
    obs: Obs = {}

    async def plan(exp: Experiment) -> None:
        p = exp.pipeline
        conn = p.mcp["context"]
        await _at(exp, FAULT_AT)
        exp.injector.inject("mcp_disconnect", params={"outage": "1m"}, ttl=ttl)
        await _at(exp, FAULT_AT + ttl - 0.5)
        obs["connected_during"] = conn.connected
        obs["failed_during"] = p.ledger.total.failed_by.get("mcp_disconnected", 0)
        obs["bypassed_during"] = p.stages["context"].degraded
        await _at(exp, FAULT_AT + ttl + 3.0)  # TTL, plus a reconnect backoff of at most 2 s
        obs["connected_after"] = conn.connected
        obs["reconnected_at"] = conn.reconnected_at

    _, report = _run(plan)
    assert obs["connected_during"] is False
    # The first calls fail, with the reason, after the stage's retries; then its breaker opens and the
    # optional `context` stage is skipped: tasks complete degraded instead of failing.
    assert 0 < obs["failed_during"] < 100
    assert obs["bypassed_during"] > 500
    assert obs["connected_after"] is True
    assert FAULT_AT + ttl <= obs["reconnected_at"] <= FAULT_AT + ttl + 2.5
    fault = _recovered(report)
    assert fault["mechanism_recovered_at"] >= FAULT_AT + ttl
    # Users got degraded answers for the whole outage: the time to heal covers it.
    assert fault["recovery_s"] >= ttl


def test_latency_jitter_raises_p95_sojourn() -> None:
    obs: Obs = {}

    async def plan(exp: Experiment) -> None:
        telemetry = exp.telemetry
        await _at(exp, FAULT_AT)
        obs["p95_before"] = telemetry.latest.sojourn_p95 if telemetry.latest else None
        exp.injector.inject("latency_jitter", "answer", {"jitter": 0.02}, ttl=8.0)
        obs["jitter"] = exp.pipeline.stages["answer"].jitter
        await _at(exp, FAULT_AT + 6.0)
        obs["p95_during"] = telemetry.latest.sojourn_p95 if telemetry.latest else None
        await _at(exp, FAULT_AT + 9.0)
        obs["jitter_later"] = exp.pipeline.stages["answer"].jitter

    _, report = _run(plan)
    assert obs["jitter"] == 0.02 and obs["jitter_later"] == 0.0
    assert obs["p95_during"] > 2 * obs["p95_before"]
    _recovered(report)


# --- load ------------------------------------------------------------------------------------------


def test_load_spike_multiplies_the_offered_rate() -> None:
    factor = 3.0
    obs: Obs = {}

    async def plan(exp: Experiment) -> None:
        p = exp.pipeline
        await _at(exp, 5.0)
        offered = p.ledger.total.offered
        await _at(exp, FAULT_AT)
        obs["base_rate"] = (p.ledger.total.offered - offered) / (FAULT_AT - 5.0)
        exp.injector.inject("load_spike", params={"factor": factor}, ttl=6.0)
        obs["surge"] = p.surge.factor
        await _at(exp, FAULT_AT + 0.5)
        offered = p.ledger.total.offered
        await _at(exp, FAULT_AT + 5.5)
        obs["spike_rate"] = (p.ledger.total.offered - offered) / 5.0
        await _at(exp, FAULT_AT + 7.0)
        offered = p.ledger.total.offered
        await _at(exp, FAULT_AT + 12.0)
        obs["after_rate"] = (p.ledger.total.offered - offered) / 5.0
        obs["surge_later"] = p.surge.factor

    exp, report = _run(plan)
    base = exp.settings.load.rate
    assert obs["base_rate"] == pytest.approx(base, rel=0.1)
    assert obs["surge"] == factor
    assert obs["spike_rate"] == pytest.approx(factor * base, rel=0.1)
    assert obs["surge_later"] == 1.0
    assert obs["after_rate"] == pytest.approx(base, rel=0.1)
    _recovered(report)


# --- bad injections: refused, naming the field, changing nothing -----------------------------------


def _refused(setup: Callable[[Experiment], None], attempt: Callable[[Experiment], object]) -> Obs:
    """Run ``setup`` then ``attempt`` inside a short run; return the error and whether anything changed."""
    obs: Obs = {}

    async def plan(exp: Experiment) -> None:
        await _at(exp, 2.05)
        setup(exp)
        flags, faults, events = _flags(exp), len(exp.injector.faults), len(exp.events.events("fault"))
        try:
            attempt(exp)
        except FaultError as exc:
            obs["error"] = exc
        obs["unchanged"] = _flags(exp) == flags
        obs["new_records"] = len(exp.injector.faults) - faults
        obs["new_events"] = len(exp.events.events("fault")) - events

    _run(plan, duration=3.0)
    assert isinstance(obs.get("error"), FaultError), "the injection was not refused"
    assert obs["unchanged"] is True and obs["new_records"] == 0 and obs["new_events"] == 0
    return obs


def _nothing(exp: Experiment) -> None:
    pass


def test_an_unknown_action_is_refused_with_the_valid_ones() -> None:
    error = _refused(_nothing, lambda exp: exp.injector.inject("explode_everything"))["error"]
    assert error.field == "action" and status_of(error) == 422
    assert "explode_everything" in error.message
    assert all(name in error.message for name in CATALOGUE)
    assert len(CATALOGUE) == 22


@pytest.mark.parametrize(
    ("action", "target"),
    [
        ("pause_agent", "worker-99"),
        ("kill_agent", "orchestrator-1"),  # an orchestrator is not a worker or producer
        ("remove_node", "no_such_stage"),
        ("remove_edge", "search->plan"),
        ("tool_timeout", "plan"),  # an llm stage, not a tool
        ("load_spike", "worker-0"),
    ],
)
def test_an_unknown_target_is_refused(action: str, target: str) -> None:
    error = _refused(_nothing, lambda exp: exp.injector.inject(action, target))["error"]
    assert error.field == "target" and status_of(error) == 422
    assert target in error.message


@pytest.mark.parametrize("target", ["0%", "150%", "-10%", "lots%"])
def test_a_percentage_out_of_range_is_refused(target: str) -> None:
    error = _refused(_nothing, lambda exp: exp.injector.inject("pause_agent", target))["error"]
    assert error.field == "target" and status_of(error) == 422
    assert target in error.message


def test_an_unknown_param_is_refused() -> None:
    error = _refused(_nothing, lambda exp: exp.injector.inject("slow_agent", "worker-0", {"speed": 2.0}))["error"]
    assert error.field == "params.speed" and status_of(error) == 422
    assert "factor" in error.message  # names the valid ones


@pytest.mark.parametrize(
    ("action", "params", "field"),
    [
        ("slow_agent", {"factor": 0.5}, "params.factor"),
        ("slow_agent", {"factor": 5000.0}, "params.factor"),
        ("drop_messages", {"probability": 1.5}, "params.probability"),
        ("memory_corrupt", {"entries": 2.5}, "params.entries"),
        ("load_spike", {"factor": "lots"}, "params.factor"),
        ("load_spike", {"factor": "nan"}, "params.factor"),
        ("slow_agent", {"factor": "0.5"}, "params.factor"),  # a number as text is still checked for range
    ],
)
def test_a_param_out_of_range_is_refused(action: str, params: dict[str, object], field: str) -> None:
    error = _refused(_nothing, lambda exp: exp.injector.inject(action, None, params))["error"]
    assert error.field == field and status_of(error) == 422


@pytest.mark.parametrize("ttl", [0.0, -1.0])
def test_a_ttl_that_is_not_positive_is_refused(ttl: float) -> None:
    error = _refused(_nothing, lambda exp: exp.injector.inject("pause_agent", "worker-0", ttl=ttl))["error"]
    assert error.field == "ttl" and status_of(error) == 422


def test_a_ttl_over_the_maximum_is_refused() -> None:
    def attempt(exp: Experiment) -> None:
        exp.injector.inject("pause_agent", "worker-0", ttl=exp.settings.faults.max_ttl + 1)

    error = _refused(_nothing, attempt)["error"]
    assert error.field == "ttl" and status_of(error) == 422
    assert "600" in error.message


def test_a_second_slow_agent_on_the_same_worker_conflicts() -> None:
    def setup(exp: Experiment) -> None:
        exp.injector.inject("slow_agent", "worker-0", {"factor": 3.0})

    def attempt(exp: Experiment) -> None:
        exp.injector.inject("slow_agent", "worker-0", {"factor": 7.0})

    error = _refused(setup, attempt)["error"]
    assert error.field == "target" and status_of(error) == 409
    assert "worker-0" in error.message


def test_more_than_the_concurrent_cap_is_refused() -> None:
    def setup(exp: Experiment) -> None:
        cap = exp.settings.faults.max_concurrent
        for target in ["worker-1", "worker-2", "worker-3", "producer-0", "producer-1"][:cap]:
            exp.injector.inject("slow_agent", target, {"factor": 1.5})
        assert len(exp.injector.active()) == cap

    error = _refused(setup, lambda exp: exp.injector.inject("slow_agent", "worker-0"))["error"]
    assert error.field == "action" and status_of(error) == 409
    assert "5" in error.message


def test_resume_agent_on_an_agent_that_is_not_paused_is_refused() -> None:
    error = _refused(_nothing, lambda exp: exp.injector.inject("resume_agent", "worker-2"))["error"]
    assert error.field == "target" and status_of(error) == 409
    assert "worker-2" in error.message


# --- safety ----------------------------------------------------------------------------------------


def test_the_safety_lever_reverts_everything_and_refuses_new_faults_until_released() -> None:
    obs: Obs = {}

    async def plan(exp: Experiment) -> None:
        p = exp.pipeline
        injector = exp.injector
        await _at(exp, 5.05)
        clean = _flags(exp)
        injector.inject("slow_agent", "worker-0", {"factor": 4.0}, ttl=60.0)
        injector.inject("pause_agent", "worker-1", ttl=60.0)
        injector.inject("tool_timeout", "search", ttl=60.0)
        injector.inject("load_spike", params={"factor": 2.0}, ttl=60.0)
        injector.inject("remove_node", "search_backup", ttl=60.0)
        obs["active_before"] = len(injector.active())
        obs["dirty"] = _flags(exp) != clean
        obs["reverted"] = injector.pull_lever("operator: abort")
        obs["active_after"] = len(injector.active())
        obs["lever"] = injector.lever
        obs["restored"] = _flags(exp) == clean
        obs["reverted_by"] = [f.reverted_by for f in injector.faults]
        try:
            injector.inject("kill_agent", "worker-2")
        except FaultError as exc:
            obs["refused"] = exc
        obs["records_while_pulled"] = len(injector.faults)
        obs["worker_2_alive"] = p.agents["worker-2"].alive
        await _at(exp, 6.05)
        injector.release_lever()
        obs["lever_released"] = injector.lever
        record = injector.inject("pause_agent", "worker-2", ttl=2.0)
        obs["after_release"] = (record.action, p.agents["worker-2"].paused)

    _, report = _run(plan, duration=20.0)
    assert obs["active_before"] == 5 and obs["dirty"] is True
    assert obs["reverted"] == 5 and obs["active_after"] == 0
    assert obs["lever"] == "operator: abort"
    assert obs["restored"] is True
    assert obs["reverted_by"] == ["lever"] * 5
    error = obs["refused"]
    assert isinstance(error, FaultError) and status_of(error) == 409 and "lever" in error.message
    assert obs["records_while_pulled"] == 5 and obs["worker_2_alive"] is True
    assert obs["lever_released"] is None
    assert obs["after_release"] == ("pause_agent", True)
    assert [f["reverted_by"] for f in report["faults"]] == ["lever"] * 5 + ["ttl"]
    _accounted(report)


def test_a_stop_condition_pulls_the_lever_by_itself() -> None:
    overlay = {"faults": {"stop_conditions": [{"metric": "availability", "below": 0.5, "for": 2.0}]}}
    obs: Obs = {}

    async def plan(exp: Experiment) -> None:
        p = exp.pipeline
        injector = exp.injector
        await _at(exp, FAULT_AT)
        record = injector.inject("pool_exhaustion", "100%", ttl=60.0)
        obs["closed"] = sum(1 for w in p.workers if not w.agent.gate.is_set())
        while injector.lever is None and exp.clock.now() - p.t0 < FAULT_AT + 10.0:
            await exp.clock.sleep(0.1)
        obs["pulled_after"] = exp.clock.now() - p.t0 - FAULT_AT
        obs["lever"] = injector.lever
        obs["record"] = (record.active, record.reverted_by)
        obs["closed_after"] = sum(1 for w in p.workers if not w.agent.gate.is_set())
        try:
            injector.inject("pause_agent", "worker-0")
        except FaultError as exc:
            obs["refused"] = status_of(exc)

    _, report = _run(plan, duration=30.0, overlay=overlay)
    assert obs["closed"] == 4
    # Availability collapses within the telemetry window (1 s), then must stay low for 2 s.
    assert 2.0 <= obs["pulled_after"] <= 4.0
    assert obs["lever"] is not None and "stop condition" in obs["lever"] and "availability" in obs["lever"]
    assert obs["record"] == (False, "lever")
    assert obs["closed_after"] == 0
    assert obs["refused"] == 409
    assert report["faults"][0]["reverted_by"] == "lever"
    _accounted(report)


# --- regressions: defects that must stay fixed -----------------------------------------------------


# A chain with no alternate and no optional stage (the default DAG has a way around every stage).
CHAIN = {
    "stages": [
        {"name": "a", "service": {"mean": 0.002}, "next": ["b"]},
        {"name": "b", "service": {"mean": 0.002}, "next": ["c"]},
        {"name": "c", "service": {"mean": 0.002}, "next": []},
    ]
}


@pytest.mark.parametrize(("action", "target"), [("remove_node", "b"), ("remove_edge", "b->c")])
def test_removing_a_stage_with_no_alternate_path_recovers_once_the_ttl_restores_it(action: str, target: str) -> None:
    obs: Obs = {}

    async def plan(exp: Experiment) -> None:
        p = exp.pipeline
        await _at(exp, FAULT_AT)
        exp.injector.inject(action, target, ttl=5.0)
        await _at(exp, FAULT_AT + 2.0)
        obs["route_during"] = p.route_names
        obs["no_route"] = p.ledger.total.failed_by.get("no_route", 0)
        await _at(exp, FAULT_AT + 6.0)
        obs["route_after"] = p.route_names

    _, report = _run(plan, overlay=CHAIN)
    assert obs["route_during"] is None and obs["no_route"] > 200  # no path: tasks fail, with the reason
    assert obs["route_after"] == ("a", "b", "c")
    fault = _recovered(report)
    assert fault["mechanism_recovered_at"] >= fault["reverted_at"]
    # The service was down for the whole TTL: it cannot have recovered before it came back.
    assert fault["recovery_s"] >= 5.0 and fault["service_recovered_at"] >= fault["reverted_at"]


def test_drop_messages_mechanism_recovers_only_after_leases_bring_the_dispatches_back() -> None:
    async def plan(exp: Experiment) -> None:
        await _at(exp, 15.0)  # on the telemetry tick grid, as a scenario action with `delay: 15` is
        exp.injector.inject("drop_messages", params={"probability": 0.3}, ttl=6.0)

    exp, report = _run(plan)
    fault = report["faults"][0]
    assert fault["mechanism_recovered_at"] >= fault["injected_at"] + exp.settings.orchestrator.task_lease
    _recovered(report)


def test_numbers_are_accepted_as_json_numbers_or_as_text_and_durations_as_either() -> None:

    assert CATALOGUE["slow_agent"].check_params({"factor": "10"}) == {"factor": 10.0}
    assert CATALOGUE["slow_agent"].check_params({"factor": 10}) == {"factor": 10.0}
    assert CATALOGUE["memory_corrupt"].check_params({"entries": " 40 "}) == {"entries": 40.0}
    assert CATALOGUE["latency_jitter"].check_params({"jitter": "250ms"}) == {"jitter": 0.25}
    assert CATALOGUE["latency_jitter"].check_params({"jitter": 0.25}) == {"jitter": 0.25}
