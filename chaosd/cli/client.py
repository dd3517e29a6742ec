"""The client commands (inject, faults, revert, abort, release, survival, inspect, scenario run) for a running daemon.

Synchronous stdlib HTTP against docs/api.md; every failure is a ``ClientError`` carrying the exit code scripts use.
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO, cast

from chaosd.core.clock import wall_time
from chaosd.core.durations import parse_duration
from chaosd.core.errors import ChaosdError
from chaosd.core.humanize import (
    action_rows,
    cause_rows,
    fixes,
    host_stall,
    judged_line,
    seconds,
    table,
    time_causes,
    value,
)
from chaosd.core.humanize import rate as rate_per_s
from chaosd.core.version import __version__
from chaosd.views.wire import MAX_WAIT_S, TERMINAL, is_loopback

if TYPE_CHECKING:  # the views import pydantic, which a client command never needs at run time
    from chaosd.views import PlanKind, ReportView

__all__ = [
    "COMMANDS",
    "EXIT_EXPECTATION",
    "EXIT_OK",
    "EXIT_PLAN_FAILED",
    "EXIT_REJECTED",
    "EXIT_SERVER",
    "EXIT_UNREACHABLE",
    "EXIT_USAGE",
    "Client",
    "ClientError",
    "add_client_commands",
    "await_verdict",
    "daemon_address",
    "environment_token",
    "run_client_command",
    "selector",
]

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_EXPECTATION = 3
EXIT_UNREACHABLE = 4
EXIT_REJECTED = 5
EXIT_SERVER = 6
EXIT_PLAN_FAILED = 7  # a survival or scenario run did not reach its end: failed (crashed) or stopped by another
_EXIT_INTERRUPTED = 130  # Ctrl-C while only waiting: the shell's convention for SIGINT

COMMANDS = ("inject", "faults", "revert", "abort", "release", "survival", "inspect", "scenario")
DEFAULT_ADDR = "http://127.0.0.1:8686"
ADDRESS_ORDER = f"first of: --addr, --host/--port, $CHAOSD_URL, {DEFAULT_ADDR}"
UNREACHABLE_HINT = "give the daemon's address with --addr URL (or --host/--port) or set CHAOSD_URL"
_POLL_S = 1.0  # between status polls
_LINE_EVERY_S = 10.0  # without a terminal: one progress line per this much run time (the server's elapsed_s)
# A plan's states (chaosd/daemon/control.py PlanRun.state): running, then one of these, which it never leaves.
_ENDED = ("finished", "stopped", "failed")
_RUNNING = "running"
PLAN_EXIT_CODES = (
    "exit codes: 0 finished (a scenario: its expectations passed, or it had none); 3 a scenario's expectation"
    " failed; 7 the run did not reach its end: it failed (crashed) or was stopped by someone else (another"
    " client, the daemon shutting down); 4 unreachable; 5 rejected; 6 server error; 130 interrupted"
)

Out = Callable[[str], None]
Answer = Mapping[str, object]  # a JSON object the daemon answered: its values are checked where they are read


class ClientError(ChaosdError):
    """A client command failed; ``code`` is the process exit code, ``message`` says what and where."""

    def __init__(self, code: int, message: str) -> None:
        self.code = code
        self.message = message
        super().__init__(message)


class Client:
    """One daemon address and its token; ``request`` returns the decoded answer or raises ``ClientError``."""

    def __init__(
        self, addr: str, token: str | None, timeout: float = 10.0, *, source: str = "--addr", hint: str = ""
    ) -> None:
        """``source`` names where ``addr`` came from (in a refusal of it, and as ``(from …)`` when unreachable);
        ``hint`` says how to give another address when this one cannot be reached."""
        self.base, host = _base_url(addr, source)
        self.token = token or None
        self.timeout = timeout
        self._origin = "" if source == "--addr" or not source else f" ({_ORIGINS.get(source, f'from {source}')})"
        self._hint = hint
        # A proxy from the environment must not intercept a daemon on this machine.
        handlers = [urllib.request.ProxyHandler({})] if is_loopback(host) else []
        self._opener = urllib.request.build_opener(*handlers)

    def request(
        self,
        method: str,
        path: str,
        body: object = None,
        *,
        content_type: str = "application/json",
        raw: bytes | None = None,
        timeout: float | None = None,
    ) -> object:
        """Send ``body`` as JSON (or ``raw`` bytes as ``content_type``); JSON answers are decoded, others are text
        (None for an empty answer)."""
        data = raw if raw is not None else None if body is None else json.dumps(body, allow_nan=False).encode()
        headers = {"Accept": "application/json", "User-Agent": f"chaosd/{__version__}"}
        if data is not None or method not in ("GET", "HEAD"):
            headers["Content-Type"] = content_type  # a change declares it even with no body (docs/security.md)
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        req = urllib.request.Request(self.base + path, data=data, headers=headers, method=method)
        try:
            with self._opener.open(req, timeout=self.timeout if timeout is None else timeout) as resp:
                payload: bytes = resp.read()
                kind = resp.headers.get_content_type()
        except urllib.error.HTTPError as exc:
            raise self._refusal(method, path, exc) from None
        except (OSError, http.client.HTTPException) as exc:  # URLError is an OSError
            raise ClientError(EXIT_UNREACHABLE, self._unreachable(exc)) from None
        if not payload:
            return None
        if kind != "application/json":
            return payload.decode("utf-8", "replace")
        try:
            return json.loads(payload)
        except ValueError:
            raise ClientError(EXIT_SERVER, f"chaosd at {self.base}: {method} {path} answered invalid JSON") from None

    def _refusal(self, method: str, path: str, exc: urllib.error.HTTPError) -> ClientError:
        try:
            detail = _error_detail(exc.read()) or str(exc.reason)
        except OSError:
            detail = str(exc.reason)
        if 400 <= exc.code < 500:
            hint = " (pass --token or set CHAOSD_API__TOKEN)" if exc.code == 401 and not self.token else ""
            return ClientError(EXIT_REJECTED, f"rejected ({exc.code}): {detail}{hint}")
        return ClientError(EXIT_SERVER, f"chaosd at {self.base} failed on {method} {path} ({exc.code}): {detail}")

    def _unreachable(self, exc: BaseException) -> str:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        where = self.base + self._origin
        hint = f"; {self._hint}" if self._hint else ""
        if isinstance(reason, TimeoutError):
            return f"no answer from chaosd at {where} within {self.timeout:g} s{hint}"
        if isinstance(reason, ConnectionRefusedError):
            return f"cannot reach chaosd at {where}: connection refused (is the daemon running?){hint}"
        if isinstance(reason, http.client.HTTPException):
            return f"cannot talk to chaosd at {where}: not an HTTP answer ({type(reason).__name__}){hint}"
        text = reason.strerror if isinstance(reason, OSError) and reason.strerror else str(reason)
        return f"cannot reach chaosd at {where}: {text}{hint}"


# Where an address came from, as the unreachable message says it ("--addr" says nothing: the user just typed it).
_ORIGINS = {"--host/--port": "from --host/--port", "default": "the default address"}


def _base_url(addr: str, source: str = "--addr") -> tuple[str, str]:
    text = addr.strip()
    if "://" not in text:
        text = "http://" + text
    parts = urllib.parse.urlsplit(text)
    host = parts.hostname
    try:
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        host = None
    if parts.scheme not in ("http", "https") or not host or parts.query or parts.fragment:
        raise ClientError(EXIT_USAGE, f"{source}: not a daemon address: {addr!r} (use host:port or http://host:port)")
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", "")), host


def daemon_address(addr: str | None, host: str | None, port: str | None, environ: Mapping[str, str]) -> tuple[str, str]:
    """The daemon's address and where it came from: ``addr`` (``--addr``), else ``host``/``port`` (either may be
    left out: the default's is used), else ``$CHAOSD_URL`` (or the older ``$CHAOSD_ADDR``), else the default.

    Raises ``ClientError`` (exit 2) naming ``--host`` or ``--port`` when one is not usable, even beside ``--addr``.
    """
    given = None
    if host is not None or port is not None:
        default = urllib.parse.urlsplit(DEFAULT_ADDR)
        name = default.hostname if host is None else host.strip()
        if not name or any(c in name for c in "/?#@ "):
            raise ClientError(EXIT_USAGE, f"--host: not a host name or address: {host!r} (a URL goes in --addr)")
        name = name.removeprefix("[").removesuffix("]")
        if ":" in name:  # an IPv6 address
            name = f"[{name}]"
        given = f"http://{name}:{default.port if port is None else _port_number(port)}"
    if addr:
        return addr, "--addr"
    if given is not None:
        return given, "--host/--port"
    for variable in ("CHAOSD_URL", "CHAOSD_ADDR"):
        if environ.get(variable):
            return environ[variable], variable
    return DEFAULT_ADDR, "default"


def _port_number(text: str) -> int:
    try:
        number = int(text.strip())
    except ValueError:
        number = 0
    if not 1 <= number <= 65535:
        raise ClientError(EXIT_USAGE, f"--port: not a port number: {text!r} (1 to 65535)")
    return number


def environment_token(environ: Mapping[str, str]) -> str | None:
    """The token from ``$CHAOSD_API__TOKEN``, ``$CHAOSD_TOKEN`` or the file ``$CHAOSD_API__TOKEN_FILE`` names;
    None when none is set. Raises ``ClientError`` (exit 2) when that file cannot be read."""
    token = environ.get("CHAOSD_API__TOKEN") or environ.get("CHAOSD_TOKEN")
    if token:
        return token
    path = environ.get("CHAOSD_API__TOKEN_FILE")
    return _read_token(path, "CHAOSD_API__TOKEN_FILE") if path else None


def _read_token(path: str, source: str) -> str | None:
    try:
        return Path(path).read_text().strip() or None
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or exc
        raise ClientError(EXIT_USAGE, f"{source}: cannot read {path!r} ({why})") from None


def _error_detail(body: bytes) -> str:
    """``field: message`` from the API's error body; else the start of whatever text came back."""
    try:
        error = json.loads(body)["error"]
        field, message = error.get("field"), error["message"]
    except (ValueError, KeyError, TypeError, AttributeError):
        return body.decode("utf-8", "replace").strip()[:200]
    return f"{field}: {message}" if field else str(message)


