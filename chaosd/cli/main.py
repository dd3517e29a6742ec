"""Command line: ``chaosd [serve] --config FILE``, ``chaosd run [SCENARIO] …``, ``chaosd predict`` and the client
commands.

The only module that exits the process (with its parser, :mod:`chaosd.cli.arguments`): bad input → a message
naming the field, exit code 2; Ctrl-C during ``chaosd run`` → the partial report, exit code 130.
"""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from chaosd.cli.arguments import parser
from chaosd.cli.client import COMMANDS, run_client_command
from chaosd.cli.completion import add_completion_command, completion_script
from chaosd.cli.exits import EXIT_EXPECTATION, EXIT_INTERRUPTED, EXIT_REPORT_NOT_WRITTEN, EXIT_USAGE
from chaosd.core.clock import wall_time
from chaosd.core.errors import ConfigError, FaultError
from chaosd.core.humanize import shown

# The engine (pydantic's config models, the pipeline, numpy; aiohttp for the daemon) is imported by the commands
# that run it: a client command such as `chaosd faults` starts on a quarter of the CPU time without it.
if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from chaosd.batch.replicate import Prepared, RunSpec
    from chaosd.experiment.runner import Experiment
    from chaosd.telemetry.snapshot import Snapshot
    from chaosd.views import ReportView

__all__ = ["main"]


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
    """``chaosd run``: one experiment offline (or ``--replications`` of it), its report written and summed up."""
    from chaosd.batch.replicate import prepare  # noqa: PLC0415
    from chaosd.experiment.plans import evaluate_expectations  # noqa: PLC0415 - the engine, only for the commands that run it
    from chaosd.experiment.report import render_summary, write_report_or_keep  # noqa: PLC0415
    from chaosd.experiment.runner import run_offline  # noqa: PLC0415
    from chaosd.experiment.verdict import verdict_view  # noqa: PLC0415

    spec = _run_spec(args)
    if args.replications is None and (args.jobs is not None or args.cluster is not None):
        return _fail([f"--{'jobs' if args.jobs is not None else 'cluster'}: only with --replications"])
    if args.replications is not None:
        return _replicate(args, spec)
    ready = prepare(spec, realtime=args.realtime, progress=_survival_lines(args))
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
    written, trouble = write_report_or_keep(report, report_path)
    if not args.quiet:
        speed = f" ({report['duration_s'] / wall:.0f}× real time)" if not args.realtime and wall > 0 else ""
        where = f"  report     {written or 'not written'} · {wall:.2f} s wall{speed}"
        _out(render_summary(report, [_layers_line(args, ready), where]))
    if trouble is not None:
        print(shown(trouble), file=sys.stderr, flush=True)
        return EXIT_REPORT_NOT_WRITTEN
    return _run_exit(args, report, report_path)


def _survival_lines(args: argparse.Namespace) -> Callable[[Experiment], None]:
    """What ``chaosd run --survival`` prints as it goes: a line a simulated minute (none with ``--quiet``)."""
    every = max(1, round(60 / args.interval)) if args.interval > 0 else 1

    def progress(exp: Experiment) -> None:
        if args.quiet or len(exp.plan_log) % every:
            return
        live = exp.live_score()
        score = "none yet" if live.total is None else f"{live.total:.1f} ({live.grade})"  # nothing measured
        _out(
            f"  survival   t={exp.pipeline.elapsed():7.1f}s actions={sum(1 for e in exp.plan_log if e.get('ok'))} "
            f"active={len(exp.injector.active())} score={score}"
        )

    return progress


def _run_exit(args: argparse.Namespace, report: ReportView, report_path: Path) -> int:
    """The exit code of ``chaosd run`` once its report is written: 130 interrupted (said on stderr), 3 failed."""
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
    from chaosd.experiment.report import render_summary, write_report_or_keep  # noqa: PLC0415

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
            scored = "none" if score["total"] is None else f"{score['total']:.1f} ({score['grade']})"
            _out(f"  replication {index + 1}/{n} seed {report['seed']}: score {scored}")

    started = wall_time()
    try:
        report = replicate(spec, n, jobs=args.jobs, cluster=args.cluster, on_done=done)
    except KeyboardInterrupt:
        print("chaosd: interrupted; no report written", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    wall = wall_time() - started
    written, trouble = write_report_or_keep(report, report_path)
    if not args.quiet:
        where = f"  report     {written or 'not written'} · {n} runs · {wall:.2f} s wall"
        _out(render_summary(report, [_layers_line(args, ready), where]))
    if trouble is not None:
        print(shown(trouble), file=sys.stderr, flush=True)
        return EXIT_REPORT_NOT_WRITTEN
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
    top = add_completion_command(parser())
    args = top.parse_args(argv)
    try:
        if args.command == "completion":
            _out(completion_script(args.shell, top).rstrip("\n"))
            return 0
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
        if args.command == "predict":
            from chaosd.cli.predict_command import predict_command  # noqa: PLC0415 - the engine's models

            return predict_command(args, _out)
        if args.command == "worker":
            return _worker(args)
        if args.command in COMMANDS:
            return run_client_command(args, _out, lambda line: print(line, file=sys.stderr))
        return _serve(args)
    except ConfigError as exc:
        return _fail(exc.lines())
    except FaultError as exc:
        return _fail([f"--{exc.field}: {exc.message}"])


def _worker(args: argparse.Namespace) -> int:
    """``chaosd worker``: a worker (or orchestrator replica) process of the Redis backend, or the daemon's spawner."""
    from chaosd.backends import require_redis  # noqa: PLC0415

    require_redis()  # before its modules import the missing package: a message naming the extra, exit 2
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


def _serve(args: argparse.Namespace) -> int:
    """``chaosd [serve]``: the daemon in real time, listening where the command line (else the config) says."""
    from chaosd.cli.serve import serve  # noqa: PLC0415 - aiohttp only for the daemon
    from chaosd.config.settings import load_settings  # noqa: PLC0415

    settings = load_settings(args.config)
    listen = {k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
    if listen:  # the command line beats the file and the environment
        settings = settings.model_copy(update={"api": settings.api.model_copy(update=listen)})
    logs = {k: v for k, v in (("level", args.log_level), ("format", args.log_format)) if v is not None}
    if logs:
        settings = settings.model_copy(update={"log": settings.log.model_copy(update=logs)})
    source = ", ".join(f"--{k}" if k in listen else f"api.{k}" for k in ("host", "port"))
    return serve(settings, _out, source=source)


def entrypoint() -> None:
    sys.exit(main())
