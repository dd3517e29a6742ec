"""Runtimes behind the pipeline: in memory (the default, virtual time possible) or on Redis Streams."""

from __future__ import annotations

from chaosd.config.settings import Settings
from chaosd.core.clock import Clock
from chaosd.core.errors import ConfigError
from chaosd.events.log import EventLog
from chaosd.pipeline import Pipeline
from chaosd.pipeline.producer import Admission

__all__ = ["make_pipeline"]


def make_pipeline(
    settings: Settings,
    clock: Clock,
    *,
    admission: Admission | None = None,
    measure_from: float = 0.0,
    events: EventLog | None = None,
) -> Pipeline:
    """The runtime ``settings.backend.kind`` names (the pipeline with that backend's parts); Redis needs the
    real clock (its workers are processes)."""
    if settings.backend.kind == "memory":
        return Pipeline(settings, clock, admission=admission, measure_from=measure_from, events=events)
    if getattr(clock, "virtual", False):
        raise ConfigError([("configuration", "backend.kind", "redis runs in real time only (use --realtime)")])
    from chaosd.backends.redis.runtime import redis_backend  # noqa: PLC0415 - redis only when asked for

    return Pipeline(
        settings, clock, admission=admission, measure_from=measure_from, events=events, backend=redis_backend
    )
