"""``chaosd scenario run``: a scenario file (or a shipped one by name) played by the running daemon, followed to
its verdict; ``chaosd scenario stop`` stops it.
"""

from __future__ import annotations

import argparse
import math
import os
import urllib.parse
from pathlib import Path

from chaosd.cli.answers import Answer, as_array, as_object
from chaosd.cli.exits import EXIT_EXPECTATION, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from chaosd.cli.plan_watch import PLAN_EXIT_CODES, FaultWatch, follow, plan_exit, progress, stopped
from chaosd.cli.transport import Client, ClientError, Out, Subcommands
from chaosd.core.humanize import value

__all__ = ["add_scenario_command", "scenario"]


def add_scenario_command(sub: Subcommands, common: argparse.ArgumentParser) -> None:
    """Register ``scenario run`` and ``scenario stop``; ``common`` holds the daemon's address and token."""
    command = sub.add_parser("scenario", help="run a scenario on the daemon")
    actions = command.add_subparsers(dest="scenario_command", metavar="SUBCOMMAND", required=True)
    p = actions.add_parser(
        "run", parents=[common], help="run a scenario file or a shipped scenario by name", epilog=PLAN_EXIT_CODES
    )
    p.add_argument("file_or_name", metavar="FILE_OR_NAME", help="a scenario YAML file, or a shipped scenario's name")
    p.add_argument("--speed", default="1", help="compress delays and durations by this factor (1)")
    p.add_argument("--wait", action=argparse.BooleanOptionalAction, default=True, help="wait for the result")
    actions.add_parser("stop", parents=[common], help="stop the running scenario (DELETE /api/v1/scenarios/current)")


def scenario(client: Client, args: argparse.Namespace, out: Out, err: Out) -> int:
    """Start the scenario and, unless ``--no-wait``, follow it to its verdict (exit 3 if an expectation failed)."""
    if args.scenario_command == "stop":
        out(stopped("scenario", as_object(client.request("DELETE", "/api/v1/scenarios/current"))))
        return EXIT_OK
    try:
        speed = float(args.speed)
    except ValueError:
        speed = math.nan
    if not (math.isfinite(speed) and speed > 0):
        raise ClientError(EXIT_USAGE, f"--speed: must be a number > 0, got {args.speed!r}")
    given = args.file_or_name
    path = Path(given)
    if path.is_file():
        try:
            text = path.read_bytes()
        except OSError as exc:
            raise ClientError(EXIT_USAGE, f"FILE_OR_NAME: cannot read {given}: {exc.strerror}") from None
        query = urllib.parse.urlencode({"speed": f"{speed:g}"})
        answer = client.request("POST", f"/api/v1/scenarios/run?{query}", raw=text, content_type="application/yaml")
    elif path.suffix in (".yaml", ".yml") or os.sep in given:
        raise ClientError(EXIT_USAGE, f"FILE_OR_NAME: no such file: {given}")
    else:
        body = {"name": given, "speed": int(speed) if speed.is_integer() else speed}
        answer = client.request("POST", "/api/v1/scenarios/run", body)
    status: Answer = as_object(answer)
    name = status.get("name") or given
    out(f"scenario {name} started (speed {speed:g}×)")
    if not args.wait:
        return EXIT_OK
    watch = FaultWatch(client, out)
    try:
        watch.update(status)
        status = follow(client, "/api/v1/scenarios/current", status, watch.update)
        watch.update(status)
    except KeyboardInterrupt:
        err(f"chaosd: stopped waiting; scenario {name} still runs (chaosd scenario stop stops it)")
        return EXIT_INTERRUPTED
    watch.end()
    for e in as_array(status.get("expectations") or []):
        out(_expectation(e))
    passed = status.get("passed")
    verdict = "passed" if passed else "FAILED" if passed is False else "no verdict"
    reason = f" · {status['reason']}" if status.get("reason") and status["state"] != "finished" else ""
    out(f"scenario {name} {status['state']}: {verdict} · {progress(status)}{reason}")
    if status["state"] != "finished":
        return plan_exit(status, False, err)
    return EXIT_EXPECTATION if passed is False else EXIT_OK


def _expectation(e: object) -> str:
    if not isinstance(e, dict):
        return f"  expect     {e}"
    mark = "pass" if e.get("passed") else "FAIL"
    expected = value(e["expected"]) if "expected" in e else ""
    line = f"  expect     {mark}: {e.get('check', '?')} {expected} (measured {value(e.get('measured'))})"
    because = e.get("because")
    return f"{line}: {because}" if because and not e.get("passed") else line
