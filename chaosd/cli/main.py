"""Command line: ``chaosd [serve] --config FILE``, ``chaosd run [SCENARIO] …`` and the client commands.

The only module that exits the process: bad input → a message naming the field, exit code 2; Ctrl-C during
``chaosd run`` → the partial report, exit code 130.
"""

from __future__ import annotations

import argparse
import difflib
import logging
import os
import re
import shlex
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, cast

from chaosd.cli.client import COMMANDS, add_client_commands, run_client_command
from chaosd.core.clock import wall_time
from chaosd.core.durations import parse_duration
from chaosd.core.errors import ConfigError, FaultError
from chaosd.core.version import __version__

# The engine (pydantic's config models, the pipeline, numpy; aiohttp for the daemon) is imported by the commands
# that run it: a client command such as `chaosd faults` starts on a quarter of the CPU time without it.
if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from chaosd.batch.replicate import Prepared, RunSpec
    from chaosd.experiment.runner import Experiment
    from chaosd.telemetry.snapshot import Snapshot
    from chaosd.views import ReportView

__all__ = ["main"]

EXIT_USAGE = 2
EXIT_EXPECTATION = 3
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a Ctrl-C


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
)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="chaosd",
        usage="chaosd [--config FILE] [--host HOST] [--port PORT]    (the daemon)\n"
        "       chaosd COMMAND [options]                           (chaosd COMMAND --help)",
        description="Run an agent → queue → worker pipeline, break it, watch it heal.",
        epilog_of=_top_epilog,
    )
    parser.add_argument("--version", action="version", version=f"chaosd {__version__}")
    # Shown here so the help says how to start the daemon; main() hands a leading option to `serve`.
    daemon = parser.add_argument_group("the daemon (chaosd [serve] …)")
    for flag, metavar, text in _DAEMON_OPTIONS:
        daemon.add_argument(flag, metavar=metavar, default=argparse.SUPPRESS, dest=f"daemon_{flag[2:]}", help=text)
    sub = parser.add_subparsers(title="commands", dest="command", metavar="COMMAND", prog="chaosd")

    serve = sub.add_parser("serve", help="run the daemon in real time until SIGINT/SIGTERM (default)")
    serve.add_argument("--config", type=Path, metavar="FILE", help=_DAEMON_OPTIONS[0][2])
    serve.add_argument("--host", type=_host, help=_DAEMON_OPTIONS[1][2])
    serve.add_argument("--port", type=_port, help=_DAEMON_OPTIONS[2][2])

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
    post = sub.add_parser(
        "report",
        help="print a run report's summary (did it heal, why, what to fix), or write it as one HTML page",
        description="Print the text summary of a JSON run report; with --html, write its post-mortem as one "
        "self-contained HTML page instead (to --out/-o PATH, default FILE with .html).",
    )
    post.add_argument("file", type=Path, help="a JSON run report (chaosd run --report, or the daemon's)")
    post.add_argument("--html", action="store_true", help="write the HTML post-mortem instead of printing the summary")
    post.add_argument("-o", "--out", type=Path, help="with --html: where to write it (default: FILE with .html)")
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
    worker = sub.add_parser("worker", help="run a worker (or orchestrator replica) process for backend.kind = redis")
    worker.add_argument("--config", type=Path, help="TOML config file (the daemon's: the same [backend] section)")
    worker.add_argument("--settings-json", type=Path, help=argparse.SUPPRESS)  # the daemon's own children
    worker.add_argument("--id", help="agent id (default: ROLE-HOST-PID)")
    worker.add_argument("--role", choices=("worker", "orchestrator"), default="worker")
    worker.add_argument("--parent", type=int, help=argparse.SUPPRESS)  # exit when this process is gone
    worker.add_argument("--spawner", action="store_true", help=argparse.SUPPRESS)  # the daemon's forking parent
    # Its subcommands are built by the same _Parser class; typeshed's action is invariant in the parser type.
    add_client_commands(cast("argparse._SubParsersAction[argparse.ArgumentParser]", sub))
    return parser


