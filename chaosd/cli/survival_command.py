"""``chaosd survival``: random faults on the running daemon until the duration ends, each fault and its verdict
printed as they happen under one progress line; ``chaosd survival stop`` stops it.
"""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from chaosd.cli.answers import Answer, as_float, as_object
from chaosd.cli.exits import EXIT_OK, EXIT_USAGE
from chaosd.cli.fault_commands import flag_duration
from chaosd.cli.plan_watch import PLAN_EXIT_CODES, FaultWatch, follow, plan_exit, progress, stopped
from chaosd.cli.transport import Client, ClientError, Out, Subcommands

__all__ = ["add_survival_command", "survival"]

_LINE_EVERY_S = 10.0  # without a terminal: one progress line per this much run time (the server's elapsed_s)


def add_survival_command(sub: Subcommands, common: argparse.ArgumentParser) -> None:
    """Register ``survival [stop]``; ``common`` holds the daemon's address and token."""
    p = sub.add_parser(
        "survival",
        parents=[common],
        help="inject random faults until the duration ends, printing each fault and its verdict; `survival stop`",
        epilog=PLAN_EXIT_CODES,
    )
    p.add_argument(
        "verb",
        nargs="?",
        choices=("stop",),
        metavar="stop",
        help="stop the running survival instead (DELETE /api/v1/survival: its active faults are reverted)",
    )
    p.add_argument("--duration", default="30m", help="how long to run (30m)")
    p.add_argument("--interval", default="10s", help="time between faults (10s)")
    p.add_argument("--actions", help="comma-separated subset of the catalogue (default: the daemon's)")
    p.add_argument("--overlap", action="store_true", help="faults last 2×interval and stack (default: one at a time)")


def survival(client: Client, args: argparse.Namespace, out: Out, err: Out) -> int:
    """Start a survival run and follow it to its end (Ctrl-C stops it on the daemon), or stop the running one."""
    if args.verb == "stop":
        out(stopped("survival", as_object(client.request("DELETE", "/api/v1/survival"))))
        return EXIT_OK
    body: dict[str, object] = {}
    for flag, text in (("--interval", args.interval), ("--duration", args.duration)):
        if flag_duration(flag, text) <= 0:
            raise ClientError(EXIT_USAGE, f"{flag}: must be > 0, got {text!r}")
        body[flag[2:]] = text.strip()  # as typed: the API takes "10s" and parses it with the same rules
    if args.actions is not None:
        actions = [a.strip() for a in args.actions.split(",") if a.strip()]
        if not actions:
            raise ClientError(EXIT_USAGE, f"--actions: no action named in {args.actions!r}")
        body["actions"] = actions
    if args.overlap:
        body["overlap"] = True
    status: Answer = as_object(client.request("POST", "/api/v1/survival", body))
    live = _LiveLine(out, sys.stdout if sys.stdout.isatty() else None)
    watch = FaultWatch(client, live.note)
    ours = False  # stopped by this client (Ctrl-C): the run ended as asked

    def show(status: Answer) -> None:
        watch.update(status)
        live.show(status)

    try:
        show(status)
        status = follow(client, "/api/v1/survival", status, show)
    except KeyboardInterrupt:
        live.end()
        out("interrupted: stopping survival")
        status = as_object(client.request("DELETE", "/api/v1/survival"))
        ours = True
    finally:
        live.end()
    watch.update(status)
    watch.end()
    out(f"survival {status['state']}: {progress(status)}" + (f" · {status['reason']}" if status.get("reason") else ""))
    return plan_exit(status, ours, err)


class _LiveLine:
    """One progress line: redrawn in place on a terminal, else a new line every 10 s of the run's elapsed time."""

    def __init__(self, out: Out, tty: TextIO | None) -> None:
        self._out = out
        self._tty = tty
        self._width = 0
        self._last: float | None = None

    def show(self, status: Answer) -> None:
        line = f"survival {status.get('state', '?')}: {progress(status)}"
        if self._tty is not None:
            self._tty.write("\r" + line.ljust(self._width))
            self._tty.flush()
            self._width = len(line)
            return
        elapsed = as_float(status.get("elapsed_s") or 0.0)
        if self._last is None or elapsed - self._last >= _LINE_EVERY_S:
            self._out(line)
            self._last = elapsed

    def note(self, line: str) -> None:
        """A line of its own (a fault, a verdict): above the progress line, which the next status redraws."""
        if self._tty is not None and self._width:
            self._tty.write("\r" + " " * self._width + "\r")
            self._tty.flush()
            self._width = 0
        self._out(line)

    def end(self) -> None:
        if self._tty is not None and self._width:
            self._tty.write("\n")
            self._tty.flush()
            self._width = 0


# --- rendering ----------------------------------------------------------------------------------------------------
