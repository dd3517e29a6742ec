"""The report's sections on admission: the collapse detector's alarms and the throttle's actions."""

from __future__ import annotations

from collections.abc import Mapping

from chaosd.admission.detector import CollapseDetector, DetectorState
from chaosd.admission.throttle import Throttle
from chaosd.pipeline.ledger import Counts
from chaosd.views import CollapseView, EpisodeView, ThrottleAction, ThrottleView

__all__ = ["collapse_view", "throttle_view"]


def collapse_view(
    detector: CollapseDetector, enabled: bool, warm_seconds: Mapping[DetectorState, float] | None, end_t: float
) -> CollapseView:
    """The detector's alarms and its time in each state over the measured window, which ends at ``end_t``.

    ``warm_seconds`` are its seconds in each state at the warm-up's end (None: no warm-up has ended yet).
    """
    # Seconds in each of the detector's states over the measured window.
    warm = warm_seconds or dict.fromkeys(DetectorState, 0.0)
    in_state = {k.value: round(v - warm[k], 6) for k, v in detector.seconds.items()}
    # Rounded before they are summed, so the time alarmed is exactly their sum in the report too (while
    # every episode is kept: history.entries); an episode still open counts up to the end of the run.
    episodes: list[EpisodeView] = [
        {
            "detected_at": e.detected_at,
            "cleared_at": e.cleared_at,
            "reason": e.reason,
            "kind": e.kind,
            "duration_s": round((e.cleared_at if e.cleared_at is not None else end_t) - e.detected_at, 6),
        }
        for e in detector.episodes
    ]
    last = detector.episodes[-1] if detector.episodes else None
    still_open = round(end_t - last.detected_at, 6) if last is not None and last.cleared_at is None else 0.0
    return {
        "detector": enabled,
        "count": detector.collapse_count,
        "alarms": detector.episode_count,
        "stalls": detector.stall_count,
        "episodes": episodes,
        "time_alarmed_s": detector.closed_s + still_open,
        "time_collapsed_s": in_state["collapsed"],
        "time_overloaded_s": in_state["overload"],
        "time_stalled_s": in_state["stall"],
        "failing": detector.failing_count,
        "time_failing_s": in_state["failing"],
        "time_metastable_s": in_state["metastable"],
        "final_state": detector.state.value,
    }


def throttle_view(throttle: Throttle, measured: Counts) -> ThrottleView:
    """The throttle's policy, where it ended, and its actions (the newest history.entries of them)."""
    actions = throttle.actions
    listed: list[ThrottleAction] = [
        {"at": a.at, "action": a.action, "factor": a.factor, "limit": a.limit} for a in actions
    ]
    return {
        "enabled": throttle.policy != "none",
        "policy": throttle.policy,
        "target_s": throttle.target,
        "limit": throttle.limit,
        "lowest_limit": throttle.lowest_limit,
        "capacity_per_s": throttle.capacity_rate,
        "decreases": throttle.decreases,
        "increases": throttle.increases,
        "lowest_factor": throttle.lowest_factor,
        "final_factor": throttle.factor,
        "refused": measured.rejected_by.get("throttled", 0) + measured.rejected_by.get("shed", 0),
        "actions": listed,
        "actions_truncated": throttle.decreases + throttle.increases + throttle.changes - len(actions),
    }
