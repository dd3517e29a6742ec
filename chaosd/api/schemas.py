"""Request bodies (validated at the edge) and the OpenAPI document that describes every route."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from chaosd import __version__
from chaosd.durations import Seconds
from chaosd.faults import CATALOGUE
from chaosd.faults.injector import STATES

__all__ = ["InjectRequest", "LeverRequest", "ScenarioRunRequest", "SurvivalRequest", "openapi_document"]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class InjectRequest(_Body):
    action: str = Field(min_length=1, max_length=64, description="an action of the catalogue")
    target: str | None = Field(default=None, min_length=1, max_length=200, description="id, kind, random or N%")
    params: dict[str, float | str] = Field(default_factory=dict, description="the action's parameters")
    ttl: Seconds | None = Field(default=None, description="seconds (or '10s'); default from config")
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
    interval: Seconds = Field(default=10.0, gt=0, le=3600)
    duration: Seconds = Field(default=1800.0, gt=0, le=7 * 86400)
    actions: list[str] | None = Field(default=None, min_length=1, max_length=64)
    overlap: bool = Field(default=False, strict=True, description="let faults last 2×interval and stack")


class ScenarioRunRequest(_Body):
    name: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.-]+$")
    speed: float = Field(default=1.0, ge=1.0, le=1000.0, description="compress delays and durations")


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": schema}}}


_OBJECT = {"type": "object", "additionalProperties": True}
_ERRORS = {
    "400": {"description": "malformed request", **_json(_ref("Error"))},
    "401": {"description": "missing or wrong bearer token", **_json(_ref("Error"))},
    "404": {"description": "no such resource", **_json(_ref("Error"))},
    "409": {"description": "conflicts with the current state", **_json(_ref("Error"))},
    "408": {"description": "the request did not arrive within api.request_timeout", **_json(_ref("Error"))},
    "413": {"description": "body too large", **_json(_ref("Error"))},
    "415": {"description": "unsupported content type", **_json(_ref("Error"))},
    "422": {"description": "a field is invalid", **_json(_ref("Error"))},
    "431": {"description": "a request line or header too large", **_json(_ref("Error"))},
    "503": {"description": "shutting down, or the connection limit reached", **_json(_ref("Error"))},
}


def _op(summary: str, ok: str = "200", body: str | None = None, mutating: bool = False, **extra: Any) -> dict[str, Any]:
    op: dict[str, Any] = {
        "summary": summary,
        "responses": {ok: {"description": "success", **_json(_OBJECT)}, **_ERRORS},
        **extra,
    }
    if body is not None:
        op["requestBody"] = {"required": True, **_json(_ref(body))}
    if mutating:
        op["security"] = [{"bearer": []}]
    return op


_ID = [{"name": "id", "in": "path", "required": True, "schema": {"type": "integer", "minimum": 1}}]
_RUN_ID = [
    {"name": "id", "in": "path", "required": True, "schema": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"}}
]


def openapi_document() -> dict[str, Any]:
    """OpenAPI 3.1 for every route; request schemas come from the pydantic models above."""
    schemas: dict[str, Any] = {
        name: model.model_json_schema(ref_template="#/components/schemas/{model}")
        for name, model in (
            ("InjectRequest", InjectRequest),
            ("LeverRequest", LeverRequest),
            ("SurvivalRequest", SurvivalRequest),
            ("ScenarioRunRequest", ScenarioRunRequest),
            ("WindowRequest", WindowRequest),
        )
    }
    actions = sorted(CATALOGUE)
    schemas["InjectRequest"]["properties"]["action"]["enum"] = actions
    survival_actions = schemas["SurvivalRequest"]["properties"]["actions"]["anyOf"][0]
    survival_actions["items"]["enum"] = actions
    schemas["Error"] = {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["status", "message"],
                "properties": {
                    "status": {"type": "integer"},
                    "field": {"type": ["string", "null"]},
                    "message": {"type": "string"},
                },
            }
        },
    }
    yaml_or_json = {
        "required": True,
        "content": {
            "application/json": {"schema": _ref("ScenarioRunRequest")},
            "application/yaml": {"schema": {"type": "string"}},
        },
    }
    scenario_run = _op("Run a shipped scenario by name, or an uploaded YAML scenario", "201", mutating=True)
    scenario_run["requestBody"] = yaml_or_json
    scenario_run["parameters"] = [
        {"name": "speed", "in": "query", "required": False, "schema": {"type": "number", "minimum": 1, "maximum": 1000}}
    ]
    events = _op("Server-sent events (fault, detector, throttle, agent, leader, score, …)")
    events["parameters"] = [
        {
            "name": "types",
            "in": "query",
            "required": False,
            "schema": {"type": "string", "maxLength": 500, "pattern": "^([a-z_]{1,32}(,[a-z_]{1,32})*)?$"},
        },
        {
            "name": "replay",
            "in": "query",
            "required": False,
            "schema": {"type": "integer", "minimum": 0, "maximum": 1000},
        },
        {
            "name": "last_event_id",
            "in": "query",
            "required": False,
            "schema": {"type": "string", "pattern": "^[0-9]{1,20}$"},
        },
        {"name": "Last-Event-ID", "in": "header", "required": False, "schema": {"type": "string", "maxLength": 20}},
    ]
    events["responses"]["429"] = {"description": "too many event streams open", **_json(_ref("Error"))}
    events["responses"]["200"] = {"description": "an event stream", "content": {"text/event-stream": {}}}
    selector = [
        {
            "name": "label",
            "in": "query",
            "required": False,
            "description": "key=value; repeat for several (all must hold)",
            "schema": {"type": "array", "items": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_.-]{0,62}=.+$"}},
            "style": "form",
            "explode": True,
        },
        {
            "name": "action",
            "in": "query",
            "required": False,
            "schema": {"type": "array", "items": {"type": "string", "enum": sorted(CATALOGUE)}},
            "style": "form",
            "explode": True,
        },
    ]
    faults_list = _op("List faults, all or those a selector picks")
    faults_list["parameters"] = [
        {"name": "active", "in": "query", "required": False, "schema": {"type": "boolean"}},
        *selector,
        {
            "name": "state",
            "in": "query",
            "required": False,
            "schema": {"type": "array", "items": {"type": "string", "enum": list(STATES)}},
            "style": "form",
            "explode": True,
        },
    ]
    faults_revert = _op("Revert the active faults a selector picks (label and/or action)", mutating=True)
    faults_revert["parameters"] = selector
    return {
        "openapi": "3.1.0",
        "info": {"title": "chaosd", "version": __version__, "description": "Break the pipeline, watch it heal."},
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "paths": {
            "/healthz": {"get": _op("Liveness; 503 names the parts that died (pipeline, storage writer)")},
            "/readyz": {"get": _op("Readiness; 503 names the parts that failed")},
            "/metrics": {
                "get": {
                    "summary": "Prometheus metrics (docs/metrics.md)",
                    "responses": {"200": {"description": "text exposition", "content": {"text/plain": {}}}},
                }
            },
            "/api/v1/openapi.json": {"get": _op("This document")},
            "/api/v1/status": {"get": _op("Pipeline snapshot: agents, leader, DAG, queue, detector, throttle, score")},
            "/api/v1/actions": {"get": _op("The fault catalogue with each action's parameters")},
            "/api/v1/faults": {
                "get": faults_list,
                "post": _op("Inject a fault", "201", "InjectRequest", mutating=True),
                "delete": faults_revert,
            },
            "/api/v1/faults/{id}": {
                "get": _op(
                    "One fault; with wait, answered at its verdict or with its state at the deadline",
                    parameters=[
                        *_ID,
                        {
                            "name": "wait",
                            "in": "query",
                            "required": False,
                            "description": "long poll: seconds (or '30s'), at most 120",
                            "schema": {"type": "string", "pattern": "^[0-9]+(\\.[0-9]+)?(ms|s|m)?$"},
                        },
                    ],
                ),
                "delete": _op("Revert a fault now", parameters=_ID, mutating=True),
            },
            "/api/v1/lever": {
                "post": _op(
                    "Pull the safety lever: revert every fault, refuse new ones", body="LeverRequest", mutating=True
                ),
                "delete": _op("Release the safety lever", mutating=True),
            },
            "/api/v1/survival": {
                "get": _op("Survival mode status"),
                "post": _op("Start survival mode", "201", "SurvivalRequest", mutating=True),
                "delete": _op("Stop survival mode", mutating=True),
            },
            "/api/v1/scenarios/run": {"post": scenario_run},
            "/api/v1/scenarios/current": {
                "get": _op("The current (or last) scenario run"),
                "delete": _op("Stop the running scenario", mutating=True),
            },
            "/api/v1/windows": {
                "get": _op("Measurement windows (open ones and the newest closed)"),
                "post": _op("Open a measurement window", "201", "WindowRequest", mutating=True),
            },
            "/api/v1/windows/{id}": {
                "get": _op("A window's own tasks, score, faults, incidents and diagnostics", parameters=_ID),
                "delete": _op("Close a window: its report stops moving", parameters=_ID, mutating=True),
            },
            "/api/v1/score": {"get": _op("The live resilience score")},
            "/api/v1/report": {"get": _op("The inspect report: the run report so far")},
            "/api/v1/runs": {"get": _op("History of runs, newest first")},
            "/api/v1/runs/{id}": {"get": _op("One run with its faults and report", parameters=_RUN_ID)},
            "/api/v1/events": {"get": events},
        },
    }
