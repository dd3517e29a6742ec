"""Following a survival or scenario run the daemon plays: its status polled until it ends, a line per fault it
injected and per verdict, its progress in one line, and the exit code of how it ended.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from chaosd.cli.answers import Answer, as_array, as_float, as_object
from chaosd.cli.exits import EXIT_OK, EXIT_PLAN_FAILED, EXIT_REJECTED, EXIT_SERVER
from chaosd.cli.fault_commands import targets_text, verdict_line
from chaosd.cli.transport import Client, ClientError, Out
from chaosd.core.humanize import seconds
from chaosd.views.wire import TERMINAL

if TYPE_CHECKING:  # the views import pydantic, which a client command never needs at run time
    from chaosd.views import PlanKind

__all__ = ["PLAN_EXIT_CODES", "FaultWatch", "follow", "plan_exit", "progress", "stopped"]

_POLL_S = 1.0  # between status polls
# A plan's states (chaosd/daemon/control.py PlanRun.state): running, then one of these, which it never leaves.
_ENDED = ("finished", "stopped", "failed")
_RUNNING = "running"
PLAN_EXIT_CODES = (
    "exit codes: 0 finished (a scenario: its expectations passed, or it had none); 3 a scenario's expectation"
    " failed; 7 the run did not reach its end: it failed (crashed) or was stopped by someone else (another"
    " client, the daemon shutting down); 4 unreachable; 5 rejected; 6 server error; 130 interrupted"
)


def _pause() -> None:
    time.sleep(_POLL_S)


def follow(client: Client, path: str, status: Answer, show: Callable[[Answer], None]) -> Answer:
    """Poll ``path`` until the plan has ended (any end state); ``idle`` means the daemon no longer knows the run
    we started, and a state it does not document is a server error, never a reason to poll forever."""
    while (state := status.get("state")) not in _ENDED:
        if state == "idle":
            raise ClientError(EXIT_SERVER, f"chaosd at {client.base} reports nothing running ({path} is idle)")
        if state != _RUNNING:
            raise ClientError(EXIT_SERVER, f"chaosd at {client.base} answered an unknown plan state {state!r}")
        _pause()
        status = as_object(client.request("GET", path))
        show(status)
    return status


def plan_exit(status: Answer, ours: bool, err: Out) -> int:
    """The exit code of a plan that has ended: 0 if it reached its end (or this client stopped it), else 7."""
    state = status.get("state")
    if state == "finished" or (state == "stopped" and ours):
        return EXIT_OK
    why = status.get("reason") or state
    err(f"chaosd: {status.get('kind') or 'the run'} {state} before its end: {why}")
    return EXIT_PLAN_FAILED


class FaultWatch:
    """One line per fault a plan injected and per verdict, as they happen: the fault ids come from the plan's
    ``log``, each verdict from its fault's record (``GET /api/v1/faults/{id}``) until it has one."""

    def __init__(self, client: Client, out: Out) -> None:
        self._client = client
        self._out = out
        self._seen: set[tuple[object, ...]] = set()
        self._open: dict[int, Answer] = {}

    def update(self, status: Answer) -> None:
        start = as_float(status.get("started_at") or 0.0)
        for entry in as_array(status.get("log") or []):
            if not isinstance(entry, dict):
                continue
            fault_id = entry.get("fault")
            at = f"t={seconds(max(0.0, float(entry.get('at') or 0.0) - start))}"
            if isinstance(fault_id, int):
                if ("fault", fault_id) in self._seen:
                    continue
                self._seen.add(("fault", fault_id))
                self._open[fault_id] = entry
                target = targets_text(entry) if entry.get("targets") or entry.get("target") else "?"
                self._out(f"{at}  fault {fault_id} injected: {entry.get('action', '?')} on {target}")
            elif entry.get("action") == "skip" and ("skip", entry.get("at")) not in self._seen:
                self._seen.add(("skip", entry.get("at")))
                self._out(f"{at}  {entry.get('reason') or 'skipped'}")
            elif entry.get("error") and ("error", entry.get("at"), entry.get("action")) not in self._seen:
                self._seen.add(("error", entry.get("at"), entry.get("action")))
                self._out(f"{at}  {entry.get('action', '?')} not injected: {entry['error']}")
        for fault_id in list(self._open):
            try:
                fault = as_object(self._client.request("GET", f"/api/v1/faults/{fault_id}"))
            except ClientError as exc:
                if exc.code != EXIT_REJECTED:  # unreachable, a server error: the run's own poll says so
                    raise
                del self._open[fault_id]  # aged out of the daemon's memory
                self._out(f"fault {fault_id}: no longer listed by the daemon; no verdict seen")
                continue
            if fault.get("outcome") in TERMINAL:
                del self._open[fault_id]
                self._out(verdict_line(fault))

    def end(self) -> None:
        for fault_id, entry in sorted(self._open.items()):
            self._out(f"fault {fault_id} ({entry.get('action', '?')}): no verdict yet when the run ended")
        self._open.clear()


def stopped(kind: PlanKind, status: Answer) -> str:
    """The answer to a stop: the plan's state, progress and reason, and the faults reverted with it."""
    name = f" {status['name']}" if kind == "scenario" and status.get("name") else ""
    reason = f" · {status['reason']}" if status.get("reason") else ""
    log = as_array(status.get("log") or [])
    last = log[-1] if log and isinstance(log[-1], dict) else {}
    reverted = last.get("reverted") if last.get("action") == "stop" else None
    faults = f" · reverted fault(s) {', '.join(map(str, as_array(reverted)))}" if reverted else ""
    return f"{kind}{name} {status['state']}: {progress(status)}{reason}{faults}"


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


def progress(status: Answer) -> str:
    """elapsed · actions · score (grade) from a survival or scenario status.

    The score is the plan's own window (``daemon_score`` is the daemon's lifetime, not shown here); it has no
    total ("-") until a task offered in the window has settled.
    """
    actions = status.get("actions")
    count = len(actions) if isinstance(actions, list) else actions if actions is not None else 0
    score = as_object(status.get("score") or {})
    shown = f"{score['total']:.1f} ({score['grade']})" if score.get("total") is not None else "-"
    return f"elapsed {_clock(as_float(status.get('elapsed_s') or 0.0))} · actions {count} · score {shown}"
