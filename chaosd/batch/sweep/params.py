"""A sweep's ``--param KEY=START:STOP:STEP`` (or ``KEY=v1,v2,…``): the config key it sets and the values it takes."""

from __future__ import annotations

import copy
import difflib
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from itertools import product
from typing import Annotated, Literal, Union, get_args, get_origin

from pydantic import BaseModel

from chaosd.batch.sweep.view import Value
from chaosd.config.settings import Settings, StageConfig
from chaosd.core.errors import ConfigError

__all__ = ["MAX_POINTS", "Param", "Value", "grid", "needs_stages", "overlay_at", "parse_params"]

MAX_POINTS = 200  # runs grow with points × replications: a typo such as 1:1000:1 is refused, not queued
Kind = Literal["int", "float", "bool", "str"]


@dataclass(frozen=True, slots=True)
class Param:
    """One swept key: its dotted path into the settings and its values, in the order they are run."""

    text: str  # as the command line gave it, for error messages
    key: str
    kind: Kind
    values: tuple[Value, ...]

    @property
    def numeric(self) -> bool:
        return self.kind in ("int", "float")


def _problem(text: str, message: str) -> ConfigError:
    return ConfigError([(f"--param {text}", "", message)])


def _fields(model: type[BaseModel]) -> list[str]:
    return sorted(model.model_fields)


def _leaf(text: str, key: str) -> tuple[Kind, tuple[str, ...]]:
    """The kind of value ``key`` holds (and its choices, for a Literal); a ConfigError names the part that is wrong.

    ``stages.NAME.…`` reaches into the stage called NAME (the list is set whole, so the sweep copies it).
    """
    if key == "seed":
        raise _problem(text, "seed: the seeds come from --seed and --replications, not from a sweep")
    model: type[BaseModel] = Settings
    parts = key.split(".")
    start = 0
    if parts[0] == "stages" and len(parts) >= 3:
        model, start = StageConfig, 2
    elif parts[0] == "stages":
        raise _problem(text, f"{key}: a list of stages: name one and its key, e.g. stages.answer.service.mean")
    for i in range(start, len(parts)):
        part = parts[i]
        where = ".".join(parts[:i]) or "the settings"
        fields = model.model_fields
        if part not in fields:
            close = difflib.get_close_matches(part, _fields(model), n=1)
            hint = f"; did you mean {'.'.join([*parts[:i], close[0]])}?" if close else ""
            raise _problem(text, f"{key}: not a config key ({where} has no {part!r}){hint}")
        annotation = fields[part].annotation
        if i < len(parts) - 1:
            if get_origin(annotation) in (Union, types.UnionType):  # an optional table (a stage's fallback)
                args = [a for a in get_args(annotation) if a is not type(None)]
                annotation = args[0] if len(args) == 1 else annotation
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                model = annotation
                continue
            raise _problem(text, f"{key}: {'.'.join(parts[: i + 1])} is a single value, not a table")
        return _kind(text, key, annotation)
    raise AssertionError("unreachable: the loop returns or raises on its last part")


def _kind(text: str, key: str, annotation: object) -> tuple[Kind, tuple[str, ...]]:
    if get_origin(annotation) in (Union, types.UnionType):  # an optional value: the sweep sets the value
        args = [a for a in get_args(annotation) if a is not type(None)]
        annotation = args[0] if len(args) == 1 else annotation
    if get_origin(annotation) is Annotated:  # a duration inside an optional: its type is the first argument
        annotation = get_args(annotation)[0]
    if get_origin(annotation) is Literal:
        return "str", tuple(str(a) for a in get_args(annotation))
    if annotation is bool:
        return "bool", ("true", "false")
    if annotation is int:
        return "int", ()
    if annotation is float:
        return "float", ()
    if annotation is str:
        return "str", ()
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        names = ", ".join(f"{key}.{f}" for f in _fields(annotation)[:4])
        raise _problem(text, f"{key}: a table, not a value (its keys: {names}, …)")
    raise _problem(text, f"{key}: a list or a mapping, not a single value a sweep can set")


def _decimal(text: str, part: str, what: str) -> Decimal:
    try:
        number = Decimal(part.strip())
    except InvalidOperation:
        raise _problem(text, f"{what}: not a number ({part.strip()!r})") from None
    if not number.is_finite():
        raise _problem(text, f"{what}: not a finite number ({part.strip()!r})")
    return number


def _as_kind(text: str, number: Decimal, kind: Kind, what: str) -> Value:
    if kind == "int":
        if number != number.to_integral_value():
            raise _problem(text, f"{what}: {number} is not a whole number (the key holds integers)")
        return int(number)
    return float(number)


