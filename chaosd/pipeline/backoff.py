"""Exponential backoff with a cap and optional jitter, shared by retries, reconnects and restarts."""

from __future__ import annotations

import random

from chaosd.config.settings import BackoffConfig

__all__ = ["backoff_delay"]


def backoff_delay(cfg: BackoffConfig, attempt: int, rng: random.Random) -> float:
    """Delay before retry number ``attempt`` (1-based): min(max, base·factor^(attempt-1)), jittered."""
    delay = min(cfg.max, cfg.base * cfg.factor ** (attempt - 1))
    if cfg.jitter:
        delay = delay * (1 - cfg.jitter) + rng.uniform(0.0, delay * cfg.jitter)
    return delay
