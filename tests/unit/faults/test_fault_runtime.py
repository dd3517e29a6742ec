"""The fault catalogue acts only through the Runtime interface: an in-memory fake drives every action.

The fake records what the catalogue asked of it and lets each test move its counters by hand, so an
action's apply, revert and recovery checks are pinned without a pipeline. The last test runs every
action on a real pipeline and checks it comes back to where it started.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

import pytest
from conftest import settings

from chaosd.api.app import status_of
from chaosd.core.clock import LoopClock, new_event_loop
from chaosd.core.errors import FaultError
from chaosd.experiment.runner import Experiment
from chaosd.faults import CATALOGUE
from chaosd.faults.runtime import Runtime
from chaosd.pipeline import Pipeline

# --- the fake ------------------------------------------------------------------------------------


@dataclass
class FakeAgent:
    id: str
    kind: str
    alive: bool = True
    paused: bool = False
    partitioned: bool = False
    exhausted: bool = False
    slow: float = 1.0
    served: int = 0
    drop: float = 0.0
    dropped: int = 0
    holding: bool = False  # a worker with a task in service


@dataclass
class FakeStage:
    kind: str
    hang: bool = False
    hang_timeout: float = 0.1
    llm_down: bool = False
    jitter: float = 0.0
    degraded: int = 0
    successes: int = 0
    fallback_served: int = 0


@dataclass
class FakeMcp:
    connected: bool = True
    server_up: bool = True
    outage: float | None = None


@dataclass(frozen=True)
class FakeCounts:
    late: int = 0
    failed: int = 0
    rejected: int = 0
    degraded: int = 0


@dataclass(frozen=True)
class FakeLedger:
    total: FakeCounts = FakeCounts()


@dataclass(frozen=True)
class FakeDuplicates:
    count: int = 0


@dataclass(frozen=True)
class FakeAudit:
    total: FakeDuplicates = FakeDuplicates()


@dataclass(frozen=True)
class FakeStore:
    undetected_reads: int = 0


@dataclass
class FakeRuntime:
    """A runtime of dicts: three orchestrators (orchestrator-0 leads), four workers, two producers, seven stages."""

    agents: dict[str, FakeAgent] = field(
        default_factory=lambda: {
            a.id: a
            for a in [
                *(FakeAgent(f"orchestrator-{i}", "orchestrator") for i in range(3)),
                *(FakeAgent(f"worker-{i}", "worker") for i in range(4)),
                *(FakeAgent(f"producer-{i}", "producer") for i in range(2)),
            ]
        }
    )
    stages: dict[str, FakeStage] = field(
        default_factory=lambda: {
            "plan": FakeStage("llm"),
            "search": FakeStage("tool", hang_timeout=0.05),
            "search_backup": FakeStage("tool", hang_timeout=0.05),
            "recall": FakeStage("memory"),
            "context": FakeStage("mcp"),
            "handler": FakeStage("python"),
            "answer": FakeStage("compute"),
        }
    )
    edge_list: tuple[tuple[str, str], ...] = (
        ("plan", "search"),
        ("plan", "search_backup"),
        ("search", "recall"),
        ("search_backup", "recall"),
        ("recall", "context"),
        ("context", "handler"),
        ("handler", "answer"),
    )
    leader_id: str | None = "orchestrator-0"
    election_count: int = 0
    expired: int = 0
    removed_nodes: set[str] = field(default_factory=set)
    removed_edges: set[tuple[str, str]] = field(default_factory=set)
    route: tuple[str, ...] | None = ("plan", "search", "recall", "context", "handler", "answer")
    rerouting: bool = False
    corruption: dict[str, set[int]] = field(default_factory=lambda: {"recall": set()})  # corrupt entries by stage
    mcp: dict[str, FakeMcp] = field(default_factory=lambda: {"context": FakeMcp()})
    surge: float = 1.0
    calls: list[tuple[Any, ...]] = field(default_factory=list)  # every change asked for, in order

    # What only the injector reads (tests/unit/faults/test_fault_boundary.py drives it): nothing here moves.

    def elapsed(self) -> float:
        return 0.0

    @property
    def ledger(self) -> FakeLedger:
        return FakeLedger()

    @property
    def audit(self) -> FakeAudit:
        return FakeAudit()

    @property
    def memory(self) -> dict[str, FakeStore]:
        return {name: FakeStore() for name in self.corruption}

    @property
    def workers(self) -> list[FakeAgent]:
        return [a for a in self.agents.values() if a.kind == "worker"]

    def kill_agent(self, agent_id: str) -> None:
        self.calls.append(("kill_agent", agent_id))
        self.agents[agent_id].alive = False
        if agent_id == self.leader_id:
            self.leader_id = None

    def pause(self, ids: Collection[str], on: bool) -> None:
        self.calls.append(("pause", tuple(ids), on))
        for i in ids:
            self.agents[i].paused = on

    def partition(self, ids: Collection[str], on: bool) -> None:
        self.calls.append(("partition", tuple(ids), on))
        for i in ids:
            self.agents[i].partitioned = on

    def exhaust(self, ids: Collection[str], on: bool) -> None:
        self.calls.append(("exhaust", tuple(ids), on))
        for i in ids:
            self.agents[i].exhausted = on

    def slow(self, ids: Collection[str], factor: float) -> None:
        self.calls.append(("slow", tuple(ids), factor))
        for i in ids:
            self.agents[i].slow = factor

    def drop_dispatches(self, ids: Collection[str], probability: float) -> None:
        self.calls.append(("drop_dispatches", tuple(ids), probability))
        for i in ids:
            self.agents[i].drop = probability

    def dropped(self, ids: Collection[str]) -> int:
        return sum(self.agents[i].dropped for i in ids)

    def held_tasks(self, ids: Collection[str]) -> int:
        return sum(1 for i in ids if self.agents[i].holding)

    def leader(self) -> str | None:
        return self.leader_id

    def elections(self) -> int:
        return self.election_count

    def lease_expired(self) -> int:
        return self.expired

    def edges(self) -> Sequence[tuple[str, str]]:
        return self.edge_list

    def remove_node(self, name: str, removed: bool) -> None:
        self.calls.append(("remove_node", name, removed))
        (self.removed_nodes.add if removed else self.removed_nodes.discard)(name)
        self.rerouting = True

    def remove_edge(self, a: str, b: str, removed: bool) -> None:
        self.calls.append(("remove_edge", a, b, removed))
        (self.removed_edges.add if removed else self.removed_edges.discard)((a, b))
        self.rerouting = True

    def settled_route(self) -> tuple[str, ...] | None:
        return None if self.rerouting else self.route

    def reroute(self, route: tuple[str, ...] | None) -> None:
        """The test plays the leader's next heartbeat."""
        self.route, self.rerouting = route, False

    def hang(self, name: str, on: bool, timeout: float) -> None:
        self.calls.append(("hang", name, on, timeout))
        self.stages[name].hang, self.stages[name].hang_timeout = on, timeout

    def llm_down(self, name: str, on: bool) -> None:
        self.calls.append(("llm_down", name, on))
        self.stages[name].llm_down = on

    def jitter(self, name: str, seconds: float) -> None:
        self.calls.append(("jitter", name, seconds))
        self.stages[name].jitter = seconds

    def corrupt_memory(self, name: str, entries: int) -> list[int]:
        self.calls.append(("corrupt_memory", name, entries))
        sound = [i for i in range(100) if i not in self.corruption[name]]
        picked = sound[:entries]
        self.corruption[name].update(picked)
        return picked

    def corrupted(self, name: str) -> AbstractSet[int]:
        return self.corruption[name]

    def mcp_drop(self, name: str, outage: float) -> None:
        self.calls.append(("mcp_drop", name, outage))
        self.mcp[name] = FakeMcp(connected=False, server_up=False, outage=outage)

    def mcp_restore(self, name: str) -> None:
        self.calls.append(("mcp_restore", name))
        self.mcp[name].server_up = True

    def mcp_connected(self, name: str) -> bool:
        return self.mcp[name].connected

    def spike_load(self, factor: float, on: bool) -> None:
        self.calls.append(("spike_load", factor, on))
        self.surge = self.surge * factor if on else self.surge / factor


