"""The names the page shares with Python (actions, agent kinds, detector states, event kinds), written as one ES module.

The page imports ``./vocabulary.js``; no such file is in ``static/``: :func:`vocabulary_module` writes it from the
tables here when the page is served (and when a post-mortem is written), so the page never holds a copy of them.
``static/vocabulary.d.ts`` gives its constants' types to the type checker.
"""

from __future__ import annotations

import json
from typing import Literal, get_args

from chaosd.admission.detector import DetectorState
from chaosd.faults.catalogue import CATALOGUE
from chaosd.views import AgentKind, EventKind

__all__ = ["ACTION_VERBS", "ARES_ACTIONS", "DETECTOR_TONES", "HEAL_TIMERS", "vocabulary", "vocabulary_module"]

ActionGroup = Literal["ares", "queue", "dependency"]
Tone = Literal["good", "warn", "bad", "stall", "info"]

# The ARES Arena's own actions, and what each fault does to its targets in the event log ("✗ kill_agent → worker-3
# killed"; others: "hit"): the catalogue says both.
ARES_ACTIONS = tuple(name for name, spec in CATALOGUE.items() if spec.ares)
ACTION_VERBS = {name: spec.verb for name, spec in CATALOGUE.items() if spec.verb != "hit"}
# The setting whose timer paces each healing mechanism, as the text summary names it.
HEAL_TIMERS = {name: spec.heal_timer for name, spec in CATALOGUE.items() if spec.heal_timer is not None}

# Each detector state's tone, which is its colour: a collapse, a retry storm and failing tasks are red, an overload
# amber, a stall blue-grey.
DETECTOR_TONES: dict[DetectorState, Tone] = {
    DetectorState.HEALTHY: "good",
    DetectorState.WARNING: "warn",
    DetectorState.OVERLOAD: "warn",
    DetectorState.COLLAPSED: "bad",
    DetectorState.METASTABLE: "bad",
    DetectorState.FAILING: "bad",
    DetectorState.STALL: "stall",
    DetectorState.RECOVERING: "info",
}


def _group(name: str) -> ActionGroup:
    if "dependency" in CATALOGUE[name].kinds:
        return "dependency"
    return "ares" if name in ARES_ACTIONS else "queue"


def vocabulary() -> dict[str, object]:
    """Each constant of the module by its name."""
    kinds: tuple[AgentKind, ...] = get_args(AgentKind)
    return {
        # In catalogue order, which is the order of the page's buttons.
        "ACTION_GROUPS": {name: _group(name) for name in CATALOGUE},
        "ACTION_VERBS": ACTION_VERBS,
        # Orchestrators first: the replicas, one of them the leader, head the agent cards.
        "AGENT_KINDS": sorted(kinds, key=lambda k: k != "orchestrator"),
        "DETECTOR_TONES": {state.value: tone for state, tone in DETECTOR_TONES.items()},
        "EVENT_KINDS": list(get_args(EventKind)),
        "HEAL_TIMERS": HEAL_TIMERS,
    }


def vocabulary_module() -> str:
    """The ES module ``vocabulary.js``: one exported constant per table."""
    lines = ["// Written by chaosd/arena/vocabulary.py from Python's tables when the page is served."]
    for name, value in vocabulary().items():
        lines.append(f"export const {name} = {json.dumps(value, ensure_ascii=False)};")
    return "\n".join(lines) + "\n"
