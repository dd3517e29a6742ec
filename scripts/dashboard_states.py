"""Write the detector-state panels of the Grafana dashboards (dashboards/*.json) from the detector's own states.

Usage: python scripts/dashboard_states.py [--check] [--dashboards DIR]

A state panel folds the one-hot `chaosd_detector_state` into one code per instance and names each code with a
value mapping. The states are the detector's (`DetectorState`, the same enum the exporter labels the series with,
so the same list docs/metrics.md is checked against); their codes and colours are the table below. For every panel
whose query folds `chaosd_detector_state`, this writes the query, the value mappings and the code list in the
description, and leaves the rest of the dashboard as it is (files in Grafana's export layout: 2-space JSON).

A state the detector has and the table lacks stops the script (exit 2, naming it) before anything is written: give
it a code and a colour here. --check changes nothing and exits 1 naming each panel that differs from what this
would write.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from chaosd.admission.detector import DetectorState

ROOT = Path(__file__).resolve().parent.parent
DASHBOARDS = ROOT / "dashboards"
# Code and colour per state. A code, once given, stays: saved links, alert queries and tests read them (8, the
# highest, is metastable, so a panel's max over time shows a storm over anything else).
STYLES: dict[str, tuple[int, str]] = {
    "healthy": (1, "green"),
    "warning": (2, "yellow"),
    "overload": (3, "orange"),
    "collapsed": (4, "red"),
    "stall": (5, "purple"),
    "recovering": (6, "blue"),
    "failing": (7, "dark-red"),
    "metastable": (8, "dark-purple"),
}
NO_STATE = (0, "unknown", "text")  # no series at all (the instance not scraped yet, or gone)
SELECTOR = 'instance=~"$instance"'
FOLDED = re.compile(r"\d+ \* chaosd_detector_state\{")
CODE_LIST = re.compile(r"\((?:\d+ [a-z_]+, )*\d+ [a-z_]+; 0 = no state reported\)")


class MissingStyle(KeyError):
    """A state of the detector with no code and colour in STYLES."""


def codes(states: Iterable[str]) -> list[tuple[int, str, str]]:
    """(code, state, colour) for every state, by code; a state without a style raises MissingStyle naming it."""
    states = list(states)
    missing = [s for s in states if s not in STYLES]
    if missing:
        raise MissingStyle(f"detector state(s) {', '.join(missing)} have no code and colour in STYLES")
    return sorted((STYLES[s][0], s, STYLES[s][1]) for s in states)


def detector_states() -> list[str]:
    return [s.value for s in DetectorState]


def fold(table: list[tuple[int, str, str]]) -> str:
    terms = " or ".join(f'{code} * chaosd_detector_state{{{SELECTOR}, state="{state}"}}' for code, state, _ in table)
    return f"sum by (instance) ({terms})"


def mappings(table: list[tuple[int, str, str]]) -> list[dict[str, Any]]:
    rows = [NO_STATE, *((code, state, colour) for code, state, colour in table)]
    options = {str(code): {"text": text, "color": colour, "index": i} for i, (code, text, colour) in enumerate(rows)}
    return [{"type": "value", "options": options}]


def code_list(table: list[tuple[int, str, str]]) -> str:
    return "(" + ", ".join(f"{code} {state}" for code, state, _ in table) + "; 0 = no state reported)"


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def state_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """The panels whose query folds the one-hot detector state into codes."""
    return [
        p
        for p in _panels(dashboard.get("panels", []))
        if any(FOLDED.search(str(t.get("expr", ""))) for t in p.get("targets", []))
    ]


def rewrite(dashboard: dict[str, Any], table: list[tuple[int, str, str]]) -> list[str]:
    """Write the state panels of the dashboard in place; the titles of those it changed."""
    changed = []
    for panel in state_panels(dashboard):
        before = json.dumps(panel, sort_keys=True)
        (target,) = [t for t in panel["targets"] if FOLDED.search(str(t.get("expr", "")))]
        target["expr"] = fold(table)
        panel.setdefault("fieldConfig", {}).setdefault("defaults", {})["mappings"] = mappings(table)
        if isinstance(panel.get("description"), str):
            panel["description"] = CODE_LIST.sub(code_list(table), panel["description"])
        if json.dumps(panel, sort_keys=True) != before:
            changed.append(str(panel.get("title")))
    return changed


def layout(dashboard: dict[str, Any]) -> str:
    """Grafana's export layout: 2-space JSON, non-ASCII as is, a final newline."""
    return json.dumps(dashboard, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a dashboard would change")
    parser.add_argument("--dashboards", type=Path, default=DASHBOARDS, help="the folder of dashboard JSON files")
    args = parser.parse_args(argv)
    try:
        table = codes(detector_states())
    except MissingStyle as exc:
        print(f"dashboard_states: error: {exc.args[0]}", file=sys.stderr)
        return 2
    paths = sorted(args.dashboards.glob("*.json"))
    if not paths:
        print(f"dashboard_states: error: no dashboards in {args.dashboards}", file=sys.stderr)
        return 2
    differ = []
    for path in paths:
        text = path.read_text(encoding="utf-8")
        dashboard = json.loads(text)
        changed = rewrite(dashboard, table)
        new = layout(dashboard)
        if new == text:
            continue
        differ.append(f"{path.name}: {', '.join(repr(t) for t in changed) or 'layout'}")
        if not args.check:
            path.write_text(new, encoding="utf-8")
    for line in differ:
        print(line)
    if args.check and differ:
        print(f"dashboard_states: {len(differ)} dashboard(s) differ: run scripts/dashboard_states.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