# Checked by mypy: the fake has every method and property of the protocol, with the same signatures.
_A_RUNTIME: Runtime = FakeRuntime()


def _fake() -> FakeRuntime:
    return FakeRuntime()


def _gates(rt: FakeRuntime) -> dict[str, tuple[bool, bool, bool]]:
    return {i: (a.paused, a.partitioned, a.exhausted) for i, a in rt.agents.items()}


RNG = random.Random(7)


# --- leadership and agents -------------------------------------------------------------------------


def test_kill_leader_kills_the_leader_the_runtime_names_and_heals_on_a_new_election() -> None:
    rt = _fake()
    rt.leader_id = "orchestrator-1"
    spec = CATALOGUE["kill_leader"]
    targets = spec.resolve(rt, "leader", RNG)
    assert targets == ("orchestrator-1",)
    memo = spec.apply(rt, targets, {})
    assert rt.calls == [("kill_agent", "orchestrator-1")]
    assert memo == {"elections": 0}
    assert not spec.healed(rt, targets, memo)
    rt.leader_id = "orchestrator-2"  # a leader, but no election won since: not healed yet
    assert not spec.healed(rt, targets, memo)
    rt.election_count = 1
    assert spec.healed(rt, targets, memo) and spec.restored(rt, targets, memo)
    rt.leader_id = None
    assert not spec.healed(rt, targets, memo)


