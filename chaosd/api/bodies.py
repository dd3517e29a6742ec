"""Request bodies, validated at the edge, and the answers of the routes that chaosd.views lacks (the Arena's, and
those that carry a config model)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from typing_extensions import TypedDict

from chaosd.api.errors import HttpError
from chaosd.config.problems import problems_of
from chaosd.config.settings import ClientsConfig
from chaosd.core.durations import Seconds

__all__ = [
    "ClientsKey",
    "ClientsPushed",
    "InjectRequest",
    "LeverRequest",
    "ScenarioRunRequest",
    "StagesBody",
    "SurvivalRequest",
    "WindowRequest",
    "clients_policy",
    "merge_patch",
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


# --- the callers' policy ([clients]) pushed at run time --------------------------------------------------------

ClientsKey = Literal[
    "timeout", "retries", "retry_on", "backoff", "budget", "patience", "drop_expired", "retry_after"
]  # fmt: skip


class ClientsPushed(TypedDict):
    """``PUT``/``PATCH /api/v1/clients``: the policy now in force, and the keys the push changed (in the policy's
    field order), as the ``clients`` event it recorded says."""

    clients: ClientsConfig
    changed: list[ClientsKey]


def merge_patch(target: Mapping[str, object], patch: Mapping[str, object]) -> dict[str, object]:
    """``target`` with ``patch`` merged in as a JSON merge patch (RFC 7396): an object merges key by key, null
    removes a key (it takes its default again), anything else replaces."""
    merged = dict(target)
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, Mapping):
            inner = merged.get(key)
            merged[key] = merge_patch(inner if isinstance(inner, Mapping) else {}, value)
        else:
            merged[key] = value
    return merged


class _Pushed(BaseModel):
    """The policy where a config file holds it, so its errors are named as the config's are: ``clients.timeout``."""

    model_config = ConfigDict(extra="forbid")
    clients: ClientsConfig


def clients_policy(data: Mapping[str, object], sent: Mapping[str, object]) -> ClientsConfig:
    """``data`` validated as the config's ``[clients]`` table is; ``sent`` is what the request gave (its problems
    are named from it). Invalid: 400 naming ``clients.<key>`` in the config's words; the message holds the first
    key's problem, then each other's with its key (``…; clients.retries: …``), so ``field: message`` reads whole."""
    try:
        return _Pushed.model_validate({"clients": data}).clients
    except ValidationError as exc:
        problems = problems_of(exc, _Pushed, {"clients": data}, [("request", {"clients": sent})], None)
    (_, field, first), *others = problems
    message = "; ".join([first, *(f"{name}: {problem}" for _, name, problem in others)])
    raise HttpError(400, field, message) from None