def _range(text: str, spec: str, kind: Kind) -> tuple[Value, ...]:
    parts = spec.split(":")
    if len(parts) != 3:
        raise _problem(text, "a range is START:STOP:STEP (e.g. 100:800:50), or give values as v1,v2,…")
    start, stop, step = (_decimal(text, p, w) for p, w in zip(parts, ("start", "stop", "step"), strict=True))
    if step <= 0:
        raise _problem(text, f"step: must be > 0 (got {step})")
    if start > stop:
        raise _problem(text, f"start {start} is above stop {stop}")
    count = int((stop - start) // step) + 1  # exact in decimals: 0.1:0.3:0.1 has three points, stop included
    if count > MAX_POINTS:
        raise _problem(text, f"{count} points: at most {MAX_POINTS} (a larger step, or a narrower range)")
    return tuple(_as_kind(text, start + i * step, kind, "range") for i in range(count))


def _listed(text: str, spec: str, kind: Kind, choices: tuple[str, ...]) -> tuple[Value, ...]:
    items = [item.strip() for item in spec.split(",")]
    if any(not item for item in items):
        raise _problem(text, "an empty value in the list")
    values: list[Value] = []
    for item in items:
        if kind in ("int", "float"):
            values.append(_as_kind(text, _decimal(text, item, "value"), kind, "value"))
        elif kind == "bool":
            if item.lower() not in choices:
                raise _problem(text, f"value {item!r}: true or false")
            values.append(item.lower() == "true")
        elif choices and item not in choices:
            raise _problem(text, f"value {item!r}: one of {', '.join(choices)}")
        else:
            values.append(item)
    if len(set(values)) != len(values):
        raise _problem(text, "a value is listed twice")
    if kind in ("int", "float") and list(values) != sorted(values, key=float):
        raise _problem(text, "values must be increasing (the knee and the onset are read from low to high)")
    if len(values) > MAX_POINTS:
        raise _problem(text, f"{len(values)} values: at most {MAX_POINTS}")
    return tuple(values)


def _parse(text: str) -> Param:
    key, sep, spec = text.partition("=")
    key = key.strip()
    if not sep or not key or not spec.strip():
        raise _problem(text, "expected KEY=START:STOP:STEP or KEY=v1,v2,… (e.g. load.rate=100:800:50)")
    kind, choices = _leaf(text, key)
    if ":" in spec:
        if kind not in ("int", "float"):
            raise _problem(text, f"{key} holds {kind} values: list them (v1,v2,…), a range needs numbers")
        values = _range(text, spec, kind)
    else:
        values = _listed(text, spec, kind, choices)
    return Param(text=text, key=key, kind=kind, values=values)


def parse_params(texts: Sequence[str]) -> tuple[Param, ...]:
    """Every ``--param`` checked (one or two, distinct keys, the first numeric, at most MAX_POINTS in all)."""
    if not texts:
        raise ConfigError([("--param", "", "give one or two, e.g. --param load.rate=100:800:50")])
    if len(texts) > 2:
        raise ConfigError([("--param", "", f"one or two parameters (a line or a grid), got {len(texts)}")])
    params = tuple(_parse(t) for t in texts)
    if not params[0].numeric:
        raise _problem(params[0].text, f"{params[0].key}: the first parameter is the chart's x axis: it needs numbers")
    if len(params) == 2:
        if params[0].key == params[1].key:
            raise _problem(params[1].text, f"{params[1].key} is swept twice")
        total = len(params[0].values) * len(params[1].values)
        if total > MAX_POINTS:
            raise ConfigError(
                [
                    (
                        "--param",
                        "",
                        f"{len(params[0].values)} × {len(params[1].values)} = {total} points: at most {MAX_POINTS}",
                    )
                ]
            )
    return params


def grid(params: Sequence[Param]) -> list[tuple[Value, ...]]:
    """Every point, one value per param: the first param varies fastest, so each series (a value of the second) is
    contiguous."""
    if len(params) == 1:
        return [(v,) for v in params[0].values]
    return [(a, b) for b, a in product(params[1].values, params[0].values)]


def needs_stages(params: Sequence[Param]) -> bool:
    """Whether a param reaches into a stage: then :func:`overlay_at` needs the stage list to copy."""
    return any(p.key.startswith("stages.") for p in params)


def overlay_at(
    params: Sequence[Param], point: Sequence[Value], stages: Sequence[Mapping[str, object]] = ()
) -> dict[str, object]:
    """The config overlay that sets each param to its value at ``point``, nested like the TOML.

    A ``stages.NAME.…`` param sets its value in a copy of ``stages`` (the run's stage list, as tables): a list is
    replaced whole, never merged.
    """
    overlay: dict[str, object] = {}
    copied: list[dict[str, object]] | None = None
    for param, value in zip(params, point, strict=True):
        parts = param.key.split(".")
        if parts[0] == "stages":
            if copied is None:
                copied = [copy.deepcopy(dict(stage)) for stage in stages]
                overlay["stages"] = copied
            found = [stage for stage in copied if stage.get("name") == parts[1]]
            if not found:
                names = ", ".join(str(stage.get("name")) for stage in copied)
                raise _problem(param.text, f"{param.key}: no stage named {parts[1]!r} (the stages: {names})")
            table, parts = found[0], parts[2:]
        else:
            table = overlay
        *path, last = parts
        for part in path:
            inner = table.get(part)
            if not isinstance(inner, dict):  # absent, or an optional table left null: a table of its own
                inner = {}
                table[part] = inner
            table = inner
        table[last] = value
    return overlay