def test_kill_leader_without_a_leader_is_a_conflict() -> None:
    rt = _fake()
    rt.leader_id = None
    with pytest.raises(FaultError) as caught:
        CATALOGUE["kill_leader"].resolve(rt, "leader", RNG)
    assert status_of(caught.value) == 409 and "no leader" in caught.value.message
    with pytest.raises(FaultError) as caught:
        CATALOGUE["kill_leader"].resolve(rt, "worker-0", RNG)
    assert status_of(caught.value) == 422 and "'worker-0'" in caught.value.message
    assert rt.calls == []


def test_kill_orchestrator_heals_when_its_targets_live_again_under_a_leader() -> None:
    rt = _fake()
    spec = CATALOGUE["kill_orchestrator"]
    targets = spec.resolve(rt, "orchestrator-2", RNG)
    memo = spec.apply(rt, targets, {})
    assert rt.calls == [("kill_agent", "orchestrator-2")] and rt.leader_id == "orchestrator-0"
    assert not spec.healed(rt, targets, memo)
    rt.agents["orchestrator-2"].alive = True
    assert spec.healed(rt, targets, memo)
    rt.leader_id = None
    assert not spec.healed(rt, targets, memo)


def test_kill_agent_kills_only_live_targets_and_heals_once_they_serve_again() -> None:
    rt = _fake()
    rt.agents["worker-1"].served = 40
    rt.agents["worker-2"].alive = False  # already dead: not killed twice
    spec = CATALOGUE["kill_agent"]
    targets = ("worker-1", "worker-2")
    memo = spec.apply(rt, targets, {})
    assert rt.calls == [("kill_agent", "worker-1")]
    assert memo == {"served": {"worker-1": 40, "worker-2": 0}}
    for agent in ("worker-1", "worker-2"):
        rt.agents[agent].alive = True
    assert not spec.healed(rt, targets, memo)  # alive, but has done nothing since
    rt.agents["worker-1"].served = 41
    assert not spec.healed(rt, targets, memo)
    rt.agents["worker-2"].served = 1
    assert spec.healed(rt, targets, memo) and spec.restored(rt, targets, memo)