# --- reading answers ----------------------------------------------------------------------------------------------
# A value not in docs/api.md's shape raises TypeError, which run_client_command reports as an unexpected answer.


def _object(answer: object) -> dict[str, object]:
    """``answer`` as the JSON object it should be; TypeError if it is anything else."""
    if not isinstance(answer, dict):
        raise TypeError(f"expected a JSON object, got {type(answer).__name__}")
    return answer


def _array(value: object) -> list[object]:
    if not isinstance(value, list):
        raise TypeError(f"expected a JSON array, got {type(value).__name__}")
    return value


def _objects(value: object) -> list[dict[str, object]]:
    """A list of JSON objects; none for a missing (null) or empty one."""
    return [_object(item) for item in _array(value or [])]


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


def _float(value: object) -> float:
    """``float(value)``, for the values it takes (numbers, and numbers as text)."""
    if not isinstance(value, int | float | str):
        raise TypeError(f"float() argument must be a string or a real number, not {type(value).__name__!r}")
    return float(value)


def _report(answer: object) -> ReportView:
    """``GET /api/v1/report``'s answer as its view, once the blocks read here are JSON objects (or lists of them).

    The faults, their summary and the diagnostics are always there (empty when an older daemon left them out);
    every other field, of the report or its blocks, is read with ``.get`` or fails as an unexpected answer.
    """
    report = _object(answer)
    for key in ("score", "collapse", "throttle"):
        _object(report.get(key) or {})
    checked = {
        **report,
        "faults": _objects(report.get("faults")),
        "faults_summary": _object(report.get("faults_summary") or {}),
        "diagnostics": _objects(report.get("diagnostics")),
    }
    return cast("ReportView", checked)  # its blocks checked just above


