"""What every fault action is: its parameters, its targets and how they resolve, what it changes and how it
says it has healed; and the memo helpers the actions share.

An action resolves its target (an id, a kind, ``random`` or a percentage of its default kind), applies itself
through the part of the :class:`~chaosd.faults.runtime.Runtime` interface it acts on (never the pipeline's
internals), and can say when the runtime's own mechanism has healed the damage. Actions whose damage nothing heals
but their end (a pause, a partition, jitter) report the mechanism as recovered when they are reverted.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from chaosd.config.problems import closest
from chaosd.core.durations import parse_duration
from chaosd.core.errors import Conflict, FaultError
from chaosd.faults.record import Memo, MemoValue
from chaosd.faults.runtime import Agents, AgentState, Runtime
from chaosd.views import ActionView


# What an action noted when applied, read back in its recovery checks: each reads what its own apply wrote.
def noted(key: str, what: str, value: MemoValue) -> TypeError:
    return TypeError(f"memo[{key!r}] is not {what}: {value!r}")


def count_of(memo: Memo, key: str) -> int:
    value = memo[key]
    if isinstance(value, int):
        return value
    raise noted(key, "a count", value)


def counts_of(memo: Memo, key: str) -> dict[str, int]:
    value = memo[key]
    if isinstance(value, dict):
        return value
    raise noted(key, "counts by name", value)


def hung_of(memo: Memo, stage: str) -> tuple[float, int]:
    """A hung tool's timeout before the fault, and its progress (degraded + successes) when it began."""
    value = memo[stage]
    if isinstance(value, tuple):
        return value
    raise noted(stage, "a timeout and a count", value)


def entries_of(memo: Memo, stage: str) -> list[int]:
    value = memo[stage]
    if isinstance(value, list):
        return value
    raise noted(stage, "a list of entries", value)


@dataclass(frozen=True, slots=True)
class Param:
    default: float
    low: float
    high: float
    description: str
    integer: bool = False
    seconds: bool = False  # accepts durations such as "5ms"

    def check(self, name: str, value: object) -> float:
        if self.seconds and isinstance(value, str):
            try:
                value = parse_duration(value)
            except ValueError as exc:
                raise FaultError(f"params.{name}", str(exc)) from None
        elif isinstance(value, str):  # "10" is 10, as a duration "10" is 10 s: numbers as JSON or as text
            try:
                number = float(value.strip())
            except ValueError:
                raise FaultError(f"params.{name}", f"must be a number (got {value[:32]!r})") from None
            if not math.isfinite(number):
                raise FaultError(f"params.{name}", f"must be a finite number (got {value[:32]!r})")
            value = number
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise FaultError(f"params.{name}", f"must be a number (got {value!r})")
        if self.integer and int(value) != value:
            raise FaultError(f"params.{name}", f"must be a whole number (got {value!r})")
        if not self.low <= value <= self.high:
            raise FaultError(f"params.{name}", f"must be between {self.low:g} and {self.high:g} (got {value!r})")
        return float(value)