@pytest.mark.parametrize(("action", "flag"), [("pause_agent", 0), ("network_partition", 1), ("pool_exhaustion", 2)])
def test_gate_faults_flip_exactly_their_targets_and_revert(action: str, flag: int) -> None:
    rt = _fake()
    spec = CATALOGUE[action]
    start = _gates(rt)
    targets = ("worker-1", "worker-3")
    memo = spec.apply(rt, targets, {})
    during = _gates(rt)
    changed = {i for i in during if during[i] != start[i]}
    assert changed == set(targets)
    assert all(during[i][flag] and sum(during[i]) == 1 for i in targets)
    spec.revert(rt, targets, {}, memo)
    assert _gates(rt) == start
    assert [c[1:] for c in rt.calls] == [(targets, True), (targets, False)]


def test_a_pause_is_lifted_by_a_resume_and_a_resume_needs_a_paused_agent() -> None:
    rt = _fake()
    pause, resume = CATALOGUE["pause_agent"], CATALOGUE["resume_agent"]
    memo = pause.apply(rt, ("worker-0",), {})
    assert not pause.lifted(rt, ("worker-0",), memo)
    assert resume.conflict(rt, ("worker-0",), set()) is None
    assert resume.conflict(rt, ("worker-0", "worker-2"), set()) == "worker-2 is not paused"
    resume.apply(rt, ("worker-0",), {})
    assert rt.agents["worker-0"].paused is False
    assert pause.lifted(rt, ("worker-0",), memo) and resume.healed(rt, ("worker-0",), {})


def test_network_partition_heals_once_the_leases_of_the_held_tasks_expire() -> None:
    rt = _fake()
    rt.agents["worker-1"].holding = rt.agents["worker-2"].holding = True
    rt.expired = 5
    spec = CATALOGUE["network_partition"]
    targets = ("worker-1", "worker-2", "worker-3")
    assert spec.heals(rt, targets) is True
    assert spec.heals(rt, ("worker-1", "producer-0")) is False  # nothing reconnects a producer
    memo = spec.apply(rt, targets, {})
    assert memo == {"held": 2, "expired": 5}
    rt.expired = 6
    assert not spec.healed(rt, targets, memo)
    rt.expired = 7
    assert spec.healed(rt, targets, memo)


def test_slow_agent_sets_the_factor_and_reverts_it_to_one() -> None:
    rt = _fake()
    spec = CATALOGUE["slow_agent"]
    params = spec.check_params({"factor": "8"})
    memo = spec.apply(rt, ("worker-2", "producer-1"), params)
    assert {i: a.slow for i, a in rt.agents.items() if a.slow != 1.0} == {"worker-2": 8.0, "producer-1": 8.0}
    spec.revert(rt, ("worker-2", "producer-1"), params, memo)
    assert all(a.slow == 1.0 for a in rt.agents.values())
    assert rt.calls == [("slow", ("worker-2", "producer-1"), 8.0), ("slow", ("worker-2", "producer-1"), 1.0)]


def test_drop_messages_targets_every_live_worker_and_heals_as_leases_bring_the_drops_back() -> None:
    rt = _fake()
    rt.agents["worker-3"].alive = False
    rt.agents["worker-0"].dropped = 4  # lost before the fault: not counted
    spec = CATALOGUE["drop_messages"]
    targets = spec.resolve(rt, spec.default_target, RNG)
    assert targets == ("worker-0", "worker-1", "worker-2")
    params = spec.check_params({"probability": 0.5})
    memo = spec.apply(rt, targets, params)
    assert memo == {"expired": 0, "dropped": 4}
    assert {i: a.drop for i, a in rt.agents.items() if a.drop} == dict.fromkeys(targets, 0.5)
    assert not spec.healed(rt, targets, memo)  # nothing lost yet: redelivery is not shown to work
    assert spec.restored(rt, targets, memo)
    rt.agents["worker-1"].dropped = 3
    rt.expired = 2
    assert not spec.healed(rt, targets, memo) and not spec.restored(rt, targets, memo)
    rt.expired = 3
    assert spec.healed(rt, targets, memo) and spec.restored(rt, targets, memo)
    spec.revert(rt, targets, params, memo)
    assert all(a.drop == 0.0 for a in rt.agents.values())