# --- argument parsing ---------------------------------------------------------------------------------------------


def add_client_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the client subcommands on chaosd's parser; values are checked by ``run_client_command``."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--addr", metavar="URL", help=f"daemon address, http://HOST:PORT or HOST:PORT ({ADDRESS_ORDER})"
    )
    common.add_argument("--host", help="daemon host, instead of --addr (with --port; default 127.0.0.1)")
    common.add_argument("--port", help="daemon port, instead of --addr (with --host; default 8686)")
    common.add_argument(
        "--token", help="API bearer token (default: $CHAOSD_API__TOKEN or $CHAOSD_TOKEN); others can see it in ps"
    )
    common.add_argument("--token-file", help="read the token from this file (default: $CHAOSD_API__TOKEN_FILE)")

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

    p = sub.add_parser("inspect", parents=[common], help="score, recoveries per action and causes so far")
    p.add_argument("--json", action="store_true", help="print the whole report as JSON")

    scenario = sub.add_parser("scenario", help="run a scenario on the daemon")
    actions = scenario.add_subparsers(dest="scenario_command", metavar="SUBCOMMAND", required=True)
    p = actions.add_parser(
        "run", parents=[common], help="run a scenario file or a shipped scenario by name", epilog=PLAN_EXIT_CODES
    )
    p.add_argument("file_or_name", metavar="FILE_OR_NAME", help="a scenario YAML file, or a shipped scenario's name")
    p.add_argument("--speed", default="1", help="compress delays and durations by this factor (1)")
    p.add_argument("--wait", action=argparse.BooleanOptionalAction, default=True, help="wait for the result")
    actions.add_parser("stop", parents=[common], help="stop the running scenario (DELETE /api/v1/scenarios/current)")


