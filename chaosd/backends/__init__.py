"""Runtimes behind the pipeline: in memory (the default, virtual time possible) or on Redis Streams."""

from __future__ import annotations

from chaosd.config.settings import Settings
from chaosd.core.clock import Clock
from chaosd.core.errors import ConfigError
from chaosd.events.log import EventLog
from chaosd.pipeline import Pipeline
from chaosd.pipeline.producer import Admission

__all__ = ["make_pipeline", "require_redis"]

_NO_REDIS = "'redis' needs the redis package, which chaosd installs only with it: pip install 'chaosd[redis]'"


def require_redis() -> None:
    """Refuse the Redis backend at once, naming the extra to install, where the redis package is missing (a plain
    ``pip install chaosd`` leaves it out: the in-memory backend needs none of it)."""
    try:
        import redis  # noqa: F401, PLC0415 - only asked for on the Redis backend's path
    except ModuleNotFoundError as exc:
        if exc.name != "redis":
            raise
        raise ConfigError([("configuration", "backend.kind", _NO_REDIS)]) from None


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
    require_redis()
    from chaosd.backends.redis.runtime import redis_backend  # noqa: PLC0415 - redis only when asked for

    return Pipeline(
        settings, clock, admission=admission, measure_from=measure_from, events=events, backend=redis_backend
    )