def test_load_spikes_stack_and_unstack_exactly() -> None:
    rt = _fake()
    spec = CATALOGUE["load_spike"]
    targets = spec.resolve(rt, "pipeline", RNG)
    first, second = spec.check_params({"factor": 3}), spec.check_params({"factor": 7})
    m1, m2 = spec.apply(rt, targets, first), spec.apply(rt, targets, second)
    assert rt.surge == 21.0
    spec.revert(rt, targets, first, m1)
    assert rt.surge == 7.0
    spec.revert(rt, targets, second, m2)
    assert rt.surge == 1.0
    assert [c[1:] for c in rt.calls] == [(3.0, True), (7.0, True), (3.0, False), (7.0, False)]


# --- the DAG and its stages ------------------------------------------------------------------------


def test_remove_node_heals_when_the_settled_route_goes_around_it() -> None:
    rt = _fake()
    spec = CATALOGUE["remove_node"]
    targets = spec.resolve(rt, "search", RNG)
    memo = spec.apply(rt, targets, {})
    assert rt.removed_nodes == {"search"} and rt.calls == [("remove_node", "search", True)]
    assert not spec.healed(rt, targets, memo)  # the leader has not rerouted yet
    rt.reroute(("plan", "search", "recall"))
    assert not spec.healed(rt, targets, memo)  # still through the removed stage
    rt.reroute(("plan", "search_backup", "recall"))
    assert spec.healed(rt, targets, memo)
    spec.revert(rt, targets, {}, memo)
    assert rt.removed_nodes == set() and rt.calls[-1] == ("remove_node", "search", False)
    assert not spec.restored(rt, targets, memo)  # back in the DAG, but not rerouted yet
    rt.reroute(None)
    assert not spec.restored(rt, targets, memo)  # no path at all
    rt.reroute(("plan", "search", "recall"))
    assert spec.restored(rt, targets, memo)


def test_a_stage_kind_targets_all_its_stages() -> None:
    rt = _fake()
    spec = CATALOGUE["remove_node"]
    targets = spec.resolve(rt, "tool", RNG)
    assert targets == ("search", "search_backup")
    spec.apply(rt, targets, {})
    assert rt.removed_nodes == {"search", "search_backup"}


def test_remove_edge_resolves_known_edges_and_heals_when_the_route_avoids_them() -> None:
    rt = _fake()
    spec = CATALOGUE["remove_edge"]
    with pytest.raises(FaultError) as caught:
        spec.resolve(rt, "search->plan", RNG)
    assert caught.value.field == "target" and "'search->plan'" in caught.value.message
    assert "plan->search, plan->search_backup" in caught.value.message
    targets = spec.resolve(rt, " plan -> search ", RNG)
    assert targets == ("plan->search",)
    assert spec.resolve(rt, "random", RNG)[0] in {f"{a}->{b}" for a, b in rt.edge_list}
    memo = spec.apply(rt, targets, {})
    assert rt.removed_edges == {("plan", "search")}
    assert not spec.healed(rt, targets, memo)
    rt.reroute(("plan", "search", "recall"))
    assert not spec.healed(rt, targets, memo)
    rt.reroute(("plan", "search_backup", "recall"))
    assert spec.healed(rt, targets, memo)
    spec.revert(rt, targets, {}, memo)
    assert rt.removed_edges == set() and rt.calls[-1] == ("remove_edge", "plan", "search", False)


