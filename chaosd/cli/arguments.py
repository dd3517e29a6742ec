"""chaosd's command line grammar: every command and option, the types that check their values, and the help
(whose scenario lists are read only when help is shown). A bad value is refused naming its option, exit code 2."""

from __future__ import annotations

import argparse
import difflib
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TypeAlias, cast

from chaosd.cli.client import add_client_commands
from chaosd.cli.exits import EXIT_USAGE
from chaosd.core.durations import parse_duration
from chaosd.core.version import __version__

__all__ = ["LOG_FORMATS", "LOG_LEVELS", "parser"]


def _duration(text: str) -> float:
    try:
        value = parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not isinstance(value, float) or value < 0:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r}")
    return value


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError("must be ≥ 0")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be ≥ 1 (got {value})")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r} (0 to 65535; 0 picks a free one)") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r} (0 to 65535; 0 picks a free one)")
    return value


def _host(text: str) -> str:
    host = text.strip()
    if not host or "/" in host or " " in host:
        raise argparse.ArgumentTypeError(f"not a host name or address: {text!r}")
    return host.removeprefix("[").removesuffix("]")


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Text of several lines (scenario lists, examples) kept as written; a one-line description wrapped."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" in text:
            return super()._fill_text(text, width, indent)
        return argparse.HelpFormatter._fill_text(self, text, width, indent)


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose epilog is built when help is shown: the scenario list reads the scenario files,
    which no command but ``--help`` needs."""

    def __init__(self, *args: Any, epilog_of: Callable[[], str] | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)
        self._epilog_of = epilog_of

    def format_help(self) -> str:
        if self._epilog_of is not None:
            self.epilog = self._epilog_of()
        return super().format_help()

    def error(self, message: str) -> NoReturn:
        """``chaosd: error: --duration: …`` like every other bad input, with the option or command meant."""
        message = message.removeprefix("argument ")
        hint = ""
        if (unknown := re.match(r"unrecognized arguments: (--?[\w-]+)", message)) is not None:
            near = difflib.get_close_matches(unknown[1], _option_strings(self), n=1)
            hint = f"; did you mean {near[0]}?" if near else f" ({self.prog} COMMAND --help lists the options)"
        elif (choice := re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)) is not None:
            near = difflib.get_close_matches(choice[1], re.findall(r"'([^']*)'", choice[2]), n=1)
            hint = f"; did you mean {near[0]!r}?" if near else ""
        self.exit(EXIT_USAGE, f"chaosd: error: {message}{hint}\n")


class _Version(argparse.Action):
    """``chaosd 0.1.0 (compiled)``: the build is looked up only when asked (it imports the hot path's modules)."""

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> NoReturn:
        from chaosd.native import build  # noqa: PLC0415 - the client commands need none of those modules

        print(f"chaosd {__version__} ({build()})")  # on stdout, as argparse's own version action
        parser.exit()


def _option_strings(parser: argparse.ArgumentParser) -> list[str]:
    """Every option of ``parser`` and of its commands: an unknown option is reported by the top-level parser."""
    found = []
    for action in parser._actions:  # argparse has no public walk of its actions
        found += [s for s in action.option_strings if s.startswith("--")]
        if isinstance(action, argparse._SubParsersAction):
            for command in action.choices.values():
                found += _option_strings(command)
    return sorted(set(found))


def _scenario_list(heading: str) -> str:
    from chaosd.experiment.scenario import scenario_summaries  # noqa: PLC0415 - the engine's models, for --help only

    summaries = scenario_summaries()
    width = max((len(name) for name, _ in summaries), default=0) + 2
    lines = [f"  {name:<{width}}{phrase}".rstrip() for name, phrase in summaries] or ["  (none found)"]
    return "\n".join([heading, *lines])


_LAYERS = (
    "settings, later ones winning: built-in defaults, --config FILE, the scenario's config: and load:,\n"
    "CHAOSD_<SECTION>__<KEY> variables, then --seed, --duration and --warmup.\n"
    "durations: 90 (seconds), 250ms, 1.5m, 1m30s, 2h15m (units h, m, s, ms, largest first)."
)


def _top_epilog() -> str:
    return f"""\
`chaosd --config FILE` (or `chaosd serve --config FILE`) starts the daemon: the HTTP API on
api.host:api.port, in real time, until SIGINT or SIGTERM. `chaosd COMMAND --help` lists a command's options.

{_scenario_list("scenarios (chaosd run NAME, chaosd sweep NAME, chaosd scenario run NAME):")}

examples:
  chaosd --config config/chaosd.toml         start the daemon
  chaosd run baseline --duration 1m          a shipped scenario, offline in virtual time
  chaosd report chaosd-report.json           the summary of the report it wrote
  chaosd inject slow_agent --ttl 30s         a fault into the running daemon
"""


def _run_epilog() -> str:
    return f"""\
{_scenario_list("scenarios (a name, or the path of a YAML or JSON scenario file):")}

{_LAYERS}

examples:
  chaosd run baseline --duration 1m --warmup 10s
  chaosd run overload --config my.toml --seed 7 --report out/overload.json
  chaosd run --config config/chaosd.toml --duration 10m    no scenario: the config's own load
  chaosd run --survival --duration 10m --replications 8
"""


def _sweep_epilog() -> str:
    return f"""\
{_scenario_list("scenarios (a name, or the path of a YAML or JSON scenario file):")}

{_LAYERS}
A --param sets its key over all of these.

examples:
  chaosd sweep baseline --param load.rate=100:800:50 --duration 2m
  chaosd sweep overload --param workers.count=2,4,8 --param load.rate=200:600:100 --replications 3
"""


_DAEMON_OPTIONS = (
    ("--config", "FILE", "TOML config file (default: built-in defaults)"),
    ("--host", "HOST", "listen on this address (overrides api.host and CHAOSD_API__HOST)"),
    ("--port", "PORT", "listen on this port, 0 for a free one (overrides api.port and CHAOSD_API__PORT)"),
    ("--log-level", "LEVEL", "debug, info, warning or error: the least severe log record written (log.level; info)"),
    ("--log-format", "FORMAT", "text, or json: one object per line with trace ids (log.format; text)"),
)


# log.level's and log.format's values (chaosd.config.logs), spelt here: a client command never loads the config.
LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("text", "json")


_Commands: TypeAlias = "argparse._SubParsersAction[_Parser]"  # not subscriptable at run time


def parser() -> argparse.ArgumentParser:
    """The whole command line: the daemon's options, the engine's commands and the client commands."""
    top = _Parser(
        prog="chaosd",
        usage="chaosd [--config FILE] [--host HOST] [--port PORT]    (the daemon)\n"
        "       chaosd COMMAND [options]                           (chaosd COMMAND --help)",
        description="Run an agent → queue → worker pipeline, break it, watch it heal.",
        epilog_of=_top_epilog,
    )
    top.add_argument("--version", action=_Version, nargs=0, help="show the version and the build, and exit")
    # Shown here so the help says how to start the daemon; main() hands a leading option to `serve`.
    daemon = top.add_argument_group("the daemon (chaosd [serve] …)")
    for flag, metavar, text in _DAEMON_OPTIONS:
        daemon.add_argument(flag, metavar=metavar, default=argparse.SUPPRESS, dest=f"daemon_{flag[2:]}", help=text)
    sub = top.add_subparsers(title="commands", dest="command", metavar="COMMAND", prog="chaosd")
    _add_serve(sub)
    _add_run(sub)
    _add_report(sub)
    _add_sweep(sub)
    _add_predict(sub)
    _add_worker(sub)
    # Its subcommands are built by the same _Parser class; typeshed's action is invariant in the parser type.
    add_client_commands(cast("argparse._SubParsersAction[argparse.ArgumentParser]", sub))
    return top


def _add_serve(sub: _Commands) -> None:
    serve = sub.add_parser("serve", help="run the daemon in real time until SIGINT/SIGTERM (default)")
    serve.add_argument("--config", type=Path, metavar="FILE", help=_DAEMON_OPTIONS[0][2])
    serve.add_argument("--host", type=_host, help=_DAEMON_OPTIONS[1][2])
    serve.add_argument("--port", type=_port, help=_DAEMON_OPTIONS[2][2])
    serve.add_argument("--log-level", choices=LOG_LEVELS, type=str.lower, help=_DAEMON_OPTIONS[3][2])
    serve.add_argument("--log-format", choices=LOG_FORMATS, type=str.lower, help=_DAEMON_OPTIONS[4][2])


def _add_run(sub: _Commands) -> None:
    run = sub.add_parser(
        "run",
        help="run an experiment offline (virtual time) and write its report",
        description="Run a scenario (or the config's own load) offline, in virtual time unless --realtime; print "
        "its summary and write its JSON report.",
        epilog_of=_run_epilog,
    )
    run.add_argument("scenario", nargs="?", metavar="SCENARIO", help="scenario file, or the name of one (below)")
    run.add_argument("--config", type=Path, metavar="FILE", help="TOML config file, under the scenario's own keys")
    run.add_argument("--seed", type=_seed, help="random seed (overrides config and scenario)")
    run.add_argument(
        "--duration",
        type=_duration,
        metavar="TIME",
        help="clock time to run, e.g. 600, 10m or 1m30s (default: the scenario's, else run.duration)",
    )
    run.add_argument(
        "--warmup",
        type=_duration,
        metavar="TIME",
        help="initial time excluded from the report (default: the "
        "scenario's, else run.warmup, else 10 %% of the duration)",
    )
    run.add_argument("--report", type=Path, metavar="PATH", help="where to write the JSON report (run.report)")
    run.add_argument("--realtime", action="store_true", help="run on the real clock instead of virtual time")
    run.add_argument("--quiet", action="store_true", help="show no progress and print no summary")
    run.add_argument("--survival", action="store_true", help="inject random faults every --interval")
    run.add_argument(
        "--interval", type=_duration, default=10.0, metavar="TIME", help="survival: time between faults (10s)"
    )
    run.add_argument("--actions", help="survival: comma-separated subset of the catalogue (default: every action)")
    run.add_argument(
        "--overlap", action="store_true", help="survival: faults last 2×interval and stack (default: one at a time)"
    )
    run.add_argument(
        "--replications",
        type=_count,
        metavar="N",
        help="run N seeds (the first is --seed's) and report each number's 95 %% CI",
    )
    run.add_argument(
        "--jobs", type=_count, metavar="J", help="replications: processes to run them on (default: the cores)"
    )
    run.add_argument(
        "--cluster", metavar="ADDRESS", help="replications: on this Dask scheduler instead (tcp://HOST:PORT)"
    )


def _add_report(sub: _Commands) -> None:
    post = sub.add_parser(
        "report",
        help="print a run report's summary (did it heal, why, what to fix), or write it as one HTML page",
        description="Print the text summary of a JSON run report; with --html, write its post-mortem as one "
        "self-contained HTML page instead (to --out/-o PATH, default FILE with .html).",
    )
    post.add_argument("file", type=Path, help="a JSON run report (chaosd run --report, or the daemon's)")
    post.add_argument("--html", action="store_true", help="write the HTML post-mortem instead of printing the summary")
    post.add_argument("-o", "--out", type=Path, help="with --html: where to write it (default: FILE with .html)")


def _add_sweep(sub: _Commands) -> None:
    sweep = sub.add_parser(
        "sweep",
        help="run an experiment at every value of one or two config keys; find the capacity knee and collapse onset",
        description="Run the experiment (virtual time) once, or --replications N times, at every point of one or two "
        "--param ranges, and find along the first where goodput stops keeping up (the knee) and where it falls (the "
        "collapse onset). Writes the JSON to --out and its chart next to it (.html).",
        epilog_of=_sweep_epilog,
    )
    sweep.add_argument("scenario", nargs="?", metavar="SCENARIO", help="scenario file, or the name of one (below)")
    sweep.add_argument(
        "--param",
        action="append",
        required=True,
        metavar="KEY=START:STOP:STEP",
        help="a config key and its values: load.rate=100:800:50 (stop included) or workers.count=2,4,8; twice: a grid",
    )
    sweep.add_argument("--config", type=Path, metavar="FILE", help="TOML config file, under the scenario's own keys")
    sweep.add_argument("--seed", type=_seed, help="base seed (overrides config and scenario); every point uses it")
    sweep.add_argument("--duration", type=_duration, metavar="TIME", help="clock time of each run, e.g. 600 or 10m")
    sweep.add_argument(
        "--warmup", type=_duration, metavar="TIME", help="initial time excluded from each run (default 10 %%)"
    )
    sweep.add_argument("--replications", type=_count, default=1, metavar="N", help="seeds per point (default 1)")
    sweep.add_argument("--jobs", type=_count, metavar="J", help="processes to run on (default: the cores)")
    sweep.add_argument("--cluster", metavar="ADDRESS", help="run on this Dask scheduler instead (tcp://HOST:PORT)")
    sweep.add_argument("-o", "--out", type=Path, help="where to write the JSON (default sweep.json; chart: .html)")
    sweep.add_argument("--quiet", action="store_true", help="print no progress and no table")
    sweep.add_argument("--survival", action="store_true", help="inject random faults every --interval in each run")
    sweep.add_argument(
        "--interval", type=_duration, default=10.0, metavar="TIME", help="survival: time between faults (10s)"
    )
    sweep.add_argument("--actions", help="survival: comma-separated subset of the catalogue (default: every action)")
    sweep.add_argument("--overlap", action="store_true", help="survival: faults last 2×interval and stack")


def _predict_epilog() -> str:
    return f"""\
{_scenario_list("scenarios (a name, or the path of a YAML or JSON scenario file):")}

examples:
  chaosd predict my.toml                      a config file
  chaosd predict retry_storm --config my.toml a scenario over a config file
  chaosd predict --json                       the defaults, as JSON
"""


def _add_predict(sub: _Commands) -> None:
    predict = sub.add_parser(
        "predict",
        help="say whether a retry storm, once triggered, holds under a config or scenario, and above which load",
        description="Work out, from the configuration alone (nothing is run), the load above which a retry storm "
        "sustains itself: the capacity over the attempts each caller makes when every attempt times out, provided "
        "the queue can hold more than the callers' timeout of waiting; or why no storm can hold.",
        epilog_of=_predict_epilog,
    )
    predict.add_argument(
        "target", nargs="?", metavar="CONFIG_OR_SCENARIO", help="a TOML config file, or a scenario file or name"
    )
    predict.add_argument("--config", type=Path, metavar="FILE", help="TOML config file, under the scenario's own keys")
    predict.add_argument("--json", action="store_true", help="print the prediction as JSON")


def _add_worker(sub: _Commands) -> None:
    worker = sub.add_parser("worker", help="run a worker (or orchestrator replica) process for backend.kind = redis")
    worker.add_argument("--config", type=Path, help="TOML config file (the daemon's: the same [backend] section)")
    worker.add_argument("--settings-json", type=Path, help=argparse.SUPPRESS)  # the daemon's own children
    worker.add_argument("--id", help="agent id (default: ROLE-HOST-PID)")
    worker.add_argument("--role", choices=("worker", "orchestrator"), default="worker")
    worker.add_argument("--parent", type=int, help=argparse.SUPPRESS)  # exit when this process is gone
    worker.add_argument("--spawner", action="store_true", help=argparse.SUPPRESS)  # the daemon's forking parent
