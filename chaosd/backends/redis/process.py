"""The entry point of a worker or orchestrator process (``chaosd worker``): connect, serve until SIGTERM, SIGINT or
SIGHUP. The daemon's own children die with their spawner (``PR_SET_PDEATHSIG``), and the spawner with the daemon."""

from __future__ import annotations

import asyncio
import ctypes
import json
import os
import signal
import socket
from collections.abc import Callable
from pathlib import Path
from typing import IO

from redis.asyncio import Redis

from chaosd.backends.redis.leader import Replica
from chaosd.backends.redis.worker import RedisWorker
from chaosd.config.settings import Settings, load_settings
from chaosd.core.clock import Clock, LoopClock, new_event_loop
from chaosd.pipeline.tracing import CarriedTracer

__all__ = [
    "EXIT_KILLED",
    "MakeTracer",
    "default_id",
    "die_with_parent",
    "read_settings",
    "serve_process",
    "spawn_from",
]

# A worker process's tracer on its own clock, or None when it exports no traces (the caller's: the exporters).
MakeTracer = Callable[[Clock], CarriedTracer | None]

EXIT_KILLED = 137  # the status a SIGKILLed process reports: the daemon asked this worker to die (kill_agent)

_PARENT_CHECK = 0.5  # seconds between checks that the daemon is still there
_REPLY_TIMEOUT = 2.0  # seconds
_EXIT_GRACE = 2.0  # seconds the process gives its tasks, then the stages' teardown, after SIGTERM (the daemon's is 3)
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def die_with_parent() -> bool:
    """Ask the kernel to SIGKILL this process when the thread that forked it exits (Linux ``prctl``).

    A SIGKILL reaches a SIGSTOPped process too, which a SIGTERM or the orphan check in :func:`_main` cannot:
    a worker paused by ``pause_agent`` when the daemon is killed would be left stopped, holding its tasks.
    False where the call is not available (not Linux).
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def default_id(role: str) -> str:
    """A name unique across hosts for a process started by hand."""
    return f"{role}-{socket.gethostname()}-{os.getpid()}"


def read_settings(config: Path | None, settings_json: Path | None) -> Settings:
    """From a TOML file (``chaosd worker --config``) or the JSON the daemon writes for its own children."""
    if settings_json is not None:
        return load_settings(None, json.loads(settings_json.read_text()), str(settings_json))
    return load_settings(config)


def spawn_from(commands: IO[str], replies: IO[str]) -> tuple[str, str] | None:
    """The daemon's spawner: fork one process per ``ROLE ID LOG`` line, answering with its pid.

    Returns ``(role, id)`` in each child, which goes on to serve as if started as ``chaosd worker --role ROLE
    --id ID`` (its output in LOG), and None in the spawner once the daemon closes its input — or dies: its end
    of the pipe closes with it. Each child is SIGKILLed by the kernel when the spawner exits, stopped or not.
    Everything a worker imports is imported before the first fork, so a child serves within milliseconds.
    """
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the children; the daemon watches their pidfds
    spawner = os.getpid()
    while line := commands.readline():
        role, agent_id, log = line.rstrip("\n").split(" ", 2)
        pid = os.fork()
        if pid == 0:
            if die_with_parent() and os.getppid() != spawner:
                os._exit(0)  # the spawner went before the request was made: nobody would stop this one
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(out, 1)
            os.dup2(out, 2)
            os.close(out)
            os.close(null)
            return role, agent_id
        replies.write(f"{pid}\n")
        replies.flush()
    return None


def _client(settings: Settings) -> Redis:
    # A reply that does not come within a few seconds is a cut link (a partition holds a TCP connection open
    # for minutes): drop the connection and reconnect; the sink is idempotent, so what was sent may be resent.
    timeout = _REPLY_TIMEOUT + settings.backend.poll
    return Redis.from_url(
        settings.backend.url, decode_responses=True, socket_connect_timeout=1.0, socket_timeout=timeout
    )


async def _orphaned(parent: int, clock: LoopClock) -> None:
    """Return once the daemon that started us is gone (we were re-parented)."""
    while os.getppid() == parent:
        await clock.sleep(_PARENT_CHECK)


async def _main(
    settings: Settings,
    role: str,
    agent_id: str,
    parent: int | None,
    stop: asyncio.Event,
    make_tracer: MakeTracer | None,
) -> int:
    clock = LoopClock(asyncio.get_running_loop())
    data, control = _client(settings), _client(settings)
    tracing: CarriedTracer | None = None
    try:
        killed: asyncio.Event | None = None
        if role == "orchestrator":
            runner = Replica(settings, agent_id, data, clock).run()
        else:
            worker = RedisWorker(settings, agent_id, data, control, clock)
            runner, killed = worker.run(), worker.killed
            # The sampled tasks' spans, continuing the producer's trace: the worker exports its own.
            tracing = worker.tracer = make_tracer(clock) if make_tracer is not None else None
        work = asyncio.create_task(runner, name=agent_id)
        waiters: list[asyncio.Task[object]] = [asyncio.create_task(stop.wait(), name="stop")]
        if parent is not None:
            waiters.append(asyncio.create_task(_orphaned(parent, clock), name="parent"))
        if killed is not None:
            # Cancelled at once like a SIGKILL: outcomes not yet at the sink stay pending and come back after
            # their task lease; the non-zero status is for this process's own supervisor (systemd, compose).
            waiters.append(asyncio.create_task(killed.wait(), name="killed"))
        try:
            await asyncio.wait([work, *waiters], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (work, *waiters):
                task.cancel()
            # Bounded: a cancellation lost inside the client library must not keep the process alive.
            await asyncio.wait([work, *waiters], timeout=_EXIT_GRACE)
        error = work.exception() if work.done() and not work.cancelled() else None
        if error is not None:
            raise error
        return EXIT_KILLED if killed is not None and killed.is_set() else 0
    finally:
        if tracing is not None:
            tracing.close(_EXIT_GRACE)  # bounded: a collector that never answers does not hold the exit
        await data.aclose()
        await control.aclose()


def serve_process(
    settings: Settings, role: str, agent_id: str, parent: int | None = None, make_tracer: MakeTracer | None = None
) -> int:
    """Run one worker or orchestrator replica in this process until SIGTERM, SIGINT or SIGHUP (0) or until the
    daemon asks this worker to exit (:data:`EXIT_KILLED`); the exit code. A worker traces with what
    ``make_tracer`` gives."""
    loop = new_event_loop(virtual=False)
    stop = asyncio.Event()
    try:
        for sig in _STOP_SIGNALS:
            loop.add_signal_handler(sig, stop.set)
        return loop.run_until_complete(_main(settings, role, agent_id, parent, stop, make_tracer))
    finally:
        for task in asyncio.all_tasks(loop):
            task.cancel()  # whatever outlived the grace period goes with the loop
        loop.close()