def test_tool_timeout_hangs_with_a_timeout_and_restores_the_stages_own() -> None:
    rt = _fake()
    spec = CATALOGUE["tool_timeout"]
    with pytest.raises(FaultError) as caught:
        spec.resolve(rt, "plan", RNG)
    assert caught.value.message == "plan is a llm stage; needs tool/python"
    own = spec.check_params({})
    memo = spec.apply(rt, ("search",), own)
    assert rt.calls[-1] == ("hang", "search", True, 0.05)  # 0: the stage's own timeout
    spec.revert(rt, ("search",), own, memo)
    longer = spec.check_params({"timeout": "2s"})
    rt.stages["search"].degraded = 3
    memo = spec.apply(rt, ("search",), longer)
    assert (rt.stages["search"].hang, rt.stages["search"].hang_timeout) == (True, 2.0)
    assert memo == {"search": (0.05, 3)}
    assert not spec.healed(rt, ("search",), memo)
    rt.stages["search"].successes = 1
    assert spec.healed(rt, ("search",), memo)
    spec.revert(rt, ("search",), longer, memo)
    assert (rt.stages["search"].hang, rt.stages["search"].hang_timeout) == (False, 0.05)


def test_llm_failure_heals_on_fallback_calls_and_a_python_stage_has_none() -> None:
    rt = _fake()
    spec = CATALOGUE["llm_failure"]
    targets = spec.resolve(rt, "llm", RNG)
    assert targets == ("plan",)
    assert spec.heals(rt, targets) is True and spec.heals(rt, ("handler",)) is False
    memo = spec.apply(rt, targets, {})
    assert rt.stages["plan"].llm_down is True and rt.stages["handler"].llm_down is False
    assert not spec.healed(rt, targets, memo)
    rt.stages["plan"].fallback_served = 1
    assert spec.healed(rt, targets, memo)
    spec.revert(rt, targets, {}, memo)
    assert rt.stages["plan"].llm_down is False
    assert rt.calls == [("llm_down", "plan", True), ("llm_down", "plan", False)]


def test_memory_corrupt_heals_once_its_entries_are_repaired() -> None:
    rt = _fake()
    rt.corruption["recall"].add(0)  # corrupt already: not picked again
    spec = CATALOGUE["memory_corrupt"]
    params = spec.check_params({"entries": 3})
    memo = spec.apply(rt, ("recall",), params)
    assert memo == {"recall": [1, 2, 3]}
    assert rt.calls == [("corrupt_memory", "recall", 3)]
    rt.corruption["recall"] -= {1, 2}
    assert not spec.healed(rt, ("recall",), memo)
    rt.corruption["recall"].discard(3)
    assert rt.corruption["recall"] == {0}  # the older corruption is not this fault's
    assert spec.healed(rt, ("recall",), memo) and spec.restored(rt, ("recall",), memo)


def test_mcp_disconnect_drops_for_the_outage_restores_on_revert_and_heals_on_reconnect() -> None:
    rt = _fake()
    spec = CATALOGUE["mcp_disconnect"]
    params = spec.check_params({"outage": "500ms"})
    targets = spec.resolve(rt, spec.default_target, RNG)
    assert targets == ("context",)
    memo = spec.apply(rt, targets, params)
    assert rt.mcp["context"] == FakeMcp(connected=False, server_up=False, outage=0.5)
    assert not spec.healed(rt, targets, memo)
    spec.revert(rt, targets, params, memo)
    assert rt.mcp["context"].server_up is True
    assert not spec.restored(rt, targets, memo)  # the server is back; the client has not reconnected
    rt.mcp["context"].connected = True
    assert spec.healed(rt, targets, memo)


def test_latency_jitter_reaches_every_stage_by_default_and_reverts_to_zero() -> None:
    rt = _fake()
    spec = CATALOGUE["latency_jitter"]
    targets = spec.resolve(rt, spec.default_target, RNG)
    assert set(targets) == set(rt.stages)
    params = spec.check_params({"jitter": "20ms"})
    memo = spec.apply(rt, targets, params)
    assert {s.jitter for s in rt.stages.values()} == {0.02}
    spec.revert(rt, targets, params, memo)
    assert {s.jitter for s in rt.stages.values()} == {0.0}


