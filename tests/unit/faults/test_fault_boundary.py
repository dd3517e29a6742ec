"""The faults see the runtime only through its protocol: the injector runs on a plain fake, and imports no engine.

The fake below has the protocol's members and nothing else, so an injector that reached past the protocol
(into a ledger's other books, a worker's internals) would fail here with an AttributeError.
"""

from __future__ import annotations

import ast
import random
from collections.abc import Collection, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from chaosd.config.settings import FaultsConfig, RecoveryConfig, SloConfig
from chaosd.core.errors import FaultError
from chaosd.events.log import EventLog
from chaosd.faults import Injector
from chaosd.faults.runtime import Runtime

FAULTS = Path(__file__).resolve().parents[3] / "chaosd" / "faults"

# --- the fake ------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Agent:
    id: str
    kind: str
    alive: bool = True
    paused: bool = False
    served: int = 0


@dataclass(slots=True)
class _Stage:
    kind: str = "compute"
    hang_timeout: float = 0.1
    degraded: int = 0
    successes: int = 0
    fallback_served: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    handler_errors: dict[str, int] = field(default_factory=dict)
    dependencies: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class _Counts:
    late: int = 0
    failed: int = 0
    rejected: int = 0
    degraded: int = 0


@dataclass(slots=True)
class _Ledger:
    total: _Counts = field(default_factory=_Counts)


@dataclass(slots=True)
class _Duplicates:
    count: int = 0


@dataclass(slots=True)
class _Audit:
    total: _Duplicates = field(default_factory=_Duplicates)


@dataclass(slots=True)
class _Store:
    undetected_reads: int = 0


@dataclass(slots=True)
class FakeRuntime:
    """One orchestrator, two workers, a producer, one compute stage and one memory store; time set by the test."""

    agents: dict[str, _Agent] = field(
        default_factory=lambda: {
            a.id: a
            for a in (
                _Agent("orchestrator-0", "orchestrator"),
                _Agent("worker-0", "worker"),
                _Agent("worker-1", "worker"),
                _Agent("producer-0", "producer"),
            )
        }
    )
    stages: dict[str, _Stage] = field(default_factory=lambda: {"answer": _Stage()})
    ledger: _Ledger = field(default_factory=_Ledger)
    audit: _Audit = field(default_factory=_Audit)
    memory: dict[str, _Store] = field(default_factory=lambda: {"recall": _Store()})
    _now: float = 0.0

    @property
    def workers(self) -> Collection[object]:
        return [a for a in self.agents.values() if a.kind == "worker"]

    def elapsed(self) -> float:
        return self._now

    def kill_agent(self, agent_id: str) -> None:
        self.agents[agent_id].alive = False

    def pause(self, ids: Collection[str], on: bool) -> None:
        for i in ids:
            self.agents[i].paused = on

    def partition(self, ids: Collection[str], on: bool) -> None:
        pass

    def exhaust(self, ids: Collection[str], on: bool) -> None:
        pass

    def slow(self, ids: Collection[str], factor: float) -> None:
        pass

    def drop_dispatches(self, ids: Collection[str], probability: float) -> None:
        pass

    def dropped(self, ids: Collection[str]) -> int:
        return 0

    def held_tasks(self, ids: Collection[str]) -> int:
        return 0

    def leader(self) -> str | None:
        return "orchestrator-0"

    def elections(self) -> int:
        return 0

    def lease_expired(self) -> int:
        return 0

    def edges(self) -> Sequence[tuple[str, str]]:
        return ()

    def remove_node(self, name: str, removed: bool) -> None:
        pass

    def remove_edge(self, a: str, b: str, removed: bool) -> None:
        pass

    def settled_route(self) -> tuple[str, ...] | None:
        return ("answer",)

    def hang(self, name: str, on: bool, timeout: float) -> None:
        pass

    def llm_down(self, name: str, on: bool) -> None:
        pass

    def jitter(self, name: str, seconds: float) -> None:
        pass

    def corrupt_memory(self, name: str, entries: int) -> list[int]:
        return []

    def corrupted(self, name: str) -> AbstractSet[int]:
        return frozenset()

    def mcp_drop(self, name: str, outage: float) -> None:
        pass

    def mcp_restore(self, name: str) -> None:
        pass

    def mcp_connected(self, name: str) -> bool:
        return True

    def dependency_fault(self, stage: str, dependency: str, action: str, fields: Mapping[str, float] | None) -> None:
        pass

    def spike_load(self, factor: float, on: bool) -> None:
        pass