def _fail(lines: Sequence[str]) -> int:
    for line in lines:
        print(f"chaosd: error: {line}", file=sys.stderr)
    return EXIT_USAGE


def _out(line: str) -> None:
    print(line, flush=True)


class _ProgressBar:
    """Clock time against the duration, and its speed, as a bar on the terminal; called every telemetry tick.

    Redrawn a few times a wall second at most, and only from the tick: no thread, nothing read from the run
    but the snapshot, so the report stays the same bytes. Runs shorter than ``_DELAY`` never show it.
    """

    _DELAY = 0.5  # wall seconds
    _EVERY = 0.25  # wall seconds between redraws

    def __init__(self, duration: float, *, virtual: bool) -> None:
        self._duration = duration
        self._virtual = virtual
        self._started = wall_time()
        self._due = self._started + self._DELAY
        self._bar: tuple[Progress, TaskID] | None = None

    def __call__(self, snap: Snapshot) -> None:
        now = wall_time()
        if now < self._due:
            return
        self._due = now + self._EVERY
        if self._bar is None:
            self._bar = self._start()
        bar, task = self._bar
        speed = snap.t / (now - self._started)
        shown = f"{speed:,.0f}×" if speed >= 10 else f"{speed:.2f}×"
        bar.update(task, completed=min(snap.t, self._duration), speed=shown, refresh=True)

    def _start(self) -> tuple[Progress, TaskID]:
        # rich only once a bar is due: every other command starts without it.
        from rich.progress import BarColumn, Progress, TextColumn  # noqa: PLC0415

        clock = "simulated" if self._virtual else "real clock"
        bar = Progress(
            BarColumn(bar_width=None),
            TextColumn("{task.percentage:>3.0f}%"),
            TextColumn(f"t={{task.completed:,.0f}} / {{task.total:,.0f}} s {clock}"),
            TextColumn("· {task.fields[speed]} real time"),
            auto_refresh=False,  # no refresh thread: redrawn from the tick
            expand=True,  # the bar takes what the text leaves of the terminal's width
            transient=True,
            redirect_stderr=False,
            get_time=wall_time,
        )
        task = bar.add_task("run", total=self._duration, speed="")
        bar.start()
        return bar, task

    def close(self) -> None:
        if self._bar is not None:
            self._bar[0].stop()


def _run_spec(args: argparse.Namespace) -> RunSpec:
    """The run the command line asks for, as a spec every replication can rebuild."""
    from chaosd.batch.replicate import RunSpec, SurvivalSpec  # noqa: PLC0415

    survival = None
    if args.survival:
        subset = tuple(a.strip() for a in args.actions.split(",") if a.strip()) if args.actions else None
        survival = SurvivalSpec(interval=args.interval, actions=subset, overlap=args.overlap)
    elif args.actions or args.overlap:
        raise ConfigError([(f"--{'actions' if args.actions else 'overlap'}", "", "only with --survival")])
    return RunSpec(
        scenario=args.scenario,
        config=str(args.config) if args.config is not None else None,
        overlay={} if args.seed is None else {"seed": args.seed},
        duration=args.duration,
        warmup=args.warmup,
        survival=survival,
    )


def _warn(ready: Prepared) -> None:
    for warning in ready.warnings:
        print(f"chaosd: warning: {warning}", file=sys.stderr, flush=True)


def _layers_line(args: argparse.Namespace, ready: Prepared) -> str:
    """Where the run's settings came from, strongest first: ``--seed over baseline.yaml (shipped) over my.toml``."""
    flags = [f"--{name}" for name in ("seed", "duration", "warmup") if getattr(args, name) is not None]
    return "  config     " + " over ".join([*([", ".join(flags)] if flags else []), *ready.layers])