# --- target resolution -----------------------------------------------------------------------------


def test_an_unknown_agent_target_names_the_choices() -> None:
    with pytest.raises(FaultError) as caught:
        CATALOGUE["pause_agent"].resolve(_fake(), "worker-99", RNG)
    message = caught.value.message
    assert status_of(caught.value) == 422 and message.startswith("unknown target 'worker-99'")
    assert "producer-0" in message and "worker-3" in message and "orchestrator-0" not in message


def test_an_agent_of_the_wrong_kind_is_refused() -> None:
    with pytest.raises(FaultError) as caught:
        CATALOGUE["kill_agent"].resolve(_fake(), "orchestrator-1", RNG)
    assert caught.value.message == "orchestrator-1 is a orchestrator; this action takes a worker or producer"


@pytest.mark.parametrize("target", ["0%", "150%", "lots%"])
def test_a_bad_percentage_is_refused(target: str) -> None:
    with pytest.raises(FaultError) as caught:
        CATALOGUE["pause_agent"].resolve(_fake(), target, RNG)
    assert status_of(caught.value) == 422 and target in caught.value.message


def test_a_percentage_picks_that_share_of_the_live_default_kind() -> None:
    rt = _fake()
    rt.agents["worker-0"].alive = False
    targets = CATALOGUE["pool_exhaustion"].resolve(rt, "50%", random.Random(1))
    assert len(targets) == 2 and set(targets) <= {"worker-1", "worker-2", "worker-3"}


@pytest.mark.parametrize(
    ("workers", "target", "taken"), [(100, "14%", 14), (100, "0.5%", 1), (3, "34%", 2), (10, "29%", 3)]
)
def test_a_percentage_takes_the_exact_share_rounded_up(workers: int, target: str, taken: int) -> None:
    """⌈p·n/100⌉ of the n live agents, computed from the percentage as written: 14 % of 100 is 14 (in binary
    floating point 0.14 × 100 is 14.000000000000002, whose ceiling took 15), never more than asked but at least one."""
    rt = _fake()
    for agent in [a for a in rt.agents.values() if a.kind == "worker"]:
        del rt.agents[agent.id]
    rt.agents.update({f"worker-{i}": FakeAgent(f"worker-{i}", "worker") for i in range(workers)})
    assert len(CATALOGUE["pause_agent"].resolve(rt, target, random.Random(1))) == taken


def test_no_live_agent_of_the_kind_is_a_conflict() -> None:
    rt = _fake()
    for i in range(4):
        rt.agents[f"worker-{i}"].alive = False
    with pytest.raises(FaultError) as caught:
        CATALOGUE["pause_agent"].resolve(rt, "worker", RNG)
    assert (status_of(caught.value), caught.value.message) == (409, "no live worker agent to target")
    with pytest.raises(FaultError) as caught:
        CATALOGUE["pool_exhaustion"].resolve(rt, "75%", RNG)
    assert (status_of(caught.value), caught.value.message) == (409, "no live worker to target")
    assert CATALOGUE["pause_agent"].resolve(rt, "random", RNG)[0].startswith("producer-")


def test_a_stage_kind_absent_from_the_dag_is_a_conflict() -> None:
    rt = _fake()
    del rt.stages["context"]
    with pytest.raises(FaultError) as caught:
        CATALOGUE["mcp_disconnect"].resolve(rt, "mcp", RNG)
    assert (status_of(caught.value), caught.value.message) == (409, "no mcp stage in the DAG")
    with pytest.raises(FaultError) as caught:
        CATALOGUE["mcp_disconnect"].resolve(rt, "nowhere", RNG)
    assert status_of(caught.value) == 422 and "unknown stage 'nowhere'" in caught.value.message


# --- the real pipeline -----------------------------------------------------------------------------