# Checked by mypy when run on this file: the fake is a Runtime.
_A_RUNTIME: Runtime = FakeRuntime()


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A telemetry tick as the injector reads it (its ServiceView)."""

    t: float
    goodput: float = 100.0
    error_rate: float = 0.0
    sojourn_p95: float = 0.1
    queue_depth: int = 2
    throughput: float = 100.0
    arrival_rate: float = 100.0
    lateness: float = 0.0
    cpu_wait: float = 0.0
    mean_service: float = 0.001
    admitted_rate: float = 100.0
    capacity_rate: float = 1000.0  # one able worker at mean_service


def _public(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")}


def _injector(rt: FakeRuntime, **recovery: float) -> Injector:
    injector = Injector(
        FaultsConfig(), RecoveryConfig(confirm=2.0, **recovery), SloConfig(), rt, random.Random(1), EventLog(), 1.0
    )
    injector.dated = False  # the fake's figures are instantaneous: no trailing window to date a recovery back by
    return injector


def _tick(injector: Injector, rt: FakeRuntime, t: float, goodput: float = 100.0) -> None:
    rt._now = t
    injector.on_tick(Snapshot(t, goodput=goodput))


# --- the injector on the fake ---------------------------------------------------------------------


def test_the_fake_has_the_protocols_members_and_nothing_else() -> None:
    assert _public(FakeRuntime) == _public(Runtime)


def test_a_fault_runs_from_injection_to_its_verdict_on_the_protocol_alone() -> None:
    """Pause a worker, feel it, revert it, see the service come back: every step reads only the protocol."""
    rt = FakeRuntime()
    injector = _injector(rt)
    for t in range(10):  # a steady state long enough for a baseline
        _tick(injector, rt, float(t))
    assert injector.baseline() is not None

    record = injector.inject("pause_agent", "worker-0", ttl=30.0, labels={"team": "core"})
    assert rt.agents["worker-0"].paused and not rt.agents["worker-1"].paused
    assert (record.outcome, record.clock, record.injected_at) == ("active", "restore", 9.0)

    for felt in (10.0, 11.0):  # users feel it: less goodput, late tasks, an effect twice, a corrupt read
        rt.ledger.total.late += 7
        _tick(injector, rt, felt, goodput=40.0)
    rt.audit.total.count += 1
    rt.memory["recall"].undetected_reads += 2

    rt._now = 11.5
    assert injector.revert(record.id) is record
    assert not rt.agents["worker-0"].paused
    assert (record.outcome, record.reverted_by, record.reverted_at) == ("recovering", "revert", 11.5)
    with pytest.raises(FaultError, match="already ended"):
        injector.revert(record.id)

    for t in range(12, 20):
        _tick(injector, rt, float(t))
    assert record.outcome == "recovered"
    assert record.mechanism_recovered_at == 12.0  # the first tick after the revert found it lifted
    assert record.recovery_s == 0.5  # from the revert to the first tick back within tolerance
    assert record.impact_s == 2.0  # the two ticks out of tolerance while it was active
    assert record.impact_tasks == {
        "late": 14,
        "failed": 0,
        "refused": 0,
        "degraded": 0,
        "duplicated": 1,
        "corrupted": 2,
    }
    assert injector.outcomes == {"recovered": 1, "failed": 0, "unmeasured": 0}
    incident = injector.incidents.get(record.incident)
    assert incident is not None and incident.outcome == "recovered" and not incident.consistent
    view = record.as_dict()
    assert (view["outcome"], view["reverted_by"], view["clock"]) == ("recovered", "revert", "restore")


def test_a_fault_the_service_never_gets_over_fails_after_its_ttl() -> None:
    """The negative control: the TTL lifts the pause, but the service stays down past ``recovery.limit``."""
    rt = FakeRuntime()
    injector = _injector(rt, limit=3.0)
    for t in range(10):
        _tick(injector, rt, float(t))
    record = injector.inject("pause_agent", "worker-1", ttl=2.0)
    for t in range(10, 20):
        _tick(injector, rt, float(t), goodput=10.0)
    assert (record.reverted_by, record.reverted_at) == ("ttl", 11.0)
    assert not rt.agents["worker-1"].paused
    assert record.outcome == "failed" and record.recovery_s is None
    assert injector.outcomes["failed"] == 1


def test_the_lever_reverts_through_the_protocol_and_refuses_new_faults() -> None:
    rt = FakeRuntime()
    injector = _injector(rt)
    record = injector.inject("pause_agent", "worker-0", ttl=30.0)
    assert injector.pull_lever("a drill") == 1
    assert record.reverted_by == "lever" and not rt.agents["worker-0"].paused
    with pytest.raises(FaultError, match="lever is pulled"):
        injector.inject("pause_agent", "worker-0")


# --- the boundary, in the source ------------------------------------------------------------------


def _imports(path: Path) -> set[str]:
    """Every module a file imports, at any depth of it (TYPE_CHECKING blocks and functions included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_the_faults_import_no_pipeline_or_backend_module() -> None:
    sources = sorted(FAULTS.glob("*.py"))
    assert len(sources) >= 6
    engine = {
        f"{path.name}: {name}"
        for path in sources
        for name in _imports(path)
        if name.split(".")[:2] in (["chaosd", "pipeline"], ["chaosd", "backends"])
    }
    assert engine == set()


def test_incidents_and_the_injector_do_not_import_each_other() -> None:
    """Both take the fault record from its own module, which imports no other part of the faults."""
    assert not {m for m in _imports(FAULTS / "incidents.py") if m.startswith("chaosd.faults.injector")}
    assert "chaosd.faults.record.FaultRecord" in _imports(FAULTS / "incidents.py") & _imports(FAULTS / "injector.py")
    assert not {m for m in _imports(FAULTS / "record.py") if m.startswith("chaosd.faults")}