class Action:
    """Base: agent-targeted. Subclasses override what they change."""

    name = ""
    description = ""
    kinds: tuple[str, ...] = ("worker", "producer")
    default_target = "worker"
    params: Mapping[str, Param] = {}
    heals_itself = False  # a mechanism of the runtime repairs the damage before the fault ends
    # What the fault does to its targets, as the event log says it ("kill_agent → worker-3 killed").
    verb = "hit"
    ares = False  # one of the ARES Arena's own actions; the rest are chaosd's queue and dependency faults
    # For an instantaneous remedy (resume_agent), the action whose damage it undoes: a remedy is not a blow of its
    # own, so it takes no slot under the cap, opens no incident and has no recovery to wait for.
    remedies: str | None = None
    heal_timer: str | None = None  # the setting whose timer paces the mechanism that heals it, as the summary names it

    def survival_target(self, rt: Runtime, rng: random.Random) -> str | None:
        """The target survival mode gives this action now, or None when nothing it could act on is there: its
        default target (a random one where that is the workers)."""
        return self.default_target if self.default_target != "worker" else "random"

    def check_params(self, given: Mapping[str, object]) -> dict[str, float]:
        unknown = sorted(set(given) - set(self.params))
        if unknown:
            valid = ", ".join(sorted(self.params)) or "none"
            near = closest(unknown[0], self.params)
            hint = f"; did you mean {near!r}?" if near is not None else ""
            raise FaultError(f"params.{unknown[0]}", f"unknown parameter for {self.name}{hint} (valid: {valid})")
        return {name: p.check(name, given.get(name, p.default)) for name, p in self.params.items()}

    def resolve(self, rt: Runtime, target: str, rng: random.Random) -> tuple[str, ...]:
        return resolve_agents(rt, target, self.kinds, self.kinds[0], rng)

    def conflict(self, rt: Runtime, targets: tuple[str, ...], busy: set[tuple[str, str]]) -> str | None:
        """Why these targets cannot take this fault now (None if they can)."""
        for t in targets:
            if (self.group, t) in busy:
                return f"{t} already has an active {self.group} fault"
        return None

    @property
    def group(self) -> str:
        return self.name

    def apply(self, rt: Runtime, targets: tuple[str, ...], params: dict[str, float]) -> Memo:
        raise NotImplementedError

    def revert(self, rt: Runtime, targets: tuple[str, ...], params: dict[str, float], memo: Memo) -> None:
        """Undo what apply changed (idempotent)."""

    def heals(self, rt: Runtime, targets: tuple[str, ...]) -> bool:
        """Whether a mechanism of the runtime heals this fault on these targets (its clock: heal or restore)."""
        return self.heals_itself

    def healed(self, rt: Runtime, targets: tuple[str, ...], memo: Memo) -> bool:
        """The runtime's own mechanism has repaired the damage (for actions that heal themselves)."""
        return False

    def lifted(self, rt: Runtime, targets: tuple[str, ...], memo: Memo) -> bool:
        """For a fault nothing heals: has something ended it before its TTL (a resume ends a pause)?"""
        return False

    def restored(self, rt: Runtime, targets: tuple[str, ...], memo: Memo) -> bool:
        """After the fault ended: is the damage gone? (A kill is not undone by its end; a pause is.)"""
        return True

    def describe(self) -> ActionView:
        return {
            "action": self.name,
            "description": self.description,
            "targets": list(self.kinds),
            "default_target": self.default_target,
            "params": {
                n: {"default": p.default, "min": p.low, "max": p.high, "description": p.description}
                for n, p in self.params.items()
            },
        }


def resolve_agents(
    rt: Agents, target: str, kinds: tuple[str, ...], default_kind: str, rng: random.Random
) -> tuple[str, ...]:
    everyone = rt.agents
    agents = [a for a in everyone.values() if a.kind in kinds]
    live = [a for a in agents if a.alive]
    if target in everyone:
        agent = everyone[target]
        if agent.kind not in kinds:
            raise FaultError("target", f"{target} is a {agent.kind}; this action takes a {' or '.join(kinds)}")
        return (target,)
    if target.endswith("%"):
        try:
            percent = Decimal(target[:-1])
        except InvalidOperation:
            raise FaultError("target", f"not a percentage: {target!r}") from None
        if not percent.is_finite() or not 0 < percent <= 100:
            raise FaultError("target", f"a percentage must be in (0, 100] (got {target!r})")
        pool = sorted((a for a in live if a.kind == default_kind), key=lambda a: a.id)
        if not pool:
            raise Conflict("target", f"no live {default_kind} to target")
        # The share taken exactly as written (in binary floating point 14 % of 100 is 14.000000000000002, and its
        # ceiling 15), rounded up so a small share of a few agents still takes one.
        count = max(1, math.ceil(percent * len(pool) / 100))
        return tuple(sorted(a.id for a in rng.sample(pool, count)))
    if target in kinds or target in ("random", "agent"):
        pool = sorted((a for a in live if target in ("random", "agent") or a.kind == target), key=lambda a: a.id)
        if not pool:
            raise Conflict("target", f"no live {target} agent to target")
        return (rng.choice(pool).id,)
    known = ", ".join(sorted(a.id for a in agents)[:12])
    raise FaultError(
        "target",
        f"unknown target {target!r} (an id such as {known}; a kind: {', '.join(kinds)}; random; or a percentage)",
    )


def agent_states(rt: Agents, targets: tuple[str, ...]) -> list[AgentState]:
    agents = rt.agents
    return [agents[t] for t in targets]


# --- leadership and agents ---------------------------------------------------------------------
