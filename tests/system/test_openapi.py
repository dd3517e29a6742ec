"""One route table: the router, the served OpenAPI document and docs/api.md's endpoint table all come from it,
and a route that is served but not declared (or declared but not served) is caught."""

from __future__ import annotations

import asyncio
import dataclasses
import re
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from openapi_spec_validator import validate

from chaosd.api import build_app
from chaosd.api.keys import HTTP_STATS, LIMITS
from chaosd.api.schemas import openapi_document
from chaosd.api.server import FrontDoor
from chaosd.api.table import BEGIN, END, ENDPOINTS, Endpoint, declared, markdown_table, rewrite_docs, served
from chaosd.config.settings import Settings
from chaosd.core.clock import LoopClock
from chaosd.daemon.control import Controller
from chaosd.daemon.lifecycle import LiveRun
from chaosd.experiment.runner import Experiment
from chaosd.views import HealthBody

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "api.md"


def _app(tmp: Path) -> web.Application:
    settings = Settings(storage={"path": str(tmp / "db")}, daemon={"report": str(tmp / "r.json")})  # type: ignore[arg-type]
    exp = Experiment(settings, LoopClock(asyncio.get_running_loop()), warmup=0.0, scenario=None, virtual=False)
    return build_app(settings, LiveRun(settings, Controller(exp), "run-openapi"))


async def _served_document(app: web.Application) -> dict[str, Any]:
    """The document as a client gets it: ``GET /api/v1/openapi.json`` of the running app."""
    runner = web.AppRunner(app)
    await runner.setup()
    door = FrontDoor(runner, app[LIMITS], app[HTTP_STATS])
    try:
        [(host, port)] = await door.listen("127.0.0.1", 0)
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://{host}:{port}/api/v1/openapi.json") as resp,
        ):
            assert resp.status == 200
            document: dict[str, Any] = await resp.json()
            return document
    finally:
        await door.close()
        await runner.cleanup()


def _operations(document: dict[str, Any]) -> set[tuple[str, str]]:
    return {(method.upper(), path) for path, ops in document["paths"].items() for method in ops}


def _mismatch(app: web.Application, document: dict[str, Any]) -> dict[str, set[tuple[str, str]]]:
    routed, described = served(app), _operations(document)
    return {"served, not in OpenAPI": routed - described, "in OpenAPI, not served": described - routed}


def test_every_route_the_app_serves_is_in_the_served_openapi_document_and_back(tmp_path: Path) -> None:
    async def main() -> tuple[set[tuple[str, str]], dict[str, Any]]:
        app = _app(tmp_path)
        return served(app), await _served_document(app)

    routed, document = asyncio.run(main())
    mismatch = {
        "served, not in OpenAPI": routed - _operations(document),
        "in OpenAPI, not served": _operations(document) - routed,
    }
    assert mismatch == {"served, not in OpenAPI": set(), "in OpenAPI, not served": set()}
    assert routed == declared() and len(routed) == len(ENDPOINTS)  # one method on one path, declared once
    validate(document)
    # The Arena mounts its own routes; the table declares them like any other.
    assert {("GET", "/"), ("GET", "/arena/stages"), ("GET", "/api/v1/timeseries")} <= routed


def test_a_route_the_table_does_not_declare_is_caught(tmp_path: Path) -> None:
    async def extra(request: web.Request) -> web.Response:
        return web.json_response({})

    async def main() -> dict[str, set[tuple[str, str]]]:
        app = _app(tmp_path)
        app.router.add_post("/api/v1/undeclared", extra)  # served, but in no table
        return _mismatch(app, openapi_document())

    assert asyncio.run(main()) == {
        "served, not in OpenAPI": {("POST", "/api/v1/undeclared")},
        "in OpenAPI, not served": set(),
    }


def test_an_endpoint_declared_but_not_served_is_caught(tmp_path: Path) -> None:
    ghost = Endpoint("GET", "/api/v1/ghost", HealthBody, "Declared, never routed", handler=None)

    async def main() -> dict[str, set[tuple[str, str]]]:
        return _mismatch(_app(tmp_path), openapi_document((*ENDPOINTS, ghost)))

    assert asyncio.run(main()) == {
        "served, not in OpenAPI": set(),
        "in OpenAPI, not served": {("GET", "/api/v1/ghost")},
    }


def test_every_path_parameter_is_declared_and_every_declared_one_is_in_its_path() -> None:
    for e in ENDPOINTS:
        in_path = set(re.findall(r"\{(\w+)\}", e.path))
        declared_params = {p.name for p in e.params if p.where == "path"}
        assert in_path == declared_params, (e.method, e.path)


def test_docs_api_md_holds_the_table_the_generator_writes() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert rewrite_docs(text) == text, "docs/api.md is out of date: run python scripts/api_table.py --write"
    assert markdown_table() in text


def test_the_generator_rewrites_only_what_lies_between_the_markers() -> None:
    text = DOC.read_text(encoding="utf-8")
    changed = dataclasses.replace(ENDPOINTS[0], summary="changed", answers="a changed answer")
    rewritten = rewrite_docs(text, (changed, *ENDPOINTS[1:]))
    assert rewritten != text and "| GET | `/healthz` | | a changed answer |" in rewritten  # drift is seen
    before, after = text.split(BEGIN), rewritten.split(BEGIN)
    assert before[0] == after[0] and before[1].split(END)[1] == after[1].split(END)[1]


def test_the_callers_policy_routes_carry_the_config_models_schemas() -> None:
    """GET, PUT and PATCH /api/v1/clients: the policy's schema as taken (durations as text too) and as answered."""
    document = openapi_document()
    validate(document)
    ops = document["paths"]["/api/v1/clients"]
    assert set(ops) == {"get", "put", "patch"}
    schemas: dict[str, Any] = document["components"]["schemas"]
    answered = ops["get"]["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    assert answered == "#/components/schemas/ClientsConfig-Output"
    for method in ("put", "patch"):
        op = ops[method]
        taken = op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        assert taken == "#/components/schemas/ClientsConfig-Input"
        assert op["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith("/ClientsPushed")
        assert {"401", "415", "422", "503"} <= set(op["responses"]) and op["security"] == [{"bearer": []}]
    assert "security" not in ops["get"]
    taken_props, answered_props = (schemas[f"ClientsConfig-{m}"]["properties"] for m in ("Input", "Output"))
    assert set(taken_props) == set(answered_props) == {
        "timeout", "retries", "retry_on", "backoff", "budget", "patience", "drop_expired", "retry_after"
    }  # fmt: skip
    assert {"type": "string"}.items() <= taken_props["timeout"]["anyOf"][1].items()  # "250ms" is taken
    assert answered_props["timeout"]["type"] == "number"  # and always answered in seconds
    pushed = schemas["ClientsPushed"]["properties"]
    assert pushed["clients"] == {"$ref": "#/components/schemas/ClientsConfig-Output"}
    assert pushed["changed"]["items"]["enum"] == list(taken_props)
