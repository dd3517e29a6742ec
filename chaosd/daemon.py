"""The daemon: the pipeline in real time with its HTTP control plane, until SIGINT/SIGTERM/SIGHUP.

Lifecycle as uvicorn's: capture signals → start (storage, streams, pipeline) → serve → on the first
signal refuse new faults, stop survival and scenario runs, revert the active faults, end the event
streams, stop the pipeline within the grace period, write the final report, flush storage, exit 0.
SIGHUP (a closed terminal, a supervisor's hangup) is a stop like SIGTERM, not a reload. A second signal
within a second of the first is the same request delivered twice (``timeout``, wrappers that signal the
process and then its group) and changes nothing; a later one forces the exit (exit 1; storage is still
flushed; the message says whether the faults were reverted and the report written by then). The span
exporter gets what is left of ``daemon.shutdown_grace`` after the pipeline stopped: a collector that never
answers cannot hold the exit.
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
from chaosd.clock import LoopClock, new_event_loop, unix_time, wall_time
from chaosd.config import Settings
from chaosd.control import Controller
from chaosd.errors import ChaosdError, ConfigError
from chaosd.exporters.tracing import Tracing, otlp_exporter_from_env
from chaosd.report import render_summary
from chaosd.runner import Experiment
from chaosd.storage import unwritable
from chaosd.telemetry.snapshot import Snapshot
from chaosd.wire import is_loopback

__all__ = ["banner", "check_bind", "serve"]

log = logging.getLogger("chaosd")

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_ECHO = 1.0  # wall seconds: a second signal sooner than this is the first one delivered twice (as `chaosd run`)
_MIN_FLUSH = 0.25  # seconds the span exporter gets even when the pipeline took the whole grace period


class _Stop:
    """The stop signals: the first starts the graceful stop, an echo within ``_ECHO`` is ignored, a later one
    forces the exit by cancelling the daemon's main task."""

    def __init__(self, begin: Callable[[signal.Signals], None], main: asyncio.Task[int] | None) -> None:
        self._begin = begin
        self._main = main
        self.first: float | None = None  # wall time of the first signal
        self.forced: signal.Signals | None = None

    def __call__(self, signum: int) -> None:
        sig = signal.Signals(signum)
        now = wall_time()
        if self.first is None:
            self.first = now
            self._begin(sig)
        elif now - self.first >= _ECHO and self.forced is None and self._main is not None:
            self.forced = sig
            self._main.cancel()


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


_WILDCARDS = {"0.0.0.0": "127.0.0.1", "::": "::1"}  # every address: shown as the one that works on this machine


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def banner(settings: Settings, host: str, port: int) -> list[str]:
    """Where to look once the daemon listens: the Arena, /metrics, the OpenAPI document, and a first command.

    A wildcard bind is shown as loopback, the address that works on this machine.
    """
    base = _url(_WILDCARDS.get(host, host), port)
    command = f"chaosd inject kill_leader --addr {base}"
    if settings.api.token is not None:  # the client reads the same variables as the daemon
        command += "  (with the token in CHAOSD_API__TOKEN, or --token-file FILE)"
    return [
        f"chaosd:   arena    {base}/arena",
        f"chaosd:   metrics  {base}/metrics",
        f"chaosd:   openapi  {base}/api/v1/openapi.json",
        f"chaosd:   try      {command}",
    ]


def backend_note(experiment: Experiment) -> str:
    """What the status line adds while the backend cannot serve (the Redis runtime: unreachable), else ''."""
    health = getattr(experiment.pipeline, "backend_health", None)
    problem = health() if health is not None else None
    return f" {problem}" if problem else ""


def _raise_fd_limit(wanted: int) -> int:
    """Lift the soft descriptor limit towards the hard one so ``max_connections`` can be held; returns it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(hard, wanted)
    if soft != resource.RLIM_INFINITY and soft < target:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
    return soft


async def _serve(settings: Settings, out: Callable[[str], None], source: str) -> int:
    loop = asyncio.get_running_loop()
    clock = LoopClock(loop)
    stop = asyncio.Event()
    main: asyncio.Task[int] | None = asyncio.current_task()
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

    def begin(sig: signal.Signals) -> None:
        out(f"chaosd: {sig.name} received, stopping (another signal a second or more later forces the exit)")
        controller.refuse_new()
        stop.set()

    on_signal = _Stop(begin, main)
    for signum in STOP_SIGNALS:
        loop.add_signal_handler(signum, on_signal, signum)

    interval = settings.daemon.status_interval
    next_status = [interval]

    def on_snapshot(snap: Snapshot) -> None:
        if snap.t >= next_status[0]:
            next_status[0] += interval
            line = status_line(snap, experiment.detector.state.value, experiment.throttle.factor)
            out(line + backend_note(experiment))

    experiment.telemetry.listen(on_snapshot)
    runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=settings.daemon.shutdown_grace)
    door: FrontDoor | None = None
    reverted: int | None = None  # None until the active faults have been reverted
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
            out(f"chaosd: cannot listen on {settings.api.host}:{settings.api.port} ({source}): {why}")
            return 2
        try:  # storage opens first: an unwritable history stops the daemon before the pipeline starts
            await runner.setup()
        except ChaosdError as exc:
            out(f"chaosd: {exc}")
            await door.close()
            return 2
        await door.serve()
        for host, port in addresses:
            out(f"chaosd: listening on {_url(host, port)} (run {run_id})")
        for line in banner(settings, *addresses[0]):
            out(line)
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
        forced = on_signal.forced.name if on_signal.forced is not None else "a second signal"
        faults = "active faults may not have been reverted"
        if reverted is not None:
            faults = f"{reverted} active fault(s) reverted"
        written = f"report written to {settings.daemon.report}" if app[REPORT] else "no report written"
        out(f"chaosd: {forced} again: forced exit; {faults}, {written}")
        return 1
    finally:
        for signum in STOP_SIGNALS:
            loop.remove_signal_handler(signum)
            if on_signal.first is not None:  # stopping: what is left is bounded, and an echo must not kill it
                signal.signal(signum, signal.SIG_IGN)
        if STORAGE in app:  # on every way out, what was queued still lands (a no-op after a clean cleanup)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(app[STORAGE].close(), settings.daemon.shutdown_grace)
        # Ends open fault spans and flushes the exporter, within what is left of the grace period since the
        # signal: the flush runs on a thread of its own that the exit does not wait for.
        began = on_signal.first if on_signal.first is not None else wall_time()
        budget = max(_MIN_FLUSH, began + settings.daemon.shutdown_grace - wall_time())
        if not tracing.close(budget):
            out(f"chaosd: the span exporter did not finish within {budget:.1f} s; unexported spans dropped")
    report = app[REPORT]
    if not report:
        out("chaosd: the pipeline did not stop cleanly; no report written")
        return 1
    out(render_summary(report))
    out(f"chaosd: reverted {reverted or 0} active fault(s); report written to {settings.daemon.report}")
    return 0


def serve(settings: Settings, out: Callable[[str], None], *, source: str = "api.host, api.port") -> int:
    """Run the daemon on a real-time loop; returns the process exit code. ``source`` names where the listening
    address came from, for the message when it cannot be bound."""
    check_bind(settings)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    loop = new_event_loop(virtual=False)
    asyncio.set_event_loop(loop)
    try:
        return loop.run_until_complete(_serve(settings, out, source))
    finally:
        asyncio.set_event_loop(None)
        loop.close()
