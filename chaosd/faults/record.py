"""A fault's record: what was injected on what, what users felt, its verdict, and where its time went."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import cast

from chaosd.core.errors import FaultError
from chaosd.views import BaselineView, FaultView, PhaseName, PhasesView, PredictionView, ServiceSignal
from chaosd.views.wire import FaultClock, FaultState, RevertCause, Verdict

__all__ = [
    "IMPACT_KINDS",
    "MAX_LABELS",
    "PHASES",
    "Baseline",
    "CameBack",
    "FaultRecord",
    "Memo",
    "MemoValue",
    "Streak",
    "TaskImpact",
    "Trace",
    "check_labels",
    "impact_between",
    "matches",
    "phases",
    "prediction",
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


# --- why a recovery took as long as it did: its phases, and the fluid model's prediction ----------------
# A recovery time is cut at four moments: the first tick out of tolerance (``detected``), the mechanism's heal
# or the fault's lifting (``healed``), the queue back within tolerance of its baseline depth (``drained``) and
# the service back within tolerance (``recovered``, what ``recovery_s`` measures); ``confirmed`` is when the
# confirming hold ended (the verdict). The spans between them add up to the recovery time; the longest one
# dominated it.
#
# The fluid model treats tasks as a fluid: the backlog left when the fault healed drains at the spare capacity,
# ``backlog / (cμ − λ)``, with λ and cμ measured from the heal until the queue drained (cμ: the able workers
# over their measured mean service time). It cannot drain when cμ ≤ λ.

PHASES: tuple[PhaseName, ...] = ("detection", "heal", "drain", "settle")


@dataclass(slots=True)
class Trace:
    """What a recovery's explanation needs, gathered tick by tick: a few numbers, however long it lasts."""

    detected_at: float | None = None  # the first judged tick out of tolerance
    queue_within_since: float | None = None  # the first tick of the current run with the queue within tolerance
    drained_at: float | None = None  # the first tick from the heal on with the queue within tolerance
    confirmed_at: float | None = None  # the verdict's tick
    backlog: int | None = None  # tasks above the baseline depth at the heal
    arrivals: float = 0.0  # sums over the drain's ticks (after the heal, until drained): λ and cμ
    capacity: float = 0.0
    ticks: int = 0

    def see(
        self,
        t: float,
        outside: list[ServiceSignal],
        judged: bool,
        healed_at: float | None,
        depth: float,
        arrival_rate: float,
        capacity_rate: float,
    ) -> None:
        """One tick: ``outside`` the figures out of tolerance, ``judged`` whether the tick counts (not the host's),
        ``depth`` the queue depth above the baseline's."""
        if judged and outside and self.detected_at is None:
            self.detected_at = t
        queue_within = "queue" not in outside
        if not queue_within:
            self.queue_within_since = None
        elif self.queue_within_since is None:
            self.queue_within_since = t
        if healed_at is None or self.drained_at is not None:
            return
        if self.backlog is None:  # the heal's own tick: what is left to drain
            self.backlog = max(0, round(depth))
        if t > healed_at or queue_within:  # the heal's tick still shows the fault's capacity in its figures
            self.arrivals += arrival_rate
            self.capacity += capacity_rate
            self.ticks += 1
        if queue_within:
            self.drained_at = t

    def confirm(self, t: float) -> None:
        """The verdict at ``t``: the drain is the queue's run within tolerance that lasted (it may have flapped)."""
        self.confirmed_at = t
        if self.drained_at is not None and self.queue_within_since is not None:
            self.drained_at = max(self.drained_at, self.queue_within_since)

    def dated_back(self, t: float, window: float, not_before: float) -> float:
        """Where a stretch within tolerance that starts at ``t``, right after a judged tick out, began.

        The windowed figures (rates, percentiles) at ``t`` cover the trailing ``window``: within tolerance over
        all of it, the service was back at its start; the queue depth is read at each tick, so it was back at
        the first tick of its run within tolerance. Never before ``not_before`` (the heal, a host's stall).
        """
        queue = self.queue_within_since if self.queue_within_since is not None else t
        return min(t, max(t - window, queue, not_before))


# Where a stretch within tolerance starting at a tick came back, given that tick and whether the judged tick before
# it was out of tolerance (see ``Recoveries.came_back``).
CameBack = Callable[[float, bool], float]


@dataclass(slots=True)
class Streak:
    """A recovery's confirming stretch: the run of judged ticks within tolerance its verdict waits on.

    A tick out of tolerance that the host perturbed neither breaks the stretch nor counts towards its hold."""

    since: float | None = None  # the stretch's first tick; None while out of tolerance
    back: float | None = None  # where its service came back (its windowed figures dated back)
    paused: float = 0.0  # of the stretch: seconds that could not count towards the hold (a stall's)
    last_within: bool | None = None  # the newest verdict on a tick the host did not perturb
    last_at: float = -math.inf  # and when

    def see(self, t: float, within: bool, perturbed: float, came_back: CameBack) -> bool:
        """One tick (``perturbed``: its seconds, if the host's stall shows in it, else 0); True if it is judged."""
        if not within and perturbed:
            if self.since is not None:
                self.paused += perturbed
            return False
        was_out = self.last_within is False
        self.last_within, self.last_at = within, t
        if not within:
            self.since = None
            self.paused = 0.0
        elif self.since is None:
            self.since = t
            self.back = came_back(t, was_out)
        return True

    def held(self, t: float, hold: float) -> bool:
        """The stretch has lasted ``hold`` seconds that count by ``t``."""
        return self.since is not None and t - self.since - self.paused >= hold

    @property
    def start(self) -> float:
        """Where the service came back: the stretch's dated start, or its first tick."""
        assert self.since is not None
        return self.back if self.back is not None else self.since

    @property
    def held_up(self) -> bool:
        """The host's stalls paused the stretch, or none is running."""
        return self.paused > 0 or self.since is None

    def seen_out(self, since: float = -math.inf) -> bool:
        """The newest judged tick, at or after ``since``, was out of tolerance."""
        return self.last_within is False and self.last_at >= since


