"""``chaosd predict``: whether a retry storm, once triggered, holds under a configuration or scenario, and the load
above which it does (:mod:`chaosd.experiment.predict`); nothing is run."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from chaosd.cli.answers import json_text
from chaosd.cli.exits import EXIT_OK
from chaosd.config.settings import Settings, load_settings
from chaosd.core.errors import ConfigError
from chaosd.core.humanize import millis, number, rate, seconds
from chaosd.experiment.predict import predict
from chaosd.experiment.scenario import find_scenario, load_scenario, settings_for, shown_path
from chaosd.views import StormPredictionView

__all__ = ["predict_command", "predict_settings", "prediction_lines"]


def predict_settings(target: str | None, config: Path | None) -> tuple[Settings, str]:
    """The settings ``chaosd predict`` judges, and what they came from: a TOML file given as the argument, or a
    scenario (a name or a file) over ``--config``, or ``--config`` alone, or the defaults."""
    if target is not None and Path(target).suffix.lower() == ".toml":
        if config is not None:
            raise ConfigError([("--config", "", f"not with a config file as the argument ({target}): give one")])
        return load_settings(Path(target)), target
    if target is None:
        return load_settings(config), str(config) if config is not None else "the defaults"
    path = find_scenario(target)
    layers = [shown_path(path), *([str(config)] if config is not None else [])]
    return settings_for(load_scenario(path), path, config), " over ".join(layers)


def prediction_lines(view: StormPredictionView) -> list[str]:
    """The prediction as a person reads it: the verdict first, then the numbers it comes from and why."""
    if not view["storm_possible"]:
        verdict = "cannot hold at any load"
    elif view["self_sustaining"]:
        verdict = "holds once triggered: the load is above the threshold"
    else:
        verdict = "ends with its trigger: the load is below the threshold"
    capacity, threshold = view["capacity_per_s"], view["threshold_per_s"]
    lines = [f"  storm      {verdict}"]
    if threshold is not None and capacity is not None:
        attempts = number(view["attempts_per_caller"])
        lines.append(f"  threshold  {rate(threshold)} (capacity {rate(capacity)} / {attempts} attempts per caller)")
    shown = f"{rate(capacity)}: " if capacity is not None else "unbounded: "
    lines.append(f"  capacity   {shown}{view['workers']} workers / {millis(view['mean_service_s'])} a task")
    lines.append(f"  load       {rate(view['load_per_s'])} (peak {rate(view['peak_per_s'])})")
    timeout = f"callers give up after {seconds(view['timeout_s'])}" if view["timeout_s"] > 0 else "callers wait forever"
    bound = view["wait_bound_s"]
    holds = f"the queue holds up to {seconds(bound)} of waiting" if bound is not None else "no queue forms"
    lines.append(f"  wait       {holds}; {timeout}")
    lines.append(f"  because    {view['reason']}")
    return lines


def predict_command(args: argparse.Namespace, out: Callable[[str], None]) -> int:
    """Print the prediction for ``args.target`` (and ``--config``): as text, or with ``--json`` the view."""
    settings, source = predict_settings(args.target, args.config)
    view = predict(settings)
    if args.json:
        out(json_text(view))
        return EXIT_OK
    out(f"retry storm prediction for {source}")
    for line in prediction_lines(view):
        out(line)
    return EXIT_OK