def _state(p: Pipeline) -> dict[str, Any]:
    """Everything a fault can change in a pipeline, gates included (a flag set without its refresh shows)."""
    return {
        "agents": {
            a.id: (a.alive, a.paused, a.exhausted, a.partitioned, a.slow, a.gate.is_set(), a.gate_open)
            for a in p.agents.values()
        },
        "stages": {n: (s.removed, s.hang, s.hang_timeout, s.llm_down, s.jitter, s.simple) for n, s in p.stages.items()},
        "dag": (sorted(p.dag.removed_nodes), sorted(p.dag.removed_edges), p.dag_dirty, p.route_names),
        "memory": {n: sorted(m.corrupted) for n, m in p.memory.items()},
        "mcp": {n: (c.connected, c.server_up) for n, c in p.mcp.items()},
        "drop": [w.drop_probability for w in p.workers],
        "surge": p.surge.factor,
        "led": p.dispatcher.leader_id is not None,
    }


def _consistent(p: Pipeline) -> bool:
    """Every gate and inline-serving flag agrees with the fault flags (what the refreshes are for)."""
    gates = all(
        a.gate.is_set() == a.gate_open == (a.alive and not (a.paused or a.exhausted or a.partitioned))
        for a in p.agents.values()
    )
    stages = all(not s.simple for s in p.stages.values() if s.removed or s.hang or s.llm_down or s.jitter)
    return gates and stages


def test_every_action_applies_to_a_real_pipeline_and_it_returns_to_its_start() -> None:
    """The pipeline is a Runtime in practice: each action changes it, and after the revert (and, for
    what the runtime heals itself, its healing) it is back where it started."""
    loop = new_event_loop(virtual=True)
    seen: dict[str, tuple[bool, bool, bool, bool]] = {}

    async def plan(exp: Experiment) -> None:
        p, clock, rng = exp.pipeline, exp.clock, random.Random(3)
        await clock.sleep_until(p.t0 + 5.0)
        for name, spec in sorted(CATALOGUE.items()):
            if name.startswith(
                "dependency_"
            ):  # a python stage's: virtual time has none (tests/system/test_dependencies.py)
                with pytest.raises(FaultError) as refused:
                    spec.resolve(p, spec.default_target, rng)
                assert status_of(refused.value) == 409 and "dependencies" in refused.value.message
                continue
            start = before = _state(p)
            target = "leader" if name == "kill_leader" else spec.default_target
            if name == "resume_agent":  # needs a paused agent to resume
                CATALOGUE["pause_agent"].apply(p, ("worker-0",), {})
                before, target = _state(p), "worker-0"
            targets = spec.resolve(p, target, rng)
            params = spec.check_params({})
            memo = spec.apply(p, targets, params)
            changed = _state(p) != before and _consistent(p)
            at_once = spec.healed(p, targets, memo)  # nothing heals in no time (a resume is its own healing)
            spec.revert(p, targets, params, memo)
            waited_from = clock.now()
            while not (_state(p) == start and spec.restored(p, targets, memo)) and clock.now() - waited_from < 20.0:
                await clock.sleep(0.05)
            seen[name] = (changed, at_once, _state(p) == start, spec.restored(p, targets, memo))
        exp.stop.set()

    async def main() -> None:
        exp = Experiment(settings({}), LoopClock(loop), warmup=0.0)
        await exp.run(None, plan=plan)

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    assert sorted(seen) == sorted(n for n in CATALOGUE if not n.startswith("dependency_"))
    assert {n for n, (changed, _, _, _) in seen.items() if not changed} == set()
    # A partition of workers that held no task has nothing to wait for: healed at once, or not, by chance.
    assert {n for n, (_, at_once, _, _) in seen.items() if at_once} - {"network_partition"} == {"resume_agent"}
    assert {n for n, (_, _, back, _) in seen.items() if not back} == set()
    assert {n for n, (_, _, _, restored) in seen.items() if not restored} == set()
