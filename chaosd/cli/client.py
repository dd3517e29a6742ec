"""The client commands (inject, faults, revert, abort, release, survival, inspect, scenario run, clients) for a
running daemon.

Each family lives in its own module (``fault_commands``, ``survival_command``, ``inspect_command``,
``scenario_command``, ``clients_command``) over one HTTP transport (``transport``); this one registers them on
chaosd's parser and runs the one asked for. A client command imports none of the engine: only the standard library,
the duration parser and what the daemon and its clients agree on (:mod:`chaosd.views.wire`).
"""

from __future__ import annotations

import argparse
import os

from chaosd.cli.clients_command import add_clients_command, clients
from chaosd.cli.exits import EXIT_SERVER, EXIT_USAGE
from chaosd.cli.fault_commands import FAULT_COMMANDS, add_fault_commands, await_verdict, selector
from chaosd.cli.inspect_command import add_inspect_command, inspect
from chaosd.cli.scenario_command import add_scenario_command, scenario
from chaosd.cli.survival_command import add_survival_command, survival
from chaosd.cli.transport import (
    ADDRESS_ORDER,
    DEFAULT_ADDR,
    UNREACHABLE_HINT,
    Client,
    ClientError,
    Command,
    Out,
    Subcommands,
    daemon_address,
    environment_token,
    read_token,
)
from chaosd.core.humanize import shown

__all__ = [
    "COMMANDS",
    "Client",
    "ClientError",
    "add_client_commands",
    "await_verdict",
    "daemon_address",
    "environment_token",
    "run_client_command",
    "selector",
]

_HANDLERS: dict[str, Command] = {
    **FAULT_COMMANDS,
    "survival": survival,
    "inspect": inspect,
    "scenario": scenario,
    "clients": clients,
}
COMMANDS = tuple(_HANDLERS)


def add_client_commands(sub: Subcommands) -> None:
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
    add_fault_commands(sub, common)
    add_survival_command(sub, common)
    add_inspect_command(sub, common)
    add_scenario_command(sub, common)
    add_clients_command(sub, common)


def _escaped(out: Out) -> Out:
    return lambda line: out(shown(line))


def run_client_command(args: argparse.Namespace, out: Out, err: Out) -> int:
    """Run one client subcommand; returns the exit code (messages go to ``out`` and ``err``, nothing exits)."""
    handler = _HANDLERS.get(args.command)
    # What the daemon answers carries what users sent (reasons, labels, names): printed escaped, one line a call.
    # JSON is printed as it came, its strings escaped by JSON itself.
    if not getattr(args, "json", False):
        out = _escaped(out)
    err = _escaped(err)
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
            token = read_token(token_file, "--token-file")
        elif token is None:
            token = environment_token(os.environ)
        return handler(Client(addr, token, source=source, hint=UNREACHABLE_HINT), args, out, err)
    except ClientError as exc:
        err(f"chaosd: error: {exc.message}")
        return exc.code
    except (KeyError, TypeError, AttributeError) as exc:  # the daemon answered, but not in docs/api.md's shape
        err(f"chaosd: error: unexpected answer from chaosd at {addr}: {type(exc).__name__}: {exc}")
        return EXIT_SERVER
