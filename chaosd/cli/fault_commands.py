"""The fault commands: ``inject`` (and wait for its verdict), ``faults``, ``revert``, and the safety lever's
``abort`` and ``release``.
"""

from __future__ import annotations

import argparse
import math
import urllib.parse
from collections.abc import Mapping, Sequence

from chaosd.cli.answers import Answer, as_array, as_float, as_object, as_objects, as_text, json_text
from chaosd.cli.exits import EXIT_EXPECTATION, EXIT_OK, EXIT_USAGE
from chaosd.cli.transport import Client, ClientError, Command, Out, Subcommands
from chaosd.core.clock import wall_time
from chaosd.core.durations import parse_duration
from chaosd.core.humanize import host_stall, seconds, table
from chaosd.views.wire import MAX_WAIT_S, TERMINAL

__all__ = [
    "FAULT_COMMANDS",
    "add_fault_commands",
    "await_verdict",
    "flag_duration",
    "selector",
    "targets_text",
    "verdict_line",
]


def add_fault_commands(sub: Subcommands, common: argparse.ArgumentParser) -> None:
    """Register inject, faults, revert, abort and release; ``common`` holds the daemon's address and token."""

    p = sub.add_parser("inject", parents=[common], help="inject a fault into the running daemon")
    p.add_argument("action", help="an action of the catalogue (GET /api/v1/actions lists them)")
    p.add_argument("--target", help="agent id, kind, random or N%% (default: the action's)")
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE", help="an action parameter")
    p.add_argument("--ttl", help="revert after this long, e.g. 30s or 2m (default: the daemon's)")
    p.add_argument("--label", action="append", default=[], metavar="KEY=VALUE", help="label the fault (repeatable)")
    p.add_argument(
        "--wait",
        nargs="?",
        const="2m",
        metavar="DURATION",
        help="wait (default 2m) for the fault's verdict; exit 3 unless it recovered",
    )
    p.add_argument("--json", action="store_true", help="print the fault as JSON")

    p = sub.add_parser("faults", parents=[common], help="list the faults of the running daemon")
    p.add_argument("--active", action="store_true", help="only faults not yet reverted")
    p.add_argument("--label", action="append", default=[], metavar="KEY=VALUE", help="only faults with this label")
    p.add_argument("--action", action="append", default=[], help="only faults of this action (repeatable)")
    p.add_argument("--state", action="append", default=[], help="only faults in this state (repeatable)")
    p.add_argument("--json", action="store_true", help="print the answer as JSON")

    p = sub.add_parser("revert", parents=[common], help="revert a fault now, or the active faults a selector picks")
    p.add_argument("id", metavar="ID", nargs="?", help="the fault id")
    p.add_argument("--label", action="append", default=[], metavar="KEY=VALUE", help="revert faults with this label")
    p.add_argument("--action", action="append", default=[], help="revert faults of this action (repeatable)")

    p = sub.add_parser("abort", parents=[common], help="pull the safety lever: revert every fault, refuse new ones")
    p.add_argument("--reason", help="recorded with the lever")
    sub.add_parser("release", parents=[common], help="release the safety lever")


def flag_duration(flag: str, text: str) -> float:
    """``text`` as a duration in seconds, or a usage error naming ``flag``."""
    try:
        value = parse_duration(text)
    except ValueError as exc:
        raise ClientError(EXIT_USAGE, f"{flag}: {exc}") from None
    if not isinstance(value, float):  # pragma: no cover - a str always parses to a float
        raise ClientError(EXIT_USAGE, f"{flag}: not a duration: {text!r}")
    return value


def _number_or_text(text: str) -> float | str:
    """A number when it is one; otherwise the text itself, so the server can name what is wrong with it."""
    try:
        value = float(text)
    except ValueError:
        return text
    return value if math.isfinite(value) else text


