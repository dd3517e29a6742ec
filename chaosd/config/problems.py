"""Validation errors as a user reads them: which source (file, scenario, environment variable), which key, what
is wrong, and the closest known key for a misspelt one. Stages are named by name: ``stages.search.service.mean``.
"""

from __future__ import annotations

import difflib
import os
import types
from collections.abc import Iterable, Mapping, Sequence
from typing import Annotated, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

__all__ = ["Layer", "closest", "field_name", "has_path", "known_keys", "problems_of", "stray_variables"]

Layer = tuple[str, Mapping[str, object]]  # a source's name and the tables it gave, weakest first in a list
_Loc = tuple[int | str, ...]
_SECRETS = ("token", "upstream")  # a rejected secret is never echoed (an upstream URL may hold a password)


def closest(name: str, known: Iterable[str]) -> str | None:
    """The known name ``name`` is most likely a misspelling of (difflib's ratio ≥ 0.6), if any."""
    found = difflib.get_close_matches(name, list(known), n=1)
    return found[0] if found else None


def problems_of(
    exc: ValidationError,
    model: type[BaseModel],
    data: Mapping[str, object],
    layers: Sequence[Layer],
    env_prefix: str | None,
) -> list[tuple[str, str, str]]:
    """(source, field, problem) for each error of ``model`` validated from ``data``, merged from ``layers``.

    The source is the environment variable that set the value (when ``env_prefix`` is given, the environment
    was read), else the strongest layer that holds the key, else the weakest layer.
    """
    problems = []
    for error in exc.errors():
        loc = tuple(error["loc"])
        env = _env_name(loc, env_prefix) if env_prefix is not None else None
        if env is not None:
            source = f"environment {env}"
        else:
            source = next((name for name, given in reversed(layers) if has_path(given, loc)), layers[0][0])
        field = field_name(loc, data)
        problems.append((source, field, _describe(error, model, data, env, env_prefix)))
    return problems


def stray_variables(prefix: str, sections: Iterable[str]) -> list[tuple[str, str, str]]:
    """Variables shaped like a setting (``CHAOSD_LAOD__RATE``) whose section is none: the settings would ignore them.

    Only names with ``__`` count: the client's own variables (``CHAOSD_ADDR``, ``CHAOSD_TOKEN``) have none.
    """
    known = sorted(sections)
    problems = []
    for name in sorted(os.environ):
        if not name.upper().startswith(prefix) or "__" not in name:
            continue
        section, _, rest = name[len(prefix) :].partition("__")
        if section.lower() in known:
            continue
        near = closest(section.lower(), known)
        if near is not None:
            hint = f"; did you mean {prefix}{near.upper()}__{rest}?"
        else:
            hint = f" (sections: {', '.join(known)})"
        problems.append((f"environment {name}", section.lower(), f"unknown key{hint}"))
    return problems


def field_name(loc: _Loc, data: Mapping[str, object]) -> str:
    """``load.rate``; a stage by its name, ``stages.search.service.mean``, or by index when it has none."""
    parts = []
    for i, part in enumerate(loc):
        if isinstance(part, int) and i == 1 and loc[0] == "stages":
            name = _stage_name(data.get("stages"), part)
            parts.append(name if name is not None else str(part))
        else:
            parts.append(str(part))
    return ".".join(parts) or "(top level)"


def _stage_name(stages: object, index: int) -> str | None:
    if not isinstance(stages, list | tuple) or not 0 <= index < len(stages):
        return None
    stage = stages[index]
    name = stage.get("name") if isinstance(stage, Mapping) else getattr(stage, "name", None)
    # A name that could be read as a path or an index is shown by index.
    if isinstance(name, str) and name.isprintable() and "." not in name and not name.isdigit() and 0 < len(name) <= 64:
        return name
    return None


def has_path(data: object, loc: _Loc) -> bool:
    for part in loc:
        if isinstance(data, Mapping):
            if part not in data:
                return False
            data = data[part]
        elif isinstance(data, list | tuple) and isinstance(part, int) and part < len(data):
            data = data[part]
        else:
            return False
    return True


def known_keys(model: type[BaseModel], loc: _Loc) -> list[str] | None:
    """The keys the table at ``loc`` takes (aliases as written in a file), or None when it is not a model's."""
    current: object = model
    skip = False  # the part after a list or a mapping's name is an index or a key, not a field
    for part in loc:
        if skip:
            skip = False
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)) or not isinstance(part, str):
            return None
        fields = current.model_fields
        field = fields.get(part) or next((f for f in fields.values() if f.alias == part), None)
        if field is None:
            return None
        current, skip = _table(field.annotation)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return [f.alias or name for name, f in current.model_fields.items()]
    return None


def _table(annotation: object) -> tuple[object, bool]:
    """What a field holds, unwrapped from Optional and Annotated; True when it is the items of a list or mapping."""
    items = False
    while True:
        origin = get_origin(annotation)
        args = [a for a in get_args(annotation) if a is not type(None) and a is not Ellipsis]
        if origin is Annotated or (origin in (Union, types.UnionType) and len(args) == 1):
            annotation = args[0]
        elif origin in (tuple, list) and len(args) == 1 and not items:
            annotation, items = args[0], True
        elif origin is dict and len(args) == 2 and not items:
            annotation, items = args[1], True
        else:
            return annotation, items


def _env_name(loc: _Loc, prefix: str) -> str | None:
    for n in range(len(loc), 0, -1):
        name = prefix + "__".join(str(p) for p in loc[:n]).upper()
        if name in os.environ:
            return name
    return None


def _describe(
    error: ErrorDetails, model: type[BaseModel], data: Mapping[str, object], env: str | None, env_prefix: str | None
) -> str:
    loc = tuple(error["loc"])
    if error["type"] == "extra_forbidden":  # pydantic's type for a key no model declares (file, overlay or env)
        return "unknown key" + _hint(loc, model, data, env, env_prefix)
    msg = str(error["msg"]).removeprefix("Value error, ")
    secret = any(str(part) in _SECRETS for part in loc)
    if error["type"] != "missing" and "input" in error and not secret:
        shown = repr(error["input"])
        if len(shown) <= 60 and not isinstance(error["input"], Mapping | list | tuple):  # a table or list: its key says
            msg = f"{msg} (got {shown})"
    return msg


def _hint(
    loc: _Loc, model: type[BaseModel], data: Mapping[str, object], env: str | None, env_prefix: str | None
) -> str:
    """``; did you mean load.rate?`` (or the variable's name, for a key from the environment)."""
    known = known_keys(model, loc[:-1])
    if not known or not isinstance(loc[-1], str):
        return ""
    near = closest(loc[-1], known)
    if near is None:
        return ""
    if env is not None and env_prefix is not None:
        parts = env.removeprefix(env_prefix).split("__")
        depth = len(loc) - 1
        if depth < len(parts):
            return f"; did you mean {env_prefix}{'__'.join([*parts[:depth], near.upper(), *parts[depth + 1 :]])}?"
    return f"; did you mean {field_name((*loc[:-1], near), data)}?"
