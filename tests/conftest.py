"""Shared helpers: build settings from a TOML-shaped overlay and run them in virtual time."""

from __future__ import annotations

from typing import Any

import pytest

from chaosd.config import Settings, load_settings
from chaosd.runner import run_offline


def settings(overlay: dict[str, Any]) -> Settings:
    return load_settings(None, overlay)


def run(overlay: dict[str, Any], duration: float, warmup: float = 0.0) -> dict[str, Any]:
    return run_offline(settings(overlay), duration=duration, warmup=warmup)


def mmc(rate: float, workers: int, mean: float = 0.01, **extra: Any) -> dict[str, Any]:
    """An M/M/c overlay (exponential service, Poisson arrivals) with extra top-level sections merged in."""
    overlay: dict[str, Any] = {
        "load": {"arrival": "poisson", "rate": rate, "producers": 4},
        "workers": {"count": workers},
        "queue": {"capacity": 100_000, "when_full": "reject"},
        "stages": [{"name": "work", "service": {"distribution": "exponential", "mean": mean}}],
        "throttle": {"enabled": False},  # no faults and no throttle: the textbook M/M/c queue
    }
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(overlay.get(key), dict):
            overlay[key] = {**overlay[key], **value}
        else:
            overlay[key] = value
    return overlay


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files holding slow tests run first. The suite's two workers take whole files (``--dist loadfile``),
    and a minutes-long file handed out last keeps one worker busy while the other sits idle."""
    slow = {item.path for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.path not in slow)  # stable: the usual order otherwise