def _duration(flag: str, text: str) -> float:
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


# --- commands -----------------------------------------------------------------------------------------------------


def run_client_command(args: argparse.Namespace, out: Out, err: Out) -> int:
    """Run one client subcommand; returns the exit code (messages go to ``out`` and ``err``, nothing exits)."""
    handler = _HANDLERS.get(args.command)
    if handler is None:
        err(f"chaosd: error: {args.command!r} is not a client command")
        return EXIT_USAGE
    addr = DEFAULT_ADDR
    try:
        addr, source = daemon_address(
            getattr(args, "addr", None), getattr(args, "host", None), getattr(args, "port", None), os.environ
        )
        token = getattr(args, "token", None) or None
        token_file = getattr(args, "token_file", None)
        if token is None and token_file:
            token = _read_token(token_file, "--token-file")
        elif token is None:
            token = environment_token(os.environ)
        return handler(Client(addr, token, source=source, hint=UNREACHABLE_HINT), args, out, err)
    except ClientError as exc:
        err(f"chaosd: error: {exc.message}")
        return exc.code
    except (KeyError, TypeError, AttributeError) as exc:  # the daemon answered, but not in docs/api.md's shape
        err(f"chaosd: error: unexpected answer from chaosd at {addr}: {type(exc).__name__}: {exc}")
        return EXIT_SERVER


def _inject(client: Client, args: argparse.Namespace, out: Out, err: Out) -> int:
    body: dict[str, object] = {"action": args.action}
    if args.target is not None:
        body["target"] = args.target
    params = _params(args.param)
    if params:
        body["params"] = params
    if args.ttl is not None:
        body["ttl"] = _duration("--ttl", args.ttl)
    labels = _labels(args.label)
    if labels:
        body["labels"] = labels
    wait = _duration("--wait", args.wait) if args.wait is not None else None
    fault = _object(client.request("POST", "/api/v1/faults", body))
    if wait is not None:
        fault = await_verdict(client, fault, wait)
    if args.json:
        out(_json(fault))
    else:
        ttl = f" · ttl {fault['ttl']:g} s" if isinstance(fault.get("ttl"), int | float) else ""
        out(f"fault {fault['id']} injected: {fault['action']} on {_targets(fault)}{ttl}")
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
        fault = _object(client.request("GET", path, timeout=poll + client.timeout))
    return dict(fault)


