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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from chaosd.api import build_app
from chaosd.api.keys import HTTP_STATS, LIMITS, REGISTRY, REPORT, STORAGE
from chaosd.api.server import FrontDoor
from chaosd.cli.exits import EXIT_REPORT_NOT_WRITTEN
from chaosd.cli.logs import configure_logging
from chaosd.config.settings import Settings
from chaosd.core.clock import LoopClock, new_event_loop, unix_time, wall_time
from chaosd.core.errors import ChaosdError, ConfigError
from chaosd.core.humanize import shown
from chaosd.daemon.control import Controller
from chaosd.daemon.lifecycle import LiveRun
from chaosd.daemon.storage import unwritable
from chaosd.experiment.report import render_summary
from chaosd.experiment.runner import Experiment
from chaosd.exporters.tracing import Tracing, otlp_exporter_from_env
from chaosd.telemetry.engine import SHED
from chaosd.telemetry.snapshot import Snapshot
from chaosd.views import DetectorStateName
from chaosd.views.wire import is_loopback

__all__ = ["Daemon", "banner", "check_bind", "serve"]

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


@dataclass(frozen=True, slots=True)
class StatusCounts:
    """The ledger's running counts when a status line is printed: the next line's rates are the differences."""

    t: float
    offered: int
    done: int
    good: int
    shed: int

    @classmethod
    def read(cls, exp: Experiment, t: float) -> StatusCounts:
        ledger = exp.pipeline.ledger
        total = ledger.total
        shed = sum(total.rejected_by.get(reason, 0) for reason in SHED)
        return cls(t, total.offered, total.completed + total.failed, ledger.good, shed)


