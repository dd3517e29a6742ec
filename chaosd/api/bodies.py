"""Request bodies, validated at the edge, and the answers of the Arena's routes that chaosd.views lacks."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import TypedDict

from chaosd.core.durations import Seconds

__all__ = [
    "InjectRequest",
    "LeverRequest",
    "ScenarioRunRequest",
    "StagesBody",
    "SurvivalRequest",
    "WindowRequest",
]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class InjectRequest(_Body):
    action: str = Field(min_length=1, max_length=64, description="an action of the catalogue")
    target: str | None = Field(default=None, min_length=1, max_length=200, description="id, kind, random or N%")
    params: dict[str, float | str] = Field(default_factory=dict, description="the action's parameters")
    ttl: Seconds | None = Field(default=None, description="how long it lasts, seconds (or '10s'); default from config")
    labels: dict[str, str] = Field(
        default_factory=dict,
        max_length=16,
        description="at most 16 labels (key: identifier, value: 1-128 characters) to select the fault by later",
    )


class WindowRequest(_Body):
    name: str | None = Field(default=None, min_length=1, max_length=100, description="what the window measures")


class LeverRequest(_Body):
    reason: str = Field(default="operator", min_length=1, max_length=200)


class SurvivalRequest(_Body):
    interval: Seconds = Field(
        default=10.0, gt=0, le=3600, description="seconds between faults: more than 0, at most 1h"
    )
    duration: Seconds = Field(
        default=1800.0, gt=0, le=7 * 86400, description="seconds to run: more than 0, at most 7 days"
    )
    actions: list[str] | None = Field(default=None, min_length=1, max_length=64)
    overlap: bool = Field(default=False, strict=True, description="let faults last 2×interval and stack")


class ScenarioRunRequest(_Body):
    name: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.-]+$")
    speed: float = Field(default=1.0, ge=1.0, le=1000.0, description="compress delays and durations")


class StagesBody(TypedDict):
    """``GET /arena/stages``: each stage's kind, so the page offers only the faults that apply."""

    stages: dict[str, str]
