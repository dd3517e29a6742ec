"""The daemon: the pipeline in real time with its HTTP control plane, until SIGINT/SIGTERM.

Lifecycle as uvicorn's: capture signals → start (storage, streams, pipeline) → serve → on the first
signal refuse new faults, stop survival and scenario runs, revert the active faults, end the event
streams, stop the pipeline within the grace period, write the final report, flush storage, exit 0.
A second signal forces the exit (storage is still flushed; no report).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import resource
import signal
import uuid
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from chaosd.api import build_app
from chaosd.api.keys import HTTP_STATS, LIMITS, REPORT, STORAGE
from chaosd.api.server import FrontDoor
from chaosd.clock import LoopClock, new_event_loop, unix_time
from chaosd.config import Settings
from chaosd.control import Controller
from chaosd.errors import ChaosdError, ConfigError
from chaosd.exporters.tracing import Tracing, otlp_exporter_from_env
from chaosd.report import render_summary
from chaosd.runner import Experiment
from chaosd.storage import unwritable
from chaosd.telemetry.snapshot import Snapshot
from chaosd.wire import is_loopback

__all__ = ["check_bind", "serve"]

log = logging.getLogger("chaosd")


def status_line(snap: Snapshot, state: str, factor: float) -> str:
    return (
        f"t={snap.t:8.1f}s λ={snap.arrival_rate:7.1f}/s capacity={snap.capacity_rate:7.1f}/s "
        f"done={snap.throughput:7.1f}/s good={snap.goodput:7.1f}/s shed={snap.shed_rate:6.1f}/s "
        f"Q={snap.queue_depth}/{snap.capacity} p95={snap.sojourn_p95 * 1000:.1f}ms util={snap.utilisation:.2f} "
        f"state={state}" + (f" throttle={factor:.2f}" if factor < 1.0 else "")
    )


def check_bind(settings: Settings) -> None:
    """Refuse to listen beyond loopback without a token: anyone could break the pipeline."""
    if not is_loopback(settings.api.host) and settings.api.token is None:
        raise ConfigError(
            [("configuration", "api.token", f"required to bind {settings.api.host!r} (not a loopback address)")]
        )


def _raise_fd_limit(wanted: int) -> int:
    """Lift the soft descriptor limit towards the hard one so ``max_connections`` can be held; returns it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(hard, wanted)
    if soft != resource.RLIM_INFINITY and soft < target:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
    return soft


async def _serve(settings: Settings, out: Callable[[str], None]) -> int:
    loop = asyncio.get_running_loop()
    clock = LoopClock(loop)
    stop = asyncio.Event()
    main = asyncio.current_task()
    experiment = Experiment(settings, clock, warmup=0.0, scenario=None, virtual=False)
    controller = Controller(experiment)
    run_id = uuid.uuid4().hex[:12]
    tracing = Tracing(clock, unix_time() - clock.now(), settings.tracing.sample_every, otlp_exporter_from_env())
    tracing.attach(experiment)
    if tracing.enabled:
        out(f"chaosd: tracing to OTLP, one task in {tracing.every} sampled, every fault traced")
    app = build_app(settings, controller, run_id, tracing)
    fds = _raise_fd_limit(settings.api.max_connections + 256)
    if fds < settings.api.max_connections + 64:
        log.warning(
            "open-file limit %d is below api.max_connections %d: raise it (ulimit -n)",
            fds,
            settings.api.max_connections,
        )
    signals = 0

    def on_signal(signum: int) -> None:
        nonlocal signals
        signals += 1
        if signals == 1:
            out(f"chaosd: {signal.Signals(signum).name} received, stopping (again to force)")
            controller.refuse_new()
            stop.set()
        elif main is not None:
            main.cancel()

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, on_signal, signum)

    interval = settings.daemon.status_interval
    next_status = [interval]

    def on_snapshot(snap: Snapshot) -> None:
        if snap.t >= next_status[0]:
            next_status[0] += interval
            out(status_line(snap, experiment.detector.state.value, experiment.throttle.factor))

    experiment.telemetry.listen(on_snapshot)
    runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=settings.daemon.shutdown_grace)
    door: FrontDoor | None = None
    reverted = 0
    try:
        door = FrontDoor(runner, app[LIMITS], app[HTTP_STATS])
        # A report that cannot be written is found out now, not when a month-long run ends.
        if (problem := unwritable(Path(settings.daemon.report))) is not None:
            out(f"chaosd: cannot write the report to {settings.daemon.report} (daemon.report): {problem}")
            return 2
        try:  # before anything starts: a busy port leaves no pipeline, no storage, no report
            addresses = await door.bind(settings.api.host, settings.api.port)
        except OSError as exc:  # a gaierror (no such host) has its own strerror; errno -2 has no text
            why = os.strerror(exc.errno) if exc.errno and exc.errno > 0 else exc.strerror or str(exc)
            out(f"chaosd: cannot listen on {settings.api.host}:{settings.api.port} (api.host, api.port): {why}")
            return 2
        try:  # storage opens first: an unwritable history stops the daemon before the pipeline starts
            await runner.setup()
        except ChaosdError as exc:
            out(f"chaosd: {exc}")
            await door.close()
            return 2
        await door.serve()
        for host, port in addresses:
            out(f"chaosd: listening on http://{host}:{port} (run {run_id})")
        out(f"chaosd: pipeline running in real time (offered {settings.load.rate:g} tasks/s); Ctrl-C stops")
        if settings.api.token is None:  # only possible on loopback: check_bind refuses anything else
            out(
                "chaosd: warning: no api.token, so anyone who can reach this address may inject and revert faults"
                " (set CHAOSD_API__TOKEN or api.token_file)"
            )
        await stop.wait()
        # The documented order: new faults are already refused; plans stop and faults are reverted
        # while the pipeline still runs and streams are open (so clients see the reverts), then the
        # door closes, streams end, the pipeline stops, the report is written, storage flushes.
        reverted = await controller.shutdown()
        await door.close()
        await runner.cleanup()
    except asyncio.CancelledError:
        out("chaosd: forced exit; active faults may not have been reverted, no report written")
        return 1
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
        if STORAGE in app:  # on every way out, what was queued still lands (a no-op after a clean cleanup)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(app[STORAGE].close(), settings.daemon.shutdown_grace)
        await asyncio.to_thread(tracing.close)  # ends open fault spans, flushes the exporter
    report = app[REPORT]
    if not report:
        out("chaosd: the pipeline did not stop cleanly; no report written")
        return 1
    out(render_summary(report))
    out(f"chaosd: reverted {reverted} active fault(s); report written to {settings.daemon.report}")
    return 0


def serve(settings: Settings, out: Callable[[str], None]) -> int:
    """Run the daemon on a real-time loop; returns the process exit code."""
    check_bind(settings)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    loop = new_event_loop(virtual=False)
    asyncio.set_event_loop(loop)
    try:
        return loop.run_until_complete(_serve(settings, out))
    finally:
        asyncio.set_event_loop(None)
        loop.close()
