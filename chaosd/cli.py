"""Command line: ``chaosd [serve] --config FILE``, ``chaosd run [SCENARIO] …`` and the client commands.

The only module that exits the process: bad input → a message naming the field, exit code 2; Ctrl-C during
``chaosd run`` → the partial report, exit code 130.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from chaosd import __version__
from chaosd.client import COMMANDS, add_client_commands, run_client_command
from chaosd.clock import wall_time
from chaosd.durations import parse_duration
from chaosd.errors import ConfigError, FaultError

# The engine (pydantic's config models, the pipeline, numpy; aiohttp for the daemon) is imported by the commands
# that run it: a client command such as `chaosd faults` starts on a quarter of the CPU time without it.
if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from chaosd.config import Settings
    from chaosd.runner import Experiment
    from chaosd.scenario import Scenario
    from chaosd.telemetry.snapshot import Snapshot

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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="chaosd",
        description="Run an agent → queue → worker pipeline, break it, watch it heal.",
    )
    parser.add_argument("--version", action="version", version=f"chaosd {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    serve = sub.add_parser("serve", help="run the daemon in real time until SIGINT/SIGTERM (default)")
    serve.add_argument("--config", type=Path, help="TOML config file (default: built-in defaults)")
    serve.add_argument("--host", type=_host, help="listen on this address (overrides api.host and CHAOSD_API__HOST)")
    serve.add_argument(
        "--port", type=_port, help="listen on this port, 0 for a free one (overrides api.port and CHAOSD_API__PORT)"
    )

    run = sub.add_parser("run", help="run an experiment offline (virtual time) and write its report")
    run.add_argument("scenario", nargs="?", help="scenario file, or the name of a shipped one")
    run.add_argument("--config", type=Path, help="TOML config file")
    run.add_argument("--seed", type=_seed, help="random seed (overrides config and scenario)")
    run.add_argument("--duration", type=_duration, help="clock time to run, e.g. 600 or 10m")
    run.add_argument("--warmup", type=_duration, help="initial time excluded from the report (default 10 %%)")
    run.add_argument("--report", type=Path, help="where to write the JSON report")
    run.add_argument("--realtime", action="store_true", help="run on the real clock instead of virtual time")
    run.add_argument("--quiet", action="store_true", help="show no progress and print no summary")
    run.add_argument("--survival", action="store_true", help="inject random faults every --interval")
    run.add_argument("--interval", type=_duration, default=10.0, help="survival: seconds between faults (10)")
    run.add_argument("--actions", help="survival: comma-separated subset of the catalogue (default: every action)")
    run.add_argument(
        "--overlap", action="store_true", help="survival: faults last 2×interval and stack (default: one at a time)"
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
    worker = sub.add_parser("worker", help="run a worker (or orchestrator replica) process for backend.kind = redis")
    worker.add_argument("--config", type=Path, help="TOML config file (the daemon's: the same [backend] section)")
    worker.add_argument("--settings-json", type=Path, help=argparse.SUPPRESS)  # the daemon's own children
    worker.add_argument("--id", help="agent id (default: ROLE-HOST-PID)")
    worker.add_argument("--role", choices=("worker", "orchestrator"), default="worker")
    worker.add_argument("--parent", type=int, help=argparse.SUPPRESS)  # exit when this process is gone
    worker.add_argument("--spawner", action="store_true", help=argparse.SUPPRESS)  # the daemon's forking parent
    add_client_commands(sub)
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


def _run(args: argparse.Namespace) -> int:
    from chaosd.config import load_settings  # noqa: PLC0415 - the engine, only for the commands that run it
    from chaosd.handlers import refuse_virtual_time  # noqa: PLC0415
    from chaosd.plans import (  # noqa: PLC0415
        SURVIVAL_DEFAULT,
        check_actions,
        check_expectations,
        evaluate_expectations,
        scenario_plan,
        survival_plan,
        survival_timing,
    )
    from chaosd.report import render_summary, write_report  # noqa: PLC0415
    from chaosd.runner import run_offline  # noqa: PLC0415
    from chaosd.scenario import find_scenario, load_scenario, settings_for  # noqa: PLC0415

    scenario: Scenario | None = None
    overlay: dict[str, object] = {}
    if args.seed is not None:
        overlay["seed"] = args.seed
    if args.scenario is not None:
        path = find_scenario(args.scenario)
        scenario = load_scenario(path)
        # The command line's overrides (the seed) go on top, keeping the scenario's (derived) duration.
        settings: Settings = settings_for(scenario, path, args.config, overlay)
        check_actions(scenario.actions, str(path), settings.faults.max_ttl)
        check_expectations(scenario.expect, str(path))  # values too, before anything runs
    else:
        settings = load_settings(args.config, overlay, "command line")
    duration = args.duration or (scenario.duration if scenario else None) or settings.run.duration
    warmup = args.warmup
    if warmup is None and scenario is not None:
        warmup = scenario.warmup
    if warmup is None:
        warmup = settings.run.warmup
    if warmup is None:
        warmup = duration / 10
    if warmup >= duration:
        return _fail([f"--warmup: {warmup:g} s must be shorter than the duration ({duration:g} s)"])
    report_path = args.report or Path(settings.run.report)
    plan = None
    if args.survival:
        subset = tuple(a.strip() for a in args.actions.split(",") if a.strip()) if args.actions else SURVIVAL_DEFAULT
        if args.interval <= 0:
            return _fail([f"--interval: must be > 0 (got {args.interval:g})"])
        ttl, room = survival_timing(
            args.interval,
            default_ttl=settings.faults.default_ttl,
            max_ttl=settings.faults.max_ttl,
            confirm=settings.recovery.confirm,
            overlap=args.overlap,
        )
        every = max(1, round(60 / args.interval))  # a progress line about once a simulated minute

        def progress(exp: Experiment) -> None:
            if args.quiet or len(exp.plan_log) % every:
                return
            live = exp.live_score()
            score = "none yet" if live.total is None else f"{live.total:.1f} ({live.grade})"  # nothing measured
            _out(
                f"  survival   t={exp.pipeline.elapsed():7.1f}s actions={sum(1 for e in exp.plan_log if e.get('ok'))} "
                f"active={len(exp.injector.active())} score={score}"
            )

        plan = survival_plan(
            args.interval, subset, settings.seed, ttl=ttl, room=room, last_at=duration - ttl, progress=progress
        )
    elif args.actions or args.overlap:
        return _fail([f"--{'actions' if args.actions else 'overlap'}: only with --survival"])
    elif scenario is not None and scenario.actions:
        plan = scenario_plan(scenario.actions)
    if not args.realtime:  # a user's stage handler waits on the real clock: refused before anything starts
        refuse_virtual_time(settings.stages, str(args.config or (path if scenario is not None else "configuration")))
    if not args.realtime and settings.backend.kind == "redis":  # its workers are processes, on the real clock
        source = str(args.config or (path if scenario is not None else "configuration"))
        return _fail([f"{source}: backend.kind: 'redis' runs real processes in real time: use `chaosd run --realtime`"])
    bar = None if args.quiet or not sys.stdout.isatty() else _ProgressBar(duration, virtual=not args.realtime)
    started = wall_time()
    try:
        report = run_offline(
            settings,
            duration=duration,
            warmup=warmup,
            virtual=not args.realtime,
            scenario=scenario.name if scenario else None,
            plan=plan,
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
    write_report(report, report_path)
    if not args.quiet:
        _out(render_summary(report))
        speed = f" ({report['duration_s'] / wall:.0f}× real time)" if not args.realtime and wall > 0 else ""
        _out(f"  report     {report_path} · {wall:.2f} s wall{speed}")
    if report["interrupted"]:
        clock = "real clock" if args.realtime else "simulated"
        print(
            f"chaosd: interrupted at t={report['duration_s']:.1f} s ({clock}); partial report written to {report_path}",
            file=sys.stderr,
            flush=True,
        )
        return EXIT_INTERRUPTED
    if any(not e["passed"] for e in report.get("expectations", [])):
        return EXIT_EXPECTATION
    return 0


def _report(args: argparse.Namespace) -> int:
    """``chaosd report FILE``: the text summary; ``--html [-o PATH]``: the HTML post-mortem."""
    from chaosd.arena.postmortem import load_report, write_postmortem  # noqa: PLC0415 - only for this command

    if args.out is not None and not args.html:
        return _fail(["--out: only with --html (the summary is printed)"])
    if args.html:
        _out(f"chaosd: wrote {write_postmortem(args.file, args.out)}")
        return 0
    from chaosd.report import render_summary  # noqa: PLC0415

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
        if args.command == "report":
            return _report(args)
        if args.command == "worker":
            from chaosd.backends.redis_process import (  # noqa: PLC0415
                default_id,
                read_settings,
                serve_process,
                spawn_from,
            )

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
            return serve_process(settings, args.role, args.id or default_id(args.role), args.parent)
        if args.command in COMMANDS:
            return run_client_command(args, _out, lambda line: print(line, file=sys.stderr))
        from chaosd.config import load_settings  # noqa: PLC0415
        from chaosd.daemon import serve  # noqa: PLC0415 - aiohttp only for the daemon

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