def _reverted(fault: Answer) -> str:
    return f"fault {fault['id']} reverted: {fault['action']} on {_targets(fault)} ({fault.get('outcome', '?')})"


def _faults(client: Client, args: argparse.Namespace, out: Out, err: Out) -> int:
    query = [("active", "true")] if args.active else []
    query += selector(_labels(args.label), args.action) + [("state", s) for s in args.state]
    answer = client.request("GET", "/api/v1/faults" + (f"?{urllib.parse.urlencode(query)}" if query else ""))
    if args.json:
        out(_json(answer))
        return EXIT_OK
    faults = _objects(_object(answer)["faults"])
    if not faults:
        out("no active faults" if args.active else "no faults")
        return EXIT_OK
    rows = [
        (
            str(f["id"]),
            _text(f["action"]),
            _targets(f),
            _text(f["outcome"]),
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
        answer = _object(client.request("DELETE", f"/api/v1/faults?{urllib.parse.urlencode(picked)}"))
        for fault in _objects(answer["faults"]):
            out(_reverted(fault))
        out(f"{len(_array(answer['reverted']))} fault(s) reverted")
        return EXIT_OK
    try:
        fault_id = int(args.id)
    except ValueError:
        raise ClientError(EXIT_USAGE, f"ID: not a fault id: {args.id!r}") from None
    out(_reverted(_object(client.request("DELETE", f"/api/v1/faults/{fault_id}"))))
    return EXIT_OK


def _abort(client: Client, args: argparse.Namespace, out: Out, err: Out) -> int:
    answer = _object(client.request("POST", "/api/v1/lever", {"reason": args.reason} if args.reason else {}))
    out(f"lever pulled ({answer['lever']}): {answer['reverted']} fault(s) reverted; new faults are refused")
    return EXIT_OK


def _release(client: Client, args: argparse.Namespace, out: Out, err: Out) -> int:
    client.request("DELETE", "/api/v1/lever")
    out("lever released: faults may be injected again")
    return EXIT_OK


def _survival(client: Client, args: argparse.Namespace, out: Out, err: Out) -> int:
    if args.verb == "stop":
        out(_stopped("survival", _object(client.request("DELETE", "/api/v1/survival"))))
        return EXIT_OK
    body: dict[str, object] = {}
    for flag, text in (("--interval", args.interval), ("--duration", args.duration)):
        if _duration(flag, text) <= 0:
            raise ClientError(EXIT_USAGE, f"{flag}: must be > 0, got {text!r}")
        body[flag[2:]] = text.strip()  # as typed: the API takes "10s" and parses it with the same rules
    if args.actions is not None:
        actions = [a.strip() for a in args.actions.split(",") if a.strip()]
        if not actions:
            raise ClientError(EXIT_USAGE, f"--actions: no action named in {args.actions!r}")
        body["actions"] = actions
    if args.overlap:
        body["overlap"] = True
    status: Answer = _object(client.request("POST", "/api/v1/survival", body))
    live = _LiveLine(out, sys.stdout if sys.stdout.isatty() else None)
    watch = _FaultWatch(client, live.note)
    ours = False  # stopped by this client (Ctrl-C): the run ended as asked

    def show(status: Answer) -> None:
        watch.update(status)
        live.show(status)

    try:
        show(status)
        status = _follow(client, "/api/v1/survival", status, show)
    except KeyboardInterrupt:
        live.end()
        out("interrupted: stopping survival")
        status = _object(client.request("DELETE", "/api/v1/survival"))
        ours = True
    finally:
        live.end()
    watch.update(status)
    watch.end()
    out(f"survival {status['state']}: {_progress(status)}" + (f" · {status['reason']}" if status.get("reason") else ""))
    return _plan_exit(status, ours, err)


def _inspect(client: Client, args: argparse.Namespace, out: Out, err: Out) -> int:
    report = client.request("GET", "/api/v1/report")
    if args.json:
        out(_json(report))
        return EXIT_OK
    for line in _inspect_lines(_report(report)):
        out(line)
    return EXIT_OK


def _stopped(kind: PlanKind, status: Answer) -> str:
    """The answer to a stop: the plan's state, progress and reason, and the faults reverted with it."""
    name = f" {status['name']}" if kind == "scenario" and status.get("name") else ""
    reason = f" · {status['reason']}" if status.get("reason") else ""
    log = _array(status.get("log") or [])
    last = log[-1] if log and isinstance(log[-1], dict) else {}
    reverted = last.get("reverted") if last.get("action") == "stop" else None
    faults = f" · reverted fault(s) {', '.join(map(str, _array(reverted)))}" if reverted else ""
    return f"{kind}{name} {status['state']}: {_progress(status)}{reason}{faults}"


def _scenario(client: Client, args: argparse.Namespace, out: Out, err: Out) -> int:
    if args.scenario_command == "stop":
        out(_stopped("scenario", _object(client.request("DELETE", "/api/v1/scenarios/current"))))
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
    status: Answer = _object(answer)
    name = status.get("name") or given
    out(f"scenario {name} started (speed {speed:g}×)")
    if not args.wait:
        return EXIT_OK
    watch = _FaultWatch(client, out)
    try:
        watch.update(status)
        status = _follow(client, "/api/v1/scenarios/current", status, watch.update)
        watch.update(status)
    except KeyboardInterrupt:
        err(f"chaosd: stopped waiting; scenario {name} still runs (chaosd scenario stop stops it)")
        return _EXIT_INTERRUPTED
    watch.end()
    for e in _array(status.get("expectations") or []):
        out(_expectation(e))
    passed = status.get("passed")
    verdict = "passed" if passed else "FAILED" if passed is False else "no verdict"
    reason = f" · {status['reason']}" if status.get("reason") and status["state"] != "finished" else ""
    out(f"scenario {name} {status['state']}: {verdict} · {_progress(status)}{reason}")
    if status["state"] != "finished":
        return _plan_exit(status, False, err)
    return EXIT_EXPECTATION if passed is False else EXIT_OK


_Handler = Callable[[Client, argparse.Namespace, Out, Out], int]
_HANDLERS: dict[str, _Handler] = {
    "inject": _inject,
    "faults": _faults,
    "revert": _revert,
    "abort": _abort,
    "release": _release,
    "survival": _survival,
    "inspect": _inspect,
    "scenario": _scenario,
}


def _pause() -> None:
    time.sleep(_POLL_S)


def _follow(client: Client, path: str, status: Answer, show: Callable[[Answer], None]) -> Answer:
    """Poll ``path`` until the plan has ended (any end state); ``idle`` means the daemon no longer knows the run
    we started, and a state it does not document is a server error, never a reason to poll forever."""
    while (state := status.get("state")) not in _ENDED:
        if state == "idle":
            raise ClientError(EXIT_SERVER, f"chaosd at {client.base} reports nothing running ({path} is idle)")
        if state != _RUNNING:
            raise ClientError(EXIT_SERVER, f"chaosd at {client.base} answered an unknown plan state {state!r}")
        _pause()
        status = _object(client.request("GET", path))
        show(status)
    return status


def _plan_exit(status: Answer, ours: bool, err: Out) -> int:
    """The exit code of a plan that has ended: 0 if it reached its end (or this client stopped it), else 7."""
    state = status.get("state")
    if state == "finished" or (state == "stopped" and ours):
        return EXIT_OK
    why = status.get("reason") or state
    err(f"chaosd: {status.get('kind') or 'the run'} {state} before its end: {why}")
    return EXIT_PLAN_FAILED


class _FaultWatch:
    """One line per fault a plan injected and per verdict, as they happen: the fault ids come from the plan's
    ``log``, each verdict from its fault's record (``GET /api/v1/faults/{id}``) until it has one."""

    def __init__(self, client: Client, out: Out) -> None:
        self._client = client
        self._out = out
        self._seen: set[tuple[object, ...]] = set()
        self._open: dict[int, Answer] = {}

    def update(self, status: Answer) -> None:
        start = _float(status.get("started_at") or 0.0)
        for entry in _array(status.get("log") or []):
            if not isinstance(entry, dict):
                continue
            fault_id = entry.get("fault")
            at = f"t={seconds(max(0.0, float(entry.get('at') or 0.0) - start))}"
            if isinstance(fault_id, int):
                if ("fault", fault_id) in self._seen:
                    continue
                self._seen.add(("fault", fault_id))
                self._open[fault_id] = entry
                target = _targets(entry) if entry.get("targets") or entry.get("target") else "?"
                self._out(f"{at}  fault {fault_id} injected: {entry.get('action', '?')} on {target}")
            elif entry.get("action") == "skip" and ("skip", entry.get("at")) not in self._seen:
                self._seen.add(("skip", entry.get("at")))
                self._out(f"{at}  {entry.get('reason') or 'skipped'}")
            elif entry.get("error") and ("error", entry.get("at"), entry.get("action")) not in self._seen:
                self._seen.add(("error", entry.get("at"), entry.get("action")))
                self._out(f"{at}  {entry.get('action', '?')} not injected: {entry['error']}")
        for fault_id in list(self._open):
            try:
                fault = _object(self._client.request("GET", f"/api/v1/faults/{fault_id}"))
            except ClientError as exc:
                if exc.code != EXIT_REJECTED:  # unreachable, a server error: the run's own poll says so
                    raise
                del self._open[fault_id]  # aged out of the daemon's memory
                self._out(f"fault {fault_id}: no longer listed by the daemon; no verdict seen")
                continue
            if fault.get("outcome") in TERMINAL:
                del self._open[fault_id]
                self._out(_verdict(fault))

    def end(self) -> None:
        for fault_id, entry in sorted(self._open.items()):
            self._out(f"fault {fault_id} ({entry.get('action', '?')}): no verdict yet when the run ended")
        self._open.clear()


def _verdict(fault: Answer) -> str:
    outcome = fault["outcome"]
    what = f"fault {fault['id']} {outcome}"
    action = fault.get("action", "?")
    if outcome == "recovered":
        took = fault.get("recovery_s")
        how = f" in {seconds(float(took))}" if isinstance(took, int | float) else " (with its incident)"
        return f"{what}{how} ({action}){host_stall(fault.get('stalled_s'))}"
    return f"{what} ({action}): {_VERDICT_HINTS.get(str(outcome), str(outcome))}"


class _LiveLine:
    """One progress line: redrawn in place on a terminal, else a new line every 10 s of the run's elapsed time."""

    def __init__(self, out: Out, tty: TextIO | None) -> None:
        self._out = out
        self._tty = tty
        self._width = 0
        self._last: float | None = None

    def show(self, status: Answer) -> None:
        line = f"survival {status.get('state', '?')}: {_progress(status)}"
        if self._tty is not None:
            self._tty.write("\r" + line.ljust(self._width))
            self._tty.flush()
            self._width = len(line)
            return
        elapsed = _float(status.get("elapsed_s") or 0.0)
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


def _inspect_lines(report: ReportView) -> list[str]:
    """The inspect summary: score, recovery as the score judges it, fault counts, mean and p95 recovery per
    action, count causes with their shares and time causes apart, what to fix."""
    faults = report["faults"]
    summary = report["faults_summary"]
    score = report.get("score")
    injected = summary.get("injected", len(faults))
    recovered = summary.get("recovered", sum(1 for f in faults if f.get("outcome") == "recovered"))
    failed = summary.get("failed", sum(1 for f in faults if f.get("outcome") == "failed"))
    pending = summary.get("pending", sum(1 for f in faults if f.get("outcome") not in TERMINAL))
    rate = judged_line(summary, faults) if injected else "n/a (no faults injected)"
    lines = [
        f"score      {score['total']:.1f} ({score['grade']})" if score and score.get("total") is not None
        else "score      - (not scored yet)",
        f"recovery   {rate}",
        f"faults     {injected} total · {recovered} recovered · {failed} failed · {pending} pending",
    ]  # fmt: skip
    collapse, admission = report.get("collapse"), report.get("throttle")
    if collapse:
        lines.append(
            f"detector   {collapse['final_state']} now · {collapse.get('alarms', collapse['count'])} alarm(s), "
            f"{collapse['count']} collapsed · {seconds(collapse.get('time_overloaded_s', 0.0))} overloaded, "
            f"{seconds(collapse['time_collapsed_s'])} collapsed"
            + (f", {seconds(failing)} failing" if (failing := collapse.get("time_failing_s", 0.0)) else "")
            + f" · {collapse.get('stalls', 0)} stall(s)"
        )
    if admission:
        policy = admission.get("policy", "aimd" if admission["enabled"] else "none")
        if policy == "capacity":
            detail = f"limit {admission['limit']} waiting · capacity {rate_per_s(admission['capacity_per_s'])} · "
        elif policy == "aimd":
            detail = f"factor {admission['final_factor']:.3f} (lowest {admission['lowest_factor']:.3f}) · "
        else:
            detail = ""
        lines.append(f"admission  {policy} · {detail}refused {admission['refused']}")
    rows = action_rows(faults)
    if rows:
        # The report lists only the newest faults; the counts above are of them all.
        listed = summary.get("faults_listed", len(faults))
        lines.append(
            "recovery time by action" + (f" (the newest {listed} of {injected} faults)" if listed < injected else "")
        )
        lines.extend("  " + r for r in table(("action", "faults", "recovered", "mean", "p95"), rows, "<>>>>"))
    diagnostics = report["diagnostics"]
    causes = cause_rows(diagnostics)
    if causes:
        lines.append("diagnostics by cause")
        lines.extend("  " + r for r in table(("cause", "count", "share"), causes, "<>>"))
    lines.extend("  " + line for line in time_causes(diagnostics))
    todo = fixes(report)
    if todo:
        lines.append("what to fix")
        lines.extend(f"  - {line}" for line in todo)
    return lines


def _json(value: object) -> str:
    return json.dumps(value, indent=2, sort_keys=True)


def _targets(fault: Answer) -> str:
    return ", ".join(str(t) for t in _array(fault.get("targets") or [fault.get("target", "?")]))


def _secs(value: object) -> str:
    return "-" if value is None else f"{_float(value):.2f}"


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


def _progress(status: Answer) -> str:
    """elapsed · actions · score (grade) from a survival or scenario status.

    The score is the plan's own window (``daemon_score`` is the daemon's lifetime, not shown here); it has no
    total ("-") until a task offered in the window has settled.
    """
    actions = status.get("actions")
    count = len(actions) if isinstance(actions, list) else actions if actions is not None else 0
    score = _object(status.get("score") or {})
    shown = f"{score['total']:.1f} ({score['grade']})" if score.get("total") is not None else "-"
    return f"elapsed {_clock(_float(status.get('elapsed_s') or 0.0))} · actions {count} · score {shown}"


def _expectation(e: object) -> str:
    if not isinstance(e, dict):
        return f"  expect     {e}"
    mark = "pass" if e.get("passed") else "FAIL"
    expected = value(e["expected"]) if "expected" in e else ""
    line = f"  expect     {mark}: {e.get('check', '?')} {expected} (measured {value(e.get('measured'))})"
    because = e.get("because")
    return f"{line}: {because}" if because and not e.get("passed") else line
