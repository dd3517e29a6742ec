"""What python stages hold while the pipeline serves: a fault proxy in front of each dependency, and the state
their ``setup`` returned.

Started in the stages' order before any agent runs, stopped in the reverse order after every agent stopped
(on a signal too): first each proxy of a stage, then its setup; at stop the handler calls the workers' stop
cancelled end first (within ``CALLS_END_WITHIN``), then each teardown, then its proxies. A failure halfway stops
what already started and names the stage and the step.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager

from chaosd.config.handlers import HandlerError, StageInfo, load_handler
from chaosd.config.settings import DependencyConfig
from chaosd.core.errors import ConfigError
from chaosd.faults.call_tracing import CallTracer
from chaosd.faults.proxy import FaultProxy, parse_upstream
from chaosd.pipeline.stages import StageRunner

__all__ = ["CALLS_END_WITHIN", "stage_lifespan"]

_log = logging.getLogger("chaosd")

# Seconds the handler calls cancelled as the workers stopped get to end (their own ``finally`` blocks) before the
# teardowns run anyway.
CALLS_END_WITHIN = 5.0


def _reason(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:300]


def _load(stage: str, key: str, spec: str) -> Callable[..., Awaitable[object]]:
    try:
        return load_handler(spec)  # the same check as a handler's: an async callable
    except HandlerError as exc:
        raise ConfigError([("configuration", f"stages.{stage}.{key}", str(exc))]) from None


@asynccontextmanager
async def stage_lifespan(
    stages: Sequence[StageRunner],
    dependencies: Mapping[str, DependencyConfig],
    seed: int,
    tracer: CallTracer | None = None,
) -> AsyncIterator[None]:
    """Start every python stage's proxies and setup for the body of the ``async with``; stop them after."""
    async with AsyncExitStack() as stack:
        for stage in stages:
            if stage.kind != "python":
                continue
            await _start_proxies(stack, stage, dependencies, seed, tracer)
            info = StageInfo(stage.name, stage.cfg_params, stage.urls)
            if stage.cfg.setup is not None:
                setup = _load(stage.name, "setup", stage.cfg.setup)
                try:
                    stage.state = await setup(info)
                except Exception as exc:  # user code: whatever it raises stops the start, named
                    raise ConfigError(
                        [("startup", f"stages.{stage.name}.setup", f"{stage.cfg.setup} raised {_reason(exc)}")]
                    ) from exc
            stack.push_async_callback(_teardown, stage, info)
        stack.push_async_callback(_calls_ended, stages)  # the first thing done at the end
        yield


async def _start_proxies(
    stack: AsyncExitStack,
    stage: StageRunner,
    dependencies: Mapping[str, DependencyConfig],
    seed: int,
    tracer: CallTracer | None,
) -> None:
    for name in stage.dependencies:
        config = dependencies[name]
        upstream = parse_upstream(config.upstream.get_secret_value())
        proxy = FaultProxy(
            name,
            upstream,
            rng=random.Random(f"{seed}:dependency:{stage.name}:{name}"),
            connect_timeout=config.connect_timeout,
            read_timeout=config.read_timeout,
        )
        proxy.trace_with(tracer)
        try:
            await proxy.start()
        except OSError as exc:
            problem = f"cannot start the proxy for {name!r}: {_reason(exc)}"
            raise ConfigError([("startup", f"stages.{stage.name}.dependencies", problem)]) from None
        stack.push_async_callback(proxy.stop)
        stage.serve_through(name, proxy)
    stack.callback(stage.stop_serving_through)


async def _calls_ended(stages: Sequence[StageRunner]) -> None:
    """Wait for the handler calls the workers' stop cancelled: a call ends before the state and the proxies it uses
    are torn down, and none is left pending when the loop closes."""
    calls = {call for stage in stages for call in stage.calls}
    if not calls:
        return
    _, running = await asyncio.wait(calls, timeout=CALLS_END_WITHIN)
    for stage in stages:
        if left := sum(1 for call in stage.calls if call in running):
            _log.warning(
                "stage %s: %d handler call(s) still running %g s after they were cancelled; torn down anyway",
                stage.name,
                left,
                CALLS_END_WITHIN,
            )


async def _teardown(stage: StageRunner, info: StageInfo) -> None:
    spec = stage.cfg.teardown
    state, stage.state = stage.state, None
    if spec is None:
        return
    teardown = _load(stage.name, "teardown", spec)
    try:
        await teardown(state, info)
    except Exception as exc:  # one stage's failed teardown must not keep the others from theirs
        _log.warning("stage %s: teardown %s raised %s", stage.name, spec, _reason(exc), exc_info=exc)
