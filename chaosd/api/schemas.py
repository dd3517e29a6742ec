"""The OpenAPI document, walked from the route table: each endpoint's parameters, body, answer and errors,
with the schemas generated from the types the handlers build (request bodies and views)."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from functools import cache

from pydantic import BaseModel, TypeAdapter

from chaosd.api.table import ENDPOINTS, Endpoint, Media, Param
from chaosd.core.version import __version__
from chaosd.faults import CATALOGUE

__all__ = ["openapi_document"]

_STATUSES = {
    400: "malformed request",
    401: "missing or wrong bearer token",
    404: "no such resource",
    408: "the request did not arrive within api.request_timeout",
    409: "conflicts with the current state",
    413: "body too large",
    415: "unsupported content type",
    422: "a field is invalid",
    429: "too many event streams open",
    431: "a request line or header too large",
    503: "shutting down, or the connection limit reached",
}
_ERROR = {
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


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: Mapping[str, object]) -> dict[str, object]:
    return {"content": {"application/json": {"schema": schema}}}


def _param(p: Param) -> dict[str, object]:
    out: dict[str, object] = {"name": p.name, "in": p.where, "required": p.where == "path"}
    if p.description:
        out["description"] = p.description
    if p.repeated:
        out.update(schema={"type": "array", "items": dict(p.schema)}, style="form", explode=True)
    else:
        out["schema"] = dict(p.schema)
    return out


# Each schema's reference by (type, mode): a model both taken and answered (the callers' policy) has two schemas,
# ``ClientsConfig-Input`` (durations as text too) and ``ClientsConfig-Output``.
_Refs = Mapping[tuple[type, str], Mapping[str, object]]


def _success(answer: type | Media, refs: _Refs) -> dict[str, object]:
    if not isinstance(answer, Media):
        return {"description": "success", **_json(dict(refs[answer, "serialization"]))}
    schema = {"schema": dict(answer.schema)} if answer.schema is not None else {}
    return {"description": answer.description, "content": {t: dict(schema) for t in answer.types}}


def _operation(e: Endpoint, refs: _Refs) -> dict[str, object]:
    op: dict[str, object] = {
        "summary": e.summary,
        "responses": {
            str(e.ok): _success(e.answer, refs),
            **{str(s): {"description": _STATUSES[s], **_json(_ref("Error"))} for s in e.errors},
        },
    }
    if e.params:
        op["parameters"] = [_param(p) for p in e.params]
    if e.body is not None:
        content: dict[str, object] = {"application/json": {"schema": dict(refs[e.body, "validation"])}}
        if e.yaml:
            content["application/yaml"] = {"schema": {"type": "string"}}
        op["requestBody"] = {"required": True, "content": content}
    if e.method != "GET":
        op["security"] = [{"bearer": []}]  # every change takes the token (when the daemon has one)
    return op


def _object_at(schema: object, *path: str | int) -> dict[str, object]:
    """The JSON object at ``path`` (keys and list indexes) inside a generated schema; a path not there raises."""
    node = schema
    for step in path:
        if isinstance(node, list) and isinstance(step, int):
            node = node[step]
            continue
        if not (isinstance(node, dict) and isinstance(step, str)):
            raise TypeError(f"no {step!r} in {node!r}")
        node = node[step]
    if not isinstance(node, dict):
        raise TypeError(f"not a JSON object: {node!r}")
    return node


def _schemas(endpoints: Iterable[Endpoint]) -> tuple[_Refs, dict[str, object]]:
    requests: dict[str, type[BaseModel]] = {}
    answers: dict[str, type] = {}
    for e in endpoints:
        if e.body is not None:
            requests[e.body.__name__] = e.body
        if not isinstance(e.answer, Media):
            answers[e.answer.__name__] = e.answer
        answers.update((t.__name__, t) for t in e.describes)
    refs, defs = TypeAdapter.json_schemas(
        [((m, "validation"), "validation", TypeAdapter(m)) for m in requests.values()]
        + [((t, "serialization"), "serialization", TypeAdapter(t)) for t in answers.values()],
        ref_template="#/components/schemas/{model}",
    )
    schemas = _object_at(defs, "$defs")
    actions = sorted(CATALOGUE)
    if "InjectRequest" in schemas:
        _object_at(schemas, "InjectRequest", "properties", "action")["enum"] = actions
    if "SurvivalRequest" in schemas:
        _object_at(schemas, "SurvivalRequest", "properties", "actions", "anyOf", 0, "items")["enum"] = actions
    schemas["Error"] = _ERROR
    return {key: ref for (key, _), ref in refs.items()}, schemas


def openapi_document(endpoints: tuple[Endpoint, ...] = ENDPOINTS) -> dict[str, object]:
    """OpenAPI 3.1 for every endpoint of ``endpoints`` (the route table by default); a copy of its own."""
    return copy.deepcopy(_table_document() if endpoints is ENDPOINTS else _document(endpoints))


@cache
def _table_document() -> dict[str, object]:
    return _document(ENDPOINTS)  # the route table never changes: walked once per process


def _document(endpoints: Iterable[Endpoint]) -> dict[str, object]:
    endpoints = tuple(endpoints)
    refs, schemas = _schemas(endpoints)
    paths: dict[str, dict[str, object]] = {}
    for e in endpoints:
        paths.setdefault(e.path, {})[e.method.lower()] = _operation(e, refs)
    return {
        "openapi": "3.1.0",
        "info": {"title": "chaosd", "version": __version__, "description": "Break the pipeline, watch it heal."},
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "paths": paths,
    }