def _run(args: argparse.Namespace) -> int:
    from chaosd.batch.replicate import prepare  # noqa: PLC0415
    from chaosd.experiment.plans import evaluate_expectations  # noqa: PLC0415 - the engine, only for the commands that run it
    from chaosd.experiment.report import render_summary, write_report  # noqa: PLC0415
    from chaosd.experiment.runner import run_offline  # noqa: PLC0415
    from chaosd.experiment.verdict import verdict_view  # noqa: PLC0415

    spec = _run_spec(args)
    if args.replications is None and (args.jobs is not None or args.cluster is not None):
        return _fail([f"--{'jobs' if args.jobs is not None else 'cluster'}: only with --replications"])
    if args.replications is not None:
        return _replicate(args, spec)
    every = max(1, round(60 / args.interval)) if args.interval > 0 else 1  # a progress line a simulated minute

    def progress(exp: Experiment) -> None:
        if args.quiet or len(exp.plan_log) % every:
            return
        live = exp.live_score()
        score = "none yet" if live.total is None else f"{live.total:.1f} ({live.grade})"  # nothing measured
        _out(
            f"  survival   t={exp.pipeline.elapsed():7.1f}s actions={sum(1 for e in exp.plan_log if e.get('ok'))} "
            f"active={len(exp.injector.active())} score={score}"
        )

    ready = prepare(spec, realtime=args.realtime, progress=progress)
    _warn(ready)
    scenario = ready.scenario
    report_path = args.report or Path(ready.settings.run.report)
    bar = None if args.quiet or not sys.stdout.isatty() else _ProgressBar(ready.duration, virtual=not args.realtime)
    started = wall_time()
    try:
        report = run_offline(
            ready.settings,
            duration=ready.duration,
            warmup=ready.warmup,
            virtual=not args.realtime,
            scenario=scenario.name if scenario else None,
            plan=ready.plan,
            on_tick=bar,
            stop_on=(signal.SIGINT,),
        )
    except KeyboardInterrupt:  # a second Ctrl-C while the first one's report was being built
        print("chaosd: interrupted again; no report written", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    finally:
        if bar is not None:
            bar.close()
    wall = wall_time() - started
    if scenario is not None and scenario.expect:
        report["expectations"] = evaluate_expectations(scenario.expect, report)
    report["verdict"] = verdict_view(report)
    write_report(report, report_path)
    if not args.quiet:
        speed = f" ({report['duration_s'] / wall:.0f}× real time)" if not args.realtime and wall > 0 else ""
        where = f"  report     {report_path} · {wall:.2f} s wall{speed}"
        _out(render_summary(report, [_layers_line(args, ready), where]))
    if report["interrupted"]:
        clock = "real clock" if args.realtime else "simulated"
        print(
            f"chaosd: interrupted at t={report['duration_s']:.1f} s ({clock}); partial report written to {report_path}",
            file=sys.stderr,
            flush=True,
        )
        return EXIT_INTERRUPTED
    if not report["verdict"]["passed"]:  # a failed expectation, the SLO missed, or failing most of the run
        return EXIT_EXPECTATION
    return 0


def _cluster_refused(args: argparse.Namespace, runs: str) -> int | None:
    """``--cluster`` with ``--jobs`` is refused (exit 2); a cluster address that cannot be one raises ConfigError."""
    if args.cluster is None:
        return None
    if args.jobs is not None:
        return _fail([f"--jobs: not with --cluster (the cluster's workers run {runs})"])
    from chaosd.batch.cluster import check_address  # noqa: PLC0415 - no dask: it checks the text

    check_address(args.cluster)
    return None


def _replicate(args: argparse.Namespace, spec: RunSpec) -> int:
    """``--replications N``: N seeds on local processes (or ``--cluster``); the base seed's report, with the
    ``replications`` block and its expectations judged over every run."""
    from chaosd.batch.replicate import MAX_REPLICATIONS, prepare, replicate  # noqa: PLC0415
    from chaosd.experiment.report import render_summary, write_report  # noqa: PLC0415

    if args.realtime:
        return _fail(["--replications: only in virtual time (without --realtime)"])
    if args.replications > MAX_REPLICATIONS:
        return _fail([f"--replications: at most {MAX_REPLICATIONS} (got {args.replications})"])
    if (refused := _cluster_refused(args, "the replications")) is not None:
        return refused
    ready = prepare(spec)  # every error a replication could meet, before any process starts
    _warn(ready)
    report_path = args.report or Path(ready.settings.run.report)
    n = args.replications

    def done(index: int, report: ReportView) -> None:
        if not args.quiet:
            score = report["score"]
            shown = "none" if score["total"] is None else f"{score['total']:.1f} ({score['grade']})"
            _out(f"  replication {index + 1}/{n} seed {report['seed']}: score {shown}")

    started = wall_time()
    try:
        report = replicate(spec, n, jobs=args.jobs, cluster=args.cluster, on_done=done)
    except KeyboardInterrupt:
        print("chaosd: interrupted; no report written", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    wall = wall_time() - started
    write_report(report, report_path)
    if not args.quiet:
        where = f"  report     {report_path} · {n} runs · {wall:.2f} s wall"
        _out(render_summary(report, [_layers_line(args, ready), where]))
    if not report["verdict"]["passed"]:  # over every run: see replicate()
        return EXIT_EXPECTATION
    return 0


def _sweep_command(args: argparse.Namespace) -> str:
    """The command that gives the same numbers (--jobs, --cluster and --out change where, not what)."""
    parts = ["chaosd", "sweep", *([args.scenario] if args.scenario else [])]
    for flag, value in (("--config", args.config), ("--seed", args.seed)):
        if value is not None:
            parts += [flag, str(value)]
    for flag, seconds in (("--duration", args.duration), ("--warmup", args.warmup)):
        if seconds is not None:
            parts += [flag, f"{seconds:g}"]
    for param in args.param:
        parts += ["--param", param]
    if args.replications != 1:
        parts += ["--replications", str(args.replications)]
    if args.survival:
        parts += [
            "--survival",
            "--interval",
            f"{args.interval:g}",
            *(["--actions", args.actions] if args.actions else []),
        ]
        parts += ["--overlap"] if args.overlap else []
    return shlex.join(parts)


def _sweep(args: argparse.Namespace) -> int:
    """``chaosd sweep``: every point's runs, then the JSON to --out and its chart page next to it."""
    from chaosd.batch.replicate import prepare  # noqa: PLC0415
    from chaosd.batch.sweep.chart import write_html  # noqa: PLC0415
    from chaosd.batch.sweep.params import parse_params  # noqa: PLC0415
    from chaosd.batch.sweep.run import run_sweep  # noqa: PLC0415 - the engine, only for the commands that run it
    from chaosd.batch.sweep.view import render_sweep, write_sweep  # noqa: PLC0415

    out = args.out or Path("sweep.json")
    if out.suffix.lower() in (".html", ".htm"):
        return _fail([f"--out: {out} is where the JSON goes; its chart is written next to it as .html"])
    if (refused := _cluster_refused(args, "the points")) is not None:
        return refused
    spec = _run_spec(args)
    _warn(prepare(spec))  # the scenario, config and timing as given: their errors are theirs, not a --param's
    params = parse_params(args.param)  # every param, then every point's settings, before any run starts
    shown = -1

    def done(finished: int, total: int) -> None:
        nonlocal shown
        tenth = finished * 10 // total
        if not args.quiet and tenth > shown:  # about ten lines, however many runs
            shown = tenth
            _out(f"  sweep      {finished}/{total} runs done")

    try:
        view = run_sweep(
            spec,
            params,
            replications=args.replications,
            jobs=args.jobs,
            cluster=args.cluster,
            command=_sweep_command(args),
            on_done=done,
        )
    except KeyboardInterrupt:
        print("chaosd: interrupted; nothing written", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    write_sweep(view, out)
    page = write_html(view, out.with_suffix(".html"))
    if not args.quiet:
        _out(render_sweep(view))
        _out(f"  wrote      {out} · chart {page}")
    return 0


def _report(args: argparse.Namespace) -> int:
    """``chaosd report FILE``: the text summary; ``--html [-o PATH]``: the HTML post-mortem."""
    from chaosd.arena.postmortem import load_report, write_postmortem  # noqa: PLC0415 - only for this command

    if args.out is not None and not args.html:
        return _fail(["--out: only with --html (the summary is printed)"])
    from chaosd.batch.sweep.view import read_sweep, render_sweep  # noqa: PLC0415 - a sweep file is told by its "sweep" key

    sweep = read_sweep(args.file)
    if sweep is not None:
        if args.html:
            from chaosd.batch.sweep.chart import write_html  # noqa: PLC0415

            _out(f"chaosd: wrote {write_html(sweep, args.out or args.file.with_suffix('.html'))}")
        else:
            _out(render_sweep(sweep))
        return 0
    if args.html:
        _out(f"chaosd: wrote {write_postmortem(args.file, args.out)}")
        return 0
    from chaosd.experiment.report import render_summary  # noqa: PLC0415

    report = load_report(args.file)
    try:
        _out(render_summary(report))
    except (KeyError, TypeError, ValueError) as exc:  # JSON, with a timeline, but not a run report's shape
        return _fail([f"{args.file}: not a run report ({type(exc).__name__}: {exc})"])
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--version")):
        argv.insert(0, "serve")
    args = _parser().parse_args(argv)
    try:
        if args.command == "run":
            try:
                return _run(args)
            except KeyboardInterrupt:  # before the run started, or while the report was being written
                print("chaosd: interrupted", file=sys.stderr, flush=True)
                return EXIT_INTERRUPTED
        if args.command == "sweep":
            return _sweep(args)
        if args.command == "report":
            return _report(args)
        if args.command == "worker":
            from chaosd.backends.redis.process import (  # noqa: PLC0415
                default_id,
                read_settings,
                serve_process,
                spawn_from,
            )
            from chaosd.exporters.tracing import process_tracing  # noqa: PLC0415 - before the spawner's forks

            settings = read_settings(args.config, args.settings_json)
            if settings.backend.kind != "redis":
                source = str(args.config or args.settings_json or "configuration")
                return _fail([f"{source}: backend.kind: chaosd worker needs 'redis' (got {settings.backend.kind!r})"])
            if args.spawner:
                assigned = spawn_from(sys.stdin, sys.stdout)
                if assigned is None:
                    return 0  # the daemon closed our input: it is done
                args.role, args.id = assigned
                args.parent = os.getppid()  # the spawner: when it goes, the daemon has gone
            tracing = process_tracing(settings.tracing.sample_every)
            code = serve_process(settings, args.role, args.id or default_id(args.role), args.parent, tracing)
            if args.spawner:
                # A fork of the spawner: serving is over and its spans are flushed (serve_process closed them).
                # The interpreter's own shutdown would free the heap the fork shares with the spawner, page by
                # page, which took 1-2 s per process; what is left to write is the output.
                logging.shutdown()
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
            return code
        if args.command in COMMANDS:
            return run_client_command(args, _out, lambda line: print(line, file=sys.stderr))
        from chaosd.cli.serve import serve  # noqa: PLC0415 - aiohttp only for the daemon
        from chaosd.config.settings import load_settings  # noqa: PLC0415

        settings = load_settings(args.config)
        listen = {k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
        if listen:  # the command line beats the file and the environment
            settings = settings.model_copy(update={"api": settings.api.model_copy(update=listen)})
        source = ", ".join(f"--{k}" if k in listen else f"api.{k}" for k in ("host", "port"))
        return serve(settings, _out, source=source)
    except ConfigError as exc:
        return _fail(exc.lines())
    except FaultError as exc:
        return _fail([f"--{exc.field}: {exc.message}"])


def entrypoint() -> None:
    sys.exit(main())