def _params(items: Sequence[str]) -> dict[str, float | str]:
    params: dict[str, float | str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ClientError(EXIT_USAGE, f"--param: expected NAME=VALUE, got {item!r}")
        if name in params:
            raise ClientError(EXIT_USAGE, f"--param: {name} given twice")
        params[name] = _number_or_text(value.strip())
    return params


def _labels(items: Sequence[str]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ClientError(EXIT_USAGE, f"--label: expected KEY=VALUE, got {item!r}")
        if key in labels:
            raise ClientError(EXIT_USAGE, f"--label: {key} given twice")
        labels[key] = value
    return labels


def selector(labels: Mapping[str, str], actions: Sequence[str] = ()) -> list[tuple[str, str]]:
    """Query pairs for the daemon's fault selector: every label must hold, any action may."""
    return [("label", f"{k}={v}") for k, v in labels.items()] + [("action", a) for a in actions]


def _inject(client: Client, args: argparse.Namespace, out: Out, err: Out) -> int:
    body: dict[str, object] = {"action": args.action}
    if args.target is not None:
        body["target"] = args.target
    params = _params(args.param)
    if params:
        body["params"] = params
    if args.ttl is not None:
        body["ttl"] = flag_duration("--ttl", args.ttl)
    labels = _labels(args.label)
    if labels:
        body["labels"] = labels
    wait = flag_duration("--wait", args.wait) if args.wait is not None else None
    fault = as_object(client.request("POST", "/api/v1/faults", body))
    if wait is not None:
        fault = await_verdict(client, fault, wait)
    if args.json:
        out(json_text(fault))
    else:
        ttl = f" · ttl {fault['ttl']:g} s" if isinstance(fault.get("ttl"), int | float) else ""
        out(f"fault {fault['id']} injected: {fault['action']} on {targets_text(fault)}{ttl}")
    if wait is None:
        return EXIT_OK
    outcome = fault["outcome"]
    if outcome == "recovered":
        took = fault.get("recovery_s")
        how = (
            f" in {seconds(took)} ({fault.get('clock')} clock)"
            if isinstance(took, int | float)
            else " (with its incident)"
        )
        out(f"fault {fault['id']} recovered{how}{host_stall(fault.get('stalled_s'))}")
        return EXIT_OK
    if outcome in ("failed", "unmeasured"):
        err(f"chaosd: fault {fault['id']} {outcome}: " + _VERDICT_HINTS[str(outcome)])
    else:
        err(f"chaosd: fault {fault['id']} still {outcome} after {wait:g} s (--wait)")
    return EXIT_EXPECTATION


_VERDICT_HINTS = {
    "failed": "the service did not come back within recovery.limit of the fault's end",
    "unmeasured": "nothing to judge it against (no baseline yet, no [slo]), or the daemon's process kept "
    "stalling (a loaded host) until recovery.limit",
}


def await_verdict(client: Client, fault: Answer, wait: float) -> dict[str, object]:
    """Long-poll the fault (the daemon answers at its verdict) until it has one or ``wait`` runs out."""
    deadline = wall_time() + wait
    while fault["outcome"] not in TERMINAL:
        left = deadline - wall_time()
        if left <= 0:
            break
        poll = min(left, MAX_WAIT_S)
        path = f"/api/v1/faults/{fault['id']}?wait={poll:.3f}"
        fault = as_object(client.request("GET", path, timeout=poll + client.timeout))
    return dict(fault)


def _reverted(fault: Answer) -> str:
    return f"fault {fault['id']} reverted: {fault['action']} on {targets_text(fault)} ({fault.get('outcome', '?')})"


def _faults(client: Client, args: argparse.Namespace, out: Out, err: Out) -> int:
    query = [("active", "true")] if args.active else []
    query += selector(_labels(args.label), args.action) + [("state", s) for s in args.state]
    answer = client.request("GET", "/api/v1/faults" + (f"?{urllib.parse.urlencode(query)}" if query else ""))
    if args.json:
        out(json_text(answer))
        return EXIT_OK
    faults = as_objects(as_object(answer)["faults"])
    if not faults:
        out("no active faults" if args.active else "no faults")
        return EXIT_OK
    rows = [
        (
            str(f["id"]),
            as_text(f["action"]),
            targets_text(f),
            as_text(f["outcome"]),
            _secs(f.get("injected_at")),
            _secs(f.get("recovery_s")),
        )
        for f in faults
    ]
    for line in table(("id", "action", "targets", "outcome", "injected_at", "recovery_s"), rows, "<<<<>>"):
        out(line)
    return EXIT_OK


def _revert(client: Client, args: argparse.Namespace, out: Out, err: Out) -> int:
    picked = selector(_labels(args.label), args.action)
    if (args.id is None) == (not picked):
        raise ClientError(EXIT_USAGE, "give a fault ID or a selector (--label KEY=VALUE, --action NAME), not both")
    if args.id is None:
        answer = as_object(client.request("DELETE", f"/api/v1/faults?{urllib.parse.urlencode(picked)}"))
        for fault in as_objects(answer["faults"]):
            out(_reverted(fault))
        out(f"{len(as_array(answer['reverted']))} fault(s) reverted")
        return EXIT_OK
    try:
        fault_id = int(args.id)
    except ValueError:
        raise ClientError(EXIT_USAGE, f"ID: not a fault id: {args.id!r}") from None
    out(_reverted(as_object(client.request("DELETE", f"/api/v1/faults/{fault_id}"))))
    return EXIT_OK


def _abort(client: Client, args: argparse.Namespace, out: Out, err: Out) -> int:
    answer = as_object(client.request("POST", "/api/v1/lever", {"reason": args.reason} if args.reason else {}))
    out(f"lever pulled ({answer['lever']}): {answer['reverted']} fault(s) reverted; new faults are refused")
    return EXIT_OK


def _release(client: Client, args: argparse.Namespace, out: Out, err: Out) -> int:
    client.request("DELETE", "/api/v1/lever")
    out("lever released: faults may be injected again")
    return EXIT_OK


def verdict_line(fault: Answer) -> str:
    """A fault's verdict in one line: how long it took to recover, or why it did not."""
    outcome = fault["outcome"]
    what = f"fault {fault['id']} {outcome}"
    action = fault.get("action", "?")
    if outcome == "recovered":
        took = fault.get("recovery_s")
        how = f" in {seconds(float(took))}" if isinstance(took, int | float) else " (with its incident)"
        return f"{what}{how} ({action}){host_stall(fault.get('stalled_s'))}"
    return f"{what} ({action}): {_VERDICT_HINTS.get(str(outcome), str(outcome))}"


def targets_text(fault: Answer) -> str:
    """What a fault (or a plan's log entry) was injected on, as text."""
    return ", ".join(str(t) for t in as_array(fault.get("targets") or [fault.get("target", "?")]))


def _secs(value: object) -> str:
    return "-" if value is None else f"{as_float(value):.2f}"


FAULT_COMMANDS: dict[str, Command] = {
    "inject": _inject,
    "faults": _faults,
    "revert": _revert,
    "abort": _abort,
    "release": _release,
}