def status_line(
    snap: Snapshot, state: DetectorStateName, factor: float, now: StatusCounts, before: StatusCounts
) -> str:
    """λ, done, good and shed are averages since the previous line (``before``), from the ledger's counts, so over
    a run they add up to its totals; capacity, queue, p95 and utilisation are the telemetry window's, as of now."""
    dt = now.t - before.t or 1e-12

    def rate(count: int, previous: int) -> float:
        return (count - previous) / dt

    return (
        f"t={snap.t:8.1f}s λ={rate(now.offered, before.offered):7.1f}/s capacity={snap.capacity_rate:7.1f}/s "
        f"done={rate(now.done, before.done):7.1f}/s good={rate(now.good, before.good):7.1f}/s "
        f"shed={rate(now.shed, before.shed):6.1f}/s "
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


class _CannotStart(Exception):
    """A startup step that failed in a way the user can fix: the one line that says so (exit 2)."""


class Daemon:
    """One run of the daemon. :meth:`run` calls, in order:

    1. :meth:`capture_signals`: from now on SIGINT, SIGTERM and SIGHUP start the graceful stop;
    2. :meth:`startup`: check the report path, bind the port, set the runner up (its cleanup contexts open
       storage, the event broker, the pipeline), start accepting. Each step pushes its undo right after it
       succeeded, so a step that fails undoes, newest first, exactly what started before it (exit 2);
    3. :meth:`serve`: say where to look, then wait for the stop;
    4. :meth:`shutdown`: the undos, newest first: plans stop and faults revert (streams still open), the port
       stops accepting, the runner's cleanup ends the streams, stops the pipeline, writes the report, closes
       storage;
    5. on every way out, a forced one too (:meth:`_finish`): release the signals, flush storage and the spans.

    A forced exit (a second signal) cancels :meth:`run` wherever it is: the undos not yet run are abandoned.
    """

    def __init__(self, settings: Settings, out: Callable[[str], None], source: str) -> None:
        """Builds the parts on the running loop; nothing listens, runs or writes yet."""
        self.settings = settings
        self.out = out
        self.source = source
        self.clock = LoopClock(asyncio.get_running_loop())
        self.stop = asyncio.Event()
        self.experiment = Experiment(settings, self.clock, warmup=0.0, scenario=None, virtual=False)
        self.controller = Controller(self.experiment)
        self.live = LiveRun(settings, self.controller, uuid.uuid4().hex[:12])
        self.tracing = Tracing(
            self.clock, unix_time() - self.clock.now(), settings.tracing.sample_every, otlp_exporter_from_env()
        )
        self.tracing.attach(self.experiment)
        if self.tracing.enabled:
            out(f"chaosd: tracing to OTLP, one task in {self.tracing.every} sampled, every fault traced")
        self.app = build_app(settings, self.live, self.tracing)
        self.app[REGISTRY].follow(self.experiment.telemetry)  # /metrics serves the last tick's render
        fds = _raise_fd_limit(settings.api.max_connections + 256)
        if fds < settings.api.max_connections + 64:
            log.warning(
                "open-file limit %d is below api.max_connections %d: raise it (ulimit -n)",
                fds,
                settings.api.max_connections,
            )
        self.runner = web.AppRunner(
            self.app, handle_signals=False, access_log=None, shutdown_timeout=settings.daemon.shutdown_grace
        )
        self.door = FrontDoor(self.runner, self.app[LIMITS], self.app[HTTP_STATS])
        self.addresses: list[tuple[str, int]] = []
        self.reverted: int | None = None  # None until the active faults have been reverted
        self._signals: _Stop | None = None
        self._undo: list[Callable[[], Awaitable[None]]] = []  # what started, oldest first
        self._next_status = settings.daemon.status_interval
        self._counted = StatusCounts(0.0, 0, 0, 0, 0)  # the counts at the previous status line (none yet: the start)
        self.experiment.telemetry.listen(self._status)

    async def run(self) -> int:
        """The lifecycle in its documented order; the exit code: 0 stopped cleanly, 1 forced or no report,
        2 could not start."""
        self.capture_signals()
        try:
            if not await self.startup():
                return 2
            await self.serve()
            await self.shutdown()
        except asyncio.CancelledError:
            return self._forced()
        finally:
            await self._finish()
        return self._result()

    def capture_signals(self) -> None:
        self._signals = _Stop(self._begin_stop, asyncio.current_task())
        loop = asyncio.get_running_loop()
        for signum in STOP_SIGNALS:
            loop.add_signal_handler(signum, self._signals, signum)

    async def startup(self) -> bool:
        """Start every part in order; False once the reason is printed and what had started is undone."""
        try:
            await self._start()
        except Exception as exc:
            await self._unwind()
            if not isinstance(exc, _CannotStart):
                raise
            self.out(str(exc))
            return False
        return True

    async def _start(self) -> None:
        settings = self.settings
        # A report that cannot be written is found out now, not when a month-long run ends.
        if (problem := unwritable(Path(settings.daemon.report))) is not None:
            raise _CannotStart(
                f"chaosd: cannot write the report to {settings.daemon.report} (daemon.report): {problem}"
            )
        try:  # before anything starts: a busy port leaves no pipeline, no storage, no report
            self.addresses = await self.door.bind(settings.api.host, settings.api.port)
        except OSError as exc:  # a gaierror (no such host) has its own strerror; errno -2 has no text
            why = os.strerror(exc.errno) if exc.errno and exc.errno > 0 else exc.strerror or str(exc)
            where = f"{settings.api.host}:{settings.api.port}"
            raise _CannotStart(f"chaosd: cannot listen on {where} ({self.source}): {why}") from exc
        self._undo.append(self.door.close)  # releases the port
        # Pushed before the setup: aiohttp's cleanup also undoes a setup that failed halfway (the contexts that
        # started, newest first). Storage opens first: an unwritable history stops before the pipeline starts.
        self._undo.append(self.runner.cleanup)
        try:
            await self.runner.setup()
        except ChaosdError as exc:
            raise _CannotStart(f"chaosd: {exc}") from exc
        await self.door.serve()
        self._undo.append(self.door.close)  # stops accepting before the runner's cleanup
        self._undo.append(self._stop_plans)  # while the pipeline runs and streams are open: clients see the reverts

    async def serve(self) -> None:
        """Say where to look, then wait for the first stop signal."""
        settings = self.settings
        for host, port in self.addresses:
            self.out(f"chaosd: listening on {_url(host, port)} (run {self.live.run_id})")
        for line in banner(settings, *self.addresses[0]):
            self.out(line)
        self.out(f"chaosd: pipeline running in real time (offered {settings.load.rate:g} tasks/s); Ctrl-C stops")
        if settings.api.token is None:  # only possible on loopback: check_bind refuses anything else
            self.out(
                "chaosd: warning: no api.token, so anyone who can reach this address may inject and revert faults"
                " (set CHAOSD_API__TOKEN or api.token_file)"
            )
        await self.stop.wait()

    async def shutdown(self) -> None:
        """Undo the startup, newest first (new faults are refused since the signal): plans stop and faults
        revert, the port stops accepting, then the runner's cleanup ends the streams (``on_shutdown``), stops
        the pipeline and writes the report, and closes storage (its cleanup contexts, in reverse)."""
        await self._unwind()

    async def _unwind(self) -> None:
        while self._undo:
            await self._undo.pop()()

    async def _stop_plans(self) -> None:
        self.reverted = await self.controller.shutdown()

    def _begin_stop(self, sig: signal.Signals) -> None:
        self.out(f"chaosd: {sig.name} received, stopping (another signal a second or more later forces the exit)")
        self.controller.refuse_new()
        self.stop.set()

    def _status(self, snap: Snapshot) -> None:
        if snap.t >= self._next_status:
            self._next_status += self.settings.daemon.status_interval
            exp = self.experiment
            now = StatusCounts.read(exp, snap.t)
            line = status_line(snap, exp.detector.state.value, exp.throttle.factor, now, self._counted)
            self._counted = now
            self.out(line + backend_note(exp))

    def _forced(self) -> int:
        forced = self._signals.forced if self._signals is not None else None
        name = forced.name if forced is not None else "a second signal"
        faults = "active faults may not have been reverted"
        if self.reverted is not None:
            faults = f"{self.reverted} active fault(s) reverted"
        written = f"report written to {self.settings.daemon.report}" if self.app[REPORT].report else "no report written"
        self.out(f"chaosd: {name} again: forced exit; {faults}, {written}")
        return 1

    async def _finish(self) -> None:
        """On every way out: the signals released, what storage has queued written, the spans flushed."""
        loop = asyncio.get_running_loop()
        first = self._signals.first if self._signals is not None else None
        for signum in STOP_SIGNALS:
            loop.remove_signal_handler(signum)
            if first is not None:  # stopping: what is left is bounded, and an echo must not kill it
                signal.signal(signum, signal.SIG_IGN)
        grace = self.settings.daemon.shutdown_grace
        if STORAGE in self.app:  # a no-op after a clean cleanup
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.app[STORAGE].close(), grace)
        # Ends open fault spans and flushes the exporter, within what is left of the grace period since the
        # signal: the flush runs on a thread of its own that the exit does not wait for.
        began = first if first is not None else wall_time()
        budget = max(_MIN_FLUSH, began + grace - wall_time())
        if not self.tracing.close(budget):
            self.out(f"chaosd: the span exporter did not finish within {budget:.1f} s; unexported spans dropped")

    def _result(self) -> int:
        report = self.app[REPORT].report
        if report is None:
            self.out("chaosd: the pipeline did not stop cleanly; no report written")
            return 1
        for line in render_summary(report).split("\n"):  # each line escaped by render_summary itself
            self.out(line)
        final = self.live.final
        if final.trouble is not None:
            self.out(final.trouble)
            self.out(f"chaosd: reverted {self.reverted or 0} active fault(s)")
            return EXIT_REPORT_NOT_WRITTEN
        self.out(
            f"chaosd: reverted {self.reverted or 0} active fault(s); report written to {self.settings.daemon.report}"
        )
        return 0


async def _serve(settings: Settings, out: Callable[[str], None], source: str) -> int:
    return await Daemon(settings, out, source).run()


def serve(settings: Settings, out: Callable[[str], None], *, source: str = "api.host, api.port") -> int:
    """Run the daemon on a real-time loop; returns the process exit code. ``source`` names where the listening
    address came from, for the message when it cannot be bound."""
    check_bind(settings)
    configure_logging(settings.log)
    loop = new_event_loop(virtual=False)
    asyncio.set_event_loop(loop)
    try:
        # Every line the daemon prints carries what users sent (reasons, labels, names): escaped, never raw.
        return loop.run_until_complete(_serve(settings, lambda line: out(shown(line)), source))
    finally:
        asyncio.set_event_loop(None)
        loop.close()