def _moment(at: float | None, start: float) -> float | None:
    return None if at is None else at - start


def phases(
    trace: Trace,
    start: float,
    healed_at: float | None,
    recovered_at: float | None,
    recovery_s: float | None,
) -> PhasesView:
    """The moments from ``start`` (the clock's), and the spans of a recovery of ``recovery_s`` seconds."""
    drained = trace.drained_at
    if drained is not None and healed_at is not None:
        drained = max(drained, healed_at)
    view: PhasesView = {
        "detected": _moment(trace.detected_at, start),
        "healed": _moment(healed_at, start),
        "drained": _moment(drained, start),
        "recovered": _moment(recovered_at, start),
        "confirmed": _moment(trace.confirmed_at, start),
        "spans": None,
        "dominant": None,
    }
    if recovery_s is None:
        return view
    cuts = []
    low = 0.0
    for at in (view["detected"], view["healed"], view["drained"]):
        low = min(recovery_s, max(low, at if at is not None else low))
        cuts.append(low)
    detection, heal, drain = cuts
    lasted = (detection, heal - detection, drain - heal, recovery_s - drain)
    view["spans"] = {"detection": lasted[0], "heal": lasted[1], "drain": lasted[2], "settle": lasted[3]}
    if recovery_s > 0:  # the longest span; ties go to the earlier phase
        view["dominant"] = PHASES[max(range(len(PHASES)), key=lambda i: (lasted[i], -i))]
    return view


def prediction(trace: Trace, start: float, healed_at: float | None) -> PredictionView | None:
    """The fluid model's recovery time: the heal, then ``backlog / (capacity − λ)``; None before a heal."""
    if healed_at is None or trace.backlog is None or trace.ticks == 0:
        return None
    arrival = trace.arrivals / trace.ticks
    capacity = trace.capacity / trace.ticks
    heal = max(0.0, healed_at - start)
    drains = trace.backlog == 0 or capacity > arrival
    drain = trace.backlog / (capacity - arrival) if trace.backlog and drains else 0.0 if drains else None
    return {
        "predicted_s": heal + drain if drain is not None else None,
        "heal_s": heal,
        "drain_s": drain,
        "drains": drains,
        "backlog": trace.backlog,
        "arrival_rate": arrival,
        "capacity_rate": capacity,
    }


@dataclass(slots=True)
class FaultRecord:
    """One fault, from injection to verdict; it changes through its methods as the fault ends and its recovery shows."""

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
    trace: Trace = field(default_factory=Trace)  # its phases and the fluid model's inputs, as they were seen
    streak: Streak = field(default_factory=Streak)  # the stretch within tolerance its verdict waits on

    @property
    def active(self) -> bool:
        return self.reverted_at is None

    # --- transitions ----------------------------------------------------------------------------------------

    def end(self, at: float, by: RevertCause) -> None:
        """Reverted at ``at``: recovering, unless its verdict came while it was active."""
        self.reverted_at = at
        self.reverted_by = by
        if self.outcome == "active":
            self.outcome = "recovering"

    def join(self, incident: int) -> None:
        self.incident = incident

    def share(self) -> None:
        """Its incident holds other faults now: the recovery is the incident's (see :attr:`recovery_s`)."""
        self.shared = True

    def count_impact(self, tally: tuple[int, ...]) -> None:
        """What users felt from its injection to ``tally``, while it is active (after, it is its incident's)."""
        if self.active:
            self.impact_tasks = impact_between(self.tally_from, tally)

    def stall(self, seconds: float) -> None:
        """Seconds before its verdict that the daemon's own process was paused (the host's, not the fault's)."""
        self.stalled_s += seconds

    def lift(self, at: float) -> None:
        """Something ended it before its TTL (a resume ends a pause): its restore clock starts."""
        self.lifted_at = at

    def heal(self, at: float) -> None:
        """Its mechanism recovered: the runtime healed it, or its damage is gone since it ended."""
        self.mechanism_recovered_at = at

    def see(
        self, t: float, outside: list[ServiceSignal], perturbed: float, depth: float, arrival: float, capacity: float
    ) -> None:
        """A tick's figures for its trace (``depth``: the queue's above the baseline's)."""
        judged = not outside or not perturbed
        self.trace.see(t, outside, judged, self.mechanism_recovered_at, depth, arrival, capacity)

    def judge(self, t: float, within: bool, perturbed: float, came_back: CameBack, tick: float) -> bool:
        """A tick judged against the steady state; True (and ``tick`` seconds of impact) when the service was out
        of tolerance while the fault was active."""
        if not self.streak.see(t, within, perturbed, came_back):
            return False
        felt = self.active and not within
        if felt:
            self.impact_s += tick
        return felt

    def recover(self, t: float) -> None:
        """Recovered: the service came back where its confirming stretch began (never before its injection)."""
        self.service_recovered_at = max(self.streak.start, self.injected_at)
        self.trace.confirm(t)
        self.outcome = "recovered"

    def settle(self, outcome: Verdict) -> None:
        """A verdict other than recovered: failed, or unmeasured."""
        self.outcome = outcome

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
            "phases": phases(
                self.trace, self.clock_start, self.mechanism_recovered_at, self.service_recovered_at, self.recovery_s
            ),
            "prediction": prediction(self.trace, self.clock_start, self.mechanism_recovered_at),
        }
