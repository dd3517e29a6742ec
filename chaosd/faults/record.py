"""A fault's record: what was injected on what, what users felt while it lasted, and its verdict."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import cast

from chaosd.errors import FaultError
from chaosd.views import BaselineView, FaultView
from chaosd.wire import FaultClock, FaultState, RevertCause

__all__ = [
    "IMPACT_KINDS",
    "MAX_LABELS",
    "Baseline",
    "FaultRecord",
    "Memo",
    "MemoValue",
    "TaskImpact",
    "check_labels",
    "impact_between",
    "matches",
]

MAX_LABELS = 16
_LABEL_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,62}")

TaskImpact = dict[str, int]
# What an action notes as it is applied, for its recovery checks (``chaosd.faults.catalogue``): a count by name
# (``elections``, ``held``, ``expired``, ``dropped``), counts per agent (``served``), or per target stage its
# prior hang timeout and progress (a hung tool), its fallback count (a failing model) or the entries corrupted.
MemoValue = int | dict[str, int] | tuple[float, int] | list[int]
Memo = dict[str, MemoValue]

# What users felt, counted in tasks, and effects the audit found wrong (applied twice, or corrupted).
IMPACT_KINDS = ("late", "failed", "refused", "degraded", "duplicated", "corrupted")


def impact_between(start: tuple[int, ...], now: tuple[int, ...]) -> TaskImpact:
    """The tasks of each kind in :data:`IMPACT_KINDS` that ended badly between two tallies."""
    return {kind: b - a for kind, a, b in zip(IMPACT_KINDS, start, now, strict=True)}


@dataclass(frozen=True, slots=True)
class Baseline:
    """The steady state a fault is judged against: means (median p95) over fault-free ticks."""

    goodput: float
    error_rate: float
    sojourn_p95: float
    queue_depth: float
    seconds: float  # how much fault-free time it covers

    def as_dict(self) -> BaselineView:
        return cast(BaselineView, asdict(self))


def check_labels(labels: object, field: str = "labels") -> dict[str, str]:
    """A fault's labels, validated: at most 16; keys like identifiers (``team``, ``exp.id``); short string values."""
    if not isinstance(labels, dict):
        raise FaultError(field, "must be an object of string labels")
    if len(labels) > MAX_LABELS:
        raise FaultError(field, f"at most {MAX_LABELS} labels (got {len(labels)})")
    checked: dict[str, str] = {}
    for key, value in labels.items():
        if not isinstance(key, str) or not _LABEL_KEY.fullmatch(key):
            raise FaultError(f"{field}.{key}", "a label key is a letter or _, then letters, digits, _ . - (63 at most)")
        if not isinstance(value, str) or not 0 < len(value) <= 128 or not value.isprintable():
            raise FaultError(f"{field}.{key}", "a label value is printable text of 1 to 128 characters")
        checked[key] = value
    return checked


def matches(
    record: FaultRecord,
    labels: dict[str, str],
    actions: frozenset[str] = frozenset(),
    states: frozenset[str] = frozenset(),
) -> bool:
    """Whether the fault carries every label given, and is of one of the actions and states given (if any)."""
    return (
        all(record.labels.get(k) == v for k, v in labels.items())
        and (not actions or record.action in actions)
        and (not states or record.outcome in states)
    )


@dataclass(slots=True)
class FaultRecord:
    """One fault, from injection to verdict; the injector updates it as the fault ends and its recovery shows."""

    id: int
    action: str
    target: str
    targets: tuple[str, ...]
    params: dict[str, float]
    ttl: float
    injected_at: float
    baseline: Baseline | None
    memo: Memo = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)  # the injector's caller's: selects its faults
    reverted_at: float | None = None
    reverted_by: RevertCause | None = None  # what ended it (storage may add "aborted" to what it keeps)
    mechanism_recovered_at: float | None = None
    service_recovered_at: float | None = None
    outcome: FaultState = "active"  # active → recovering → recovered | failed | unmeasured
    heals: bool = False  # a mechanism heals it: timed from injection; else from when it is lifted
    lifted_at: float | None = None  # a fault nothing heals, ended before its TTL (a resume ends a pause)
    impact_s: float = 0.0  # seconds out of tolerance while the fault was active
    impact_tasks: TaskImpact = field(default_factory=dict)  # tasks late, failed, refused, degraded while active
    tally_from: tuple[int, ...] = ()  # the task tally at injection
    incident: int = 0  # the incident it belongs to
    owner: object | None = None  # the plan (survival, scenario) that injected it, if one did
    shared: bool = False  # its incident has other faults: the recovery is the incident's, not its own
    stalled_s: float = 0.0  # seconds before its verdict the daemon's process was paused (or its window showed it)
    _streak_from: float | None = None
    _streak_paused: float = 0.0  # of the streak: seconds that could not count towards the hold (a stall's)
    _last_judged_within: bool | None = None  # the newest verdict on a tick the host did not perturb
    _last_judged_at: float = float("-inf")  # and when

    @property
    def active(self) -> bool:
        return self.reverted_at is None

    @property
    def recovery_s(self) -> float | None:
        """The fault's own clock: time to heal (from injection) or time to restore (from being lifted).

        None in a shared incident: the service came back once for all its faults (see the incident).
        """
        if self.outcome != "recovered" or self.service_recovered_at is None or self.shared:
            return None
        return max(0.0, self.service_recovered_at - self.clock_start)

    @property
    def clock(self) -> FaultClock:
        """``heal``: timed from injection (a mechanism heals it); ``restore``: from when it was lifted."""
        return "heal" if self.heals else "restore"

    @property
    def clock_start(self) -> float:
        """Where the fault's clock starts: its injection (heal), or when it was lifted (restore)."""
        if self.heals:
            return self.injected_at
        ends = [t for t in (self.lifted_at, self.reverted_at) if t is not None]
        return min(ends) if ends else self.injected_at

    def as_dict(self) -> FaultView:
        return {
            "id": self.id,
            "action": self.action,
            "target": self.target,
            "targets": list(self.targets),
            "labels": dict(sorted(self.labels.items())),
            "params": dict(sorted(self.params.items())),
            "ttl": self.ttl,
            "injected_at": self.injected_at,
            "reverted_at": self.reverted_at,
            "reverted_by": self.reverted_by,
            "mechanism_recovered_at": self.mechanism_recovered_at,
            "service_recovered_at": self.service_recovered_at,
            "clock": self.clock,
            "recovery_s": self.recovery_s,
            "impact_s": self.impact_s,
            "impact_tasks": dict(self.impact_tasks),
            "stalled_s": self.stalled_s,
            "baseline": self.baseline.as_dict() if self.baseline is not None else None,
            "recovered": self.outcome == "recovered",
            "outcome": self.outcome,
            "incident": self.incident,
        }
