"""Request bodies (validated at the edge) and the OpenAPI document that describes every route."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from chaosd import __version__
from chaosd import views as v
from chaosd.durations import Seconds
from chaosd.faults import CATALOGUE
from chaosd.wire import STATES

__all__ = ["InjectRequest", "LeverRequest", "ScenarioRunRequest", "SurvivalRequest", "openapi_document"]


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


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": schema}}}


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


def _op(
    summary: str, returns: type, ok: str = "200", body: str | None = None, mutating: bool = False, **extra: Any
) -> dict[str, Any]:
    op: dict[str, Any] = {
        "summary": summary,
        "responses": {ok: {"description": "success", **_json(_ref(returns.__name__))}, **_ERRORS},
        **extra,
    }
    if body is not None:
        op["requestBody"] = {"required": True, **_json(_ref(body))}
    if mutating:
        op["security"] = [{"bearer": []}]
    return op


_REQUESTS: tuple[type[BaseModel], ...] = (
    InjectRequest,
    LeverRequest,
    SurvivalRequest,
    ScenarioRunRequest,
    WindowRequest,
)
# Every answer's type: the handlers build these (mypy checks), tests check live answers against the schemas.
_ANSWERS: tuple[type, ...] = (
    v.HealthBody,
    v.ReadyBody,
    v.StatusBody,
    v.ActionsBody,
    v.FaultsBody,
    v.FaultView,
    v.RevertedBody,
    v.LeverBody,
    v.PlanStatus,
    v.WindowsBody,
    v.WindowSummary,
    v.WindowReport,
    v.ScoreBody,
    v.ReportView,
    v.RunsBody,
    v.RunBody,
    v.EventView,
    v.OpenApiDocument,
    v.TimeseriesBody,
    v.ScenariosBody,
)


def _page(summary: str) -> dict[str, Any]:
    return {"summary": summary, "responses": {"200": {"description": "HTML", "content": {"text/html": {}}}}}


_ID = [{"name": "id", "in": "path", "required": True, "schema": {"type": "integer", "minimum": 1}}]
_RUN_ID = [
    {"name": "id", "in": "path", "required": True, "schema": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"}}
]


def openapi_document() -> dict[str, Any]:
    """OpenAPI 3.1 for every route, generated from the types the handlers build (requests and answers)."""
    _, defs = TypeAdapter.json_schemas(
        [(m, "validation", TypeAdapter(m)) for m in _REQUESTS]
        + [(v, "serialization", TypeAdapter(v)) for v in _ANSWERS],
        ref_template="#/components/schemas/{model}",
    )
    schemas: dict[str, Any] = defs["$defs"]
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
    scenario_run = _op(
        "Run a shipped scenario by name, or an uploaded YAML scenario", v.PlanStatus, "201", mutating=True
    )
    scenario_run["requestBody"] = yaml_or_json
    scenario_run["parameters"] = [
        {"name": "speed", "in": "query", "required": False, "schema": {"type": "number", "minimum": 1, "maximum": 1000}}
    ]
    events = _op("Server-sent events (fault, detector, throttle, agent, leader, score, …)", v.EventView)
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
    events["responses"]["200"] = {
        "description": "an event stream: frames of id, event (the kind) and data (t and EventView's data fields)",
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
    }
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
    faults_list = _op("List faults, all or those a selector picks", v.FaultsBody)
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
    faults_revert = _op(
        "Revert the active faults a selector picks (label and/or action)", v.RevertedBody, mutating=True
    )
    faults_revert["parameters"] = selector
    return {
        "openapi": "3.1.0",
        "info": {"title": "chaosd", "version": __version__, "description": "Break the pipeline, watch it heal."},
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "paths": {
            "/healthz": {
                "get": _op("Liveness; 503 names the parts that died (pipeline, storage writer)", v.HealthBody)
            },
            "/readyz": {"get": _op("Readiness; 503 names the parts that failed", v.ReadyBody)},
            "/metrics": {
                "get": {
                    "summary": "Prometheus metrics (docs/metrics.md)",
                    "responses": {"200": {"description": "text exposition", "content": {"text/plain": {}}}},
                }
            },
            "/api/v1/openapi.json": {"get": _op("This document", v.OpenApiDocument)},
            "/api/v1/status": {
                "get": _op("Pipeline snapshot: agents, leader, DAG, queue, detector, throttle, score", v.StatusBody)
            },
            "/api/v1/actions": {"get": _op("The fault catalogue with each action's parameters", v.ActionsBody)},
            "/api/v1/faults": {
                "get": faults_list,
                "post": _op("Inject a fault", v.FaultView, "201", "InjectRequest", mutating=True),
                "delete": faults_revert,
            },
            "/api/v1/faults/{id}": {
                "get": _op(
                    "One fault; with wait, answered at its verdict or with its state at the deadline",
                    v.FaultView,
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
                "delete": _op("Revert a fault now", v.FaultView, parameters=_ID, mutating=True),
            },
            "/api/v1/lever": {
                "post": _op(
                    "Pull the safety lever: revert every fault, refuse new ones",
                    v.LeverBody,
                    body="LeverRequest",
                    mutating=True,
                ),
                "delete": _op("Release the safety lever", v.LeverBody, mutating=True),
            },
            "/api/v1/survival": {
                "get": _op("Survival mode status", v.PlanStatus),
                "post": _op("Start survival mode", v.PlanStatus, "201", "SurvivalRequest", mutating=True),
                "delete": _op("Stop survival mode", v.PlanStatus, mutating=True),
            },
            "/api/v1/scenarios": {
                "get": _op("The scenarios a run can name (./scenarios, then the shipped ones)", v.ScenariosBody)
            },
            "/api/v1/scenarios/run": {"post": scenario_run},
            "/api/v1/scenarios/current": {
                "get": _op("The current (or last) scenario run", v.PlanStatus),
                "delete": _op("Stop the running scenario", v.PlanStatus, mutating=True),
            },
            "/api/v1/windows": {
                "get": _op("Measurement windows (open ones and the newest closed)", v.WindowsBody),
                "post": _op("Open a measurement window", v.WindowSummary, "201", "WindowRequest", mutating=True),
            },
            "/api/v1/windows/{id}": {
                "get": _op(
                    "A window's own tasks, score, faults, incidents and diagnostics", v.WindowReport, parameters=_ID
                ),
                "delete": _op("Close a window: its report stops moving", v.WindowReport, parameters=_ID, mutating=True),
            },
            "/": {"get": _page("The Arena: the live page (the same as /arena)")},
            "/arena": {"get": _page("The Arena: the live page; /arena#run=ID opens a run from history")},
            "/api/v1/timeseries": {
                "get": _op(
                    "The last ten minutes of telemetry for the Arena's charts (600 points at most)", v.TimeseriesBody
                )
            },
            "/api/v1/score": {"get": _op("The live resilience score", v.ScoreBody)},
            "/api/v1/report": {"get": _op("The inspect report: the run report so far", v.ReportView)},
            "/api/v1/runs": {"get": _op("History of runs, newest first", v.RunsBody)},
            "/api/v1/runs/{id}": {
                "get": _op(
                    "One run with its report and a page of its faults",
                    v.RunBody,
                    parameters=[
                        *_RUN_ID,
                        {
                            "name": "faults_after",
                            "in": "query",
                            "required": False,
                            "schema": {"type": "integer", "minimum": 0, "maximum": 10**12},
                        },
                        {
                            "name": "faults_limit",
                            "in": "query",
                            "required": False,
                            "schema": {"type": "integer", "minimum": 1, "maximum": 10_000},
                        },
                    ],
                )
            },
            "/api/v1/events": {"get": events},
        },
    }
