"""A run's duration and warm-up: whether the command line, the scenario or the config set each, and a refusal
or a warning that names the one the user set and how to fix it."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from chaosd.config.settings import ENV_PREFIX, Settings
from chaosd.core.errors import ConfigError
from chaosd.experiment.scenario import Scenario

__all__ = ["Timing", "run_timing"]

_SHARE = 0.1  # a measured window shorter than this share of the run is warned about


@dataclass(frozen=True, slots=True)
class Timing:
    duration: float
    warmup: float
    warnings: tuple[str, ...]  # to print before the run: it runs all the same


@dataclass(frozen=True, slots=True)
class _Given:
    seconds: float
    origin: str  # for messages: "--duration", "scenario baseline", "run.warmup in my.toml"
    source: str  # who a ConfigError names: the option, the scenario file or the config file
    key: str  # the option or key in that source: "", "duration", "run.warmup"

    @property
    def flag(self) -> bool:
        return self.origin.startswith("--")


def run_timing(
    duration: float | None,
    warmup: float | None,
    scenario: Scenario | None,
    scenario_path: Path | None,
    settings: Settings,
    config: Path | None,
) -> Timing:
    """The duration (``--duration``, else the scenario's, else ``run.duration``) and warm-up (``--warmup``, else
    the scenario's, else ``run.warmup``, else a tenth of the duration); ConfigError when nothing is left to
    measure, naming the option the user set."""
    length = _duration(duration, scenario, scenario_path, settings, config)
    if length.seconds <= 0:
        raise ConfigError([(length.source, length.key, f"must be more than 0 (got {_s(length.seconds)})")])
    warm = _warmup(warmup, scenario, scenario_path, settings, config, length.seconds)
    measured = length.seconds - warm.seconds
    if measured <= 0:
        raise ConfigError([_nothing_left(length, warm)])
    warnings = []
    if measured < max(_SHARE * length.seconds, settings.telemetry.window):
        warnings.append(
            f"{_named(length, 'duration')} and {_named(warm, 'warmup')} leave only {_s(measured)} s to measure "
            f"({measured / length.seconds * 100:.0f} % of the run); give a longer --duration or a shorter --warmup"
        )
    return Timing(length.seconds, warm.seconds, tuple(warnings))


def _duration(
    given: float | None, scenario: Scenario | None, path: Path | None, settings: Settings, config: Path | None
) -> _Given:
    if given is not None:
        return _Given(given, "--duration", "--duration", "")
    if scenario is not None and path is not None:
        if scenario.duration is not None:
            return _Given(scenario.duration, f"scenario {scenario.name}", str(path), "duration")
        # settings_for put the duration derived from its actions in run.duration.
        return _Given(settings.run.duration, f"scenario {scenario.name}, after its last fault", str(path), "actions")
    return _key(settings, "duration", scenario, path, config)


def _warmup(
    given: float | None,
    scenario: Scenario | None,
    path: Path | None,
    settings: Settings,
    config: Path | None,
    duration: float,
) -> _Given:
    if given is not None:
        return _Given(given, "--warmup", "--warmup", "")
    if scenario is not None and path is not None and scenario.warmup is not None:
        return _Given(scenario.warmup, f"scenario {scenario.name}", str(path), "warmup")
    if settings.run.warmup is not None:
        return _key(settings, "warmup", scenario, path, config)
    return _Given(duration / 10, "10 % of the duration", "--warmup", "")


def _key(settings: Settings, name: str, scenario: Scenario | None, path: Path | None, config: Path | None) -> _Given:
    """``run.duration`` or ``run.warmup``, named where it was set: a variable, the scenario, the file, the default."""
    key = f"run.{name}"
    seconds = getattr(settings.run, name)
    variable = f"{ENV_PREFIX}RUN__{name.upper()}"
    if variable in os.environ:
        return _Given(seconds, variable, f"environment {variable}", key)
    in_scenario = scenario is not None and isinstance(run := scenario.config.get("run"), dict) and name in run
    if in_scenario and path is not None:
        return _Given(seconds, f"{key} in {path}", str(path), f"config.{key}")
    if name in settings.run.model_fields_set and config is not None:
        return _Given(seconds, f"{key} in {config}", str(config), key)
    return _Given(seconds, f"the default {key}", str(config or "configuration"), key)


def _nothing_left(length: _Given, warm: _Given) -> tuple[str, str, str]:
    """Blame the value the user set on the command line: the duration if only it was, else the warm-up."""
    if length.flag and not warm.flag:
        return (
            "--duration",
            "",
            f"{_s(length.seconds)} s leaves nothing to measure after the {_s(warm.seconds)} s warmup (from "
            f"{warm.origin}); give more than {_s(warm.seconds)}s or a shorter --warmup",
        )
    fix = "or a longer --duration" if warm.flag else "here or with --warmup, or a longer --duration"
    return (
        warm.source,
        warm.key,
        f"{_s(warm.seconds)} s leaves nothing to measure of the {_s(length.seconds)} s duration (from "
        f"{length.origin}); give less than {_s(length.seconds)}s {fix}",
    )


def _named(given: _Given, what: str) -> str:
    if given.flag:
        return f"{given.origin} {_s(given.seconds)} s"
    return f"the {_s(given.seconds)} s {what} (from {given.origin})"


def _s(seconds: float) -> str:
    return f"{seconds:.6g}"
