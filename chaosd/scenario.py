"""Scenario files: YAML with a name, seed, duration, load phases, config overrides and actions.

``actions`` use the ARES Arena form (``- delay: 8s`` then ``action: {type, target_id, metadata}``,
delays relative to the previous action); they are validated here and executed by the fault injector.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from chaosd.config import Settings, deep_merge, load_settings
from chaosd.durations import Seconds
from chaosd.errors import ConfigError, ScenarioError

__all__ = ["Scenario", "ScenarioAction", "find_scenario", "load_scenario", "parse_scenario", "settings_for"]

SHIPPED = Path(__file__).resolve().parent.parent / "scenarios"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ActionSpec(_Model):
    type: str = Field(min_length=1)
    target_id: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class ScenarioAction(_Model):
    delay: Seconds = Field(default=0.0, ge=0)
    action: ActionSpec


class Scenario(_Model):
    name: str = Field(min_length=1)
    description: str = ""
    seed: int | None = Field(default=None, ge=0)
    duration: Seconds = Field(gt=0)
    warmup: Seconds | None = Field(default=None, ge=0)
    load: dict[str, Any] = Field(default_factory=dict)
    config: dict[str, Any] = Field(default_factory=dict)
    actions: tuple[ScenarioAction, ...] = ()
    expect: dict[str, Any] = Field(default_factory=dict)

    def overlay(self) -> dict[str, Any]:
        """The scenario's changes to the configuration, in the config file's shape."""
        overlay = deep_merge(self.config, {"load": self.load} if self.load else {})
        if self.seed is not None:
            overlay = deep_merge(overlay, {"seed": self.seed})
        return overlay


def find_scenario(name_or_path: str) -> Path:
    """A path as given, or a shipped scenario by name (``baseline`` → ``scenarios/baseline.yaml``)."""
    path = Path(name_or_path)
    if path.exists() or path.suffix in (".yaml", ".yml") or "/" in name_or_path:
        return path
    for folder in (Path("scenarios"), SHIPPED):
        candidate = folder / f"{name_or_path}.yaml"
        if candidate.exists():
            return candidate
    return path


def load_scenario(path: Path) -> Scenario:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ScenarioError([(str(path), "", "file not found")]) from None
    except OSError as exc:
        raise ScenarioError([(str(path), "", f"cannot read: {exc.strerror}")]) from None
    return parse_scenario(text, str(path))


def parse_scenario(text: str, source: str) -> Scenario:
    """A scenario from YAML text; every problem names ``source``, the field and what is wrong."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ScenarioError([(source, "", f"not valid YAML: {exc}".replace("\n", " "))]) from None
    if not isinstance(raw, dict):
        raise ScenarioError([(source, "", "a scenario is a mapping with at least name and duration")])
    try:
        return Scenario.model_validate(raw)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            field = ".".join(str(p) for p in error["loc"]) or "(top level)"
            msg = "unknown key" if error["type"] == "extra_forbidden" else str(error["msg"])
            problems.append((source, field, msg.removeprefix("Value error, ")))
        raise ScenarioError(problems) from None


def settings_for(scenario: Scenario, path: Path, config_path: Path | None) -> Settings:
    """The config file overlaid with the scenario; errors in the overlay name the scenario file."""
    overlay = scenario.overlay()
    try:
        return load_settings(config_path, overlay, overlay_source=str(path))
    except ConfigError as exc:
        problems = [
            (src, _scenario_field(field) if src == str(path) else field, msg) for src, field, msg in exc.problems
        ]
        raise ScenarioError(problems) from None


def _scenario_field(field: str) -> str:
    # Keys the scenario sets under `load:` are reported where the user wrote them.
    return field if field.startswith("load") or field == "seed" else f"config.{field}"
