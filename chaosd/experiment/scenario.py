"""Scenario files, YAML or JSON: a name, actions in the ARES Arena form, and chaosd's own optional keys.

``actions`` use the ARES Arena form (``- delay: 8s`` then ``action: {type, target_id, metadata}``,
delays relative to the previous action); they are validated here and executed by the fault injector.
A scenario without ``duration`` runs until its last fault ends, plus :data:`SETTLE_S`.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, SupportsFloat, SupportsIndex

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator
from yaml.composer import Composer
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.error import Mark, MarkedYAMLError
from yaml.events import NodeEvent
from yaml.nodes import Node
from yaml.parser import Parser
from yaml.reader import Reader, ReaderError
from yaml.resolver import Resolver
from yaml.scanner import Scanner

from chaosd.config.problems import closest, known_keys
from chaosd.config.settings import Settings, deep_merge, load_settings
from chaosd.core.durations import Seconds, parse_duration
from chaosd.core.errors import ConfigError, FaultError, NotFound, ScenarioError
from chaosd.experiment.expectations import Expectations

if TYPE_CHECKING:
    from yaml._yaml import Mark as CMark  # libyaml's

__all__ = [
    "CHECKS",
    "MAX_SCENARIO_BYTES",
    "SETTLE_S",
    "FaultWindow",
    "Scenario",
    "ScenarioAction",
    "find_scenario",
    "load_scenario",
    "parse_scenario",
    "resolve_scenario_name",
    "scenario_names",
    "scenario_summaries",
    "seconds_of",
    "settings_for",
    "shown_path",
    "split_metadata",
]

SHIPPED = Path(__file__).resolve().parents[1] / "scenarios"  # package data: in a wheel too
# The shipped scenarios are 1–2 KiB. Reading is synchronous: 64 KiB of dense YAML takes ~0.5 s.
MAX_SCENARIO_BYTES = 64 * 1024

# Time a scenario without ``duration`` runs after its last fault ends: enough to see the service recover
# (recovery.confirm is 3 s; the shipped scenarios' slowest recovery is about 15 s) without waiting for
# recovery.limit (60 s), the point at which a recovery counts as failed.
SETTLE_S = 30.0
# Actions that do not inject a fault, so have no TTL: a check of the pipeline, or a push of the callers' policy.
CHECKS = ("verify_leader", "set_clients")

_NAME = re.compile(r"[A-Za-z0-9_-]{1,100}")
_SUFFIXES = (".yaml", ".yml", ".json")
_MAX_DEPTH = 32
_MAX_NODES = 100_000
_MAX_ALIASES = 100


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def seconds_of(value: object) -> float:
    """A duration as written (``8s``, a number) in seconds: :func:`parse_duration`, then ``float()``.

    Raises ValueError or TypeError as those raise them: for text that is not a duration, or a value
    ``float()`` cannot take (a list, a mapping, a date).
    """
    parsed = parse_duration(value)
    if isinstance(parsed, str | bytes | SupportsFloat | SupportsIndex):  # what float() takes
        return float(parsed)
    raise TypeError(f"float() argument must be a string or a real number, not {_type_name(parsed)!r}")


def split_metadata(metadata: Mapping[str, object]) -> tuple[float | None, dict[str, object]]:
    """ARES metadata → (ttl, params): ``duration`` is the fault's TTL, ``params`` or any other key a parameter.

    ``params`` is what ``dict()`` makes of it (a mapping, or pairs); TypeError or ValueError as it raises them.
    """
    meta = dict(metadata)
    ttl = meta.pop("duration", None)
    given = meta.pop("params", None) or {}
    if not isinstance(given, Iterable):
        raise TypeError(f"{_type_name(given)!r} object is not iterable")  # as dict() says
    params: dict[str, object] = dict(given)
    params.update(meta)
    return (None if ttl is None else seconds_of(ttl)), params


def _type_name(value: object) -> str:
    """Its type as Python's own messages name the types a document parses to: ``list``, ``datetime.date``."""
    kind = type(value)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


class ActionSpec(_Model):
    type: str = Field(min_length=1)
    target_id: str | None = None
    metadata: dict[str, object] = Field(default_factory=dict)

    def ttl(self, default_ttl: float) -> float | None:
        """How long the fault lasts: ``metadata.duration``, else ``default_ttl``; None for a check.

        An unreadable ``metadata.duration`` counts as ``default_ttl`` here: ``check_actions`` refuses it.
        """
        if self.type in CHECKS:
            return None
        raw = self.metadata.get("duration")
        try:
            ttl = seconds_of(raw) if raw is not None else default_ttl
        except (TypeError, ValueError):
            return default_ttl
        return ttl if math.isfinite(ttl) and ttl > 0 else default_ttl


class ScenarioAction(_Model):
    delay: Seconds = Field(default=0.0, ge=0, allow_inf_nan=False)
    action: ActionSpec


@dataclass(frozen=True, slots=True)
class FaultWindow:
    """When one action's fault runs, in seconds from the scenario's start (unscaled)."""

    index: int  # position in ``actions``
    action: str
    start: float
    end: float


class Scenario(_Model):
    name: str = Field(min_length=1)
    description: str = ""
    # ARES metadata, accepted and carried; chaosd does nothing with it.
    version: str | int | float | None = None
    author: str | None = None
    tags: tuple[str, ...] = ()
    seed: int | None = Field(default=None, ge=0)
    warmup: Seconds | None = Field(default=None, ge=0, allow_inf_nan=False)
    load: dict[str, object] = Field(default_factory=dict)
    config: dict[str, object] = Field(default_factory=dict)
    actions: tuple[ScenarioAction, ...] = ()
    # After ``actions``: its validator reads them. None → derived from the actions (``run_duration``).
    duration: Seconds | None = Field(default=None, gt=0, allow_inf_nan=False, validate_default=True)
    # Read when loaded: a duration is in seconds from here on, and a value that cannot be compared is refused here.
    expect: Expectations = Field(default_factory=Expectations)

    @field_validator("duration")
    @classmethod
    def _derivable(cls, value: float | None, info: ValidationInfo) -> float | None:
        if value is None and "actions" in info.data and not info.data["actions"]:
            raise ValueError("Field required when the scenario has no actions (otherwise it is derived from them)")
        return value

    def fault_windows(self, default_ttl: float) -> tuple[FaultWindow, ...]:
        """Each fault's start and end: delays add up; a fault lasts its TTL (``default_ttl`` when not given)."""
        windows = []
        at = 0.0
        for i, item in enumerate(self.actions):
            at += item.delay
            ttl = item.action.ttl(default_ttl)
            if ttl is not None:
                windows.append(FaultWindow(i, item.action.type, at, at + ttl))
        return tuple(windows)

    def run_duration(self, default_ttl: float) -> float:
        """``duration`` as written; without one, when the last fault ends (or the last action runs) plus ``SETTLE_S``.

        ``default_ttl`` is the configured ``faults.default_ttl``, the TTL of an action without
        ``metadata.duration``.
        """
        if self.duration is not None:
            return self.duration
        last_action = sum(item.delay for item in self.actions)
        last_fault = max((w.end for w in self.fault_windows(default_ttl)), default=0.0)
        return max(last_action, last_fault) + SETTLE_S

    def overlay(self) -> dict[str, object]:
        """The scenario's changes to the configuration, in the config file's shape."""
        overlay = deep_merge(self.config, {"load": self.load} if self.load else {})
        if self.seed is not None:
            overlay = deep_merge(overlay, {"seed": self.seed})
        return overlay


def find_scenario(name_or_path: str) -> Path:
    """A path as given if it exists or has a slash; else a scenario in ``./scenarios``, then the shipped ones.

    ``baseline`` → ``scenarios/baseline.yaml`` (or ``.yml``, ``.json``); ``cascading_storm.yaml`` with no
    such file in the working directory → ``scenarios/cascading_storm.yaml``. A path with a slash that does not
    exist is returned as given, for the loader to report. A name found nowhere raises :class:`ScenarioError`
    with the closest scenario name and the list of them. For the command line only: a local user may name any
    file they can read. Names from the network go through :func:`resolve_scenario_name`.
    """
    path = Path(name_or_path)
    if path.exists() or "/" in name_or_path:
        return path
    names = [name_or_path] if path.suffix in _SUFFIXES else [f"{name_or_path}{s}" for s in _SUFFIXES]
    for folder in (Path("scenarios"), SHIPPED):
        for name in names:
            candidate = folder / name
            if candidate.is_file():
                return candidate
    known = scenario_names()
    what = "file not found, nor a scenario of that name" if path.suffix else "no such scenario file or name"
    hint = _did_you_mean(path.stem if path.suffix in _SUFFIXES else name_or_path, known) or "."
    listed = ", ".join(known) or "none"
    raise ScenarioError([(name_or_path, "", f"{what} (in ./scenarios or the shipped ones){hint} Scenarios: {listed}")])


def shown_path(path: Path) -> str:
    """A scenario's path as a summary shows it: a shipped one by its file name, ``baseline.yaml (shipped)``."""
    return f"{path.name} (shipped)" if path.parent.resolve() == SHIPPED else str(path)


def _did_you_mean(name: str, known: Iterable[str]) -> str:
    """``; did you mean 'baseline'?`` for the closest of ``known`` (difflib's ratio of at least 0.6), else ``""``."""
    close = difflib.get_close_matches(name, list(known), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def scenario_names(limit: int = 200) -> list[str]:
    """The names :func:`resolve_scenario_name` takes: scenarios in ``./scenarios``, then the shipped ones."""
    names: set[str] = set()
    for folder in (Path("scenarios"), SHIPPED):
        with contextlib.suppress(OSError):
            for path in folder.iterdir():
                if path.suffix in _SUFFIXES and _NAME.fullmatch(path.stem) and path.is_file():
                    names.add(path.stem)
    return sorted(names)[:limit]


def scenario_summaries(limit: int = 200) -> list[tuple[str, str]]:
    """(name, the first phrase of its description) for each of :func:`scenario_names`; ``""`` for one unreadable."""
    summaries = []
    for name in scenario_names(limit):
        try:
            description = load_scenario(find_scenario(name), max_bytes=MAX_SCENARIO_BYTES).description
        except ConfigError:
            description = ""
        phrase = re.split(r"[:;.]\s", description.strip() + " ", maxsplit=1)[0].strip()
        summaries.append((name, phrase if len(phrase) <= 72 else phrase[:71] + "…"))
    return summaries


def resolve_scenario_name(name: str) -> Path:
    """The resolved path of the scenario called ``name`` in ``./scenarios`` or the shipped directory.

    ``name`` is a name, never a path: 1–100 letters, digits, ``_`` or ``-``, optionally ending in
    ``.yaml``, ``.yml`` or ``.json``; without one, the first of those that exists. A file (or symlink)
    that resolves outside the directory it was found in is refused, not skipped. Raises
    :class:`FaultError` on ``name``: 422 for a malformed name, 404 when there is no such scenario.
    """
    suffix = next((s for s in _SUFFIXES if name.endswith(s)), "")
    stem = name.removesuffix(suffix) if suffix else name
    if _NAME.fullmatch(stem) is None:
        # The name is not echoed: it failed the pattern, so it may hold anything.
        raise FaultError(
            "name",
            "must be a scenario name (1–100 letters, digits, '_' or '-', optionally ending in .yaml, .yml or .json), "
            "not a path",
        )
    for folder in (Path("scenarios"), SHIPPED):
        try:
            root = folder.resolve(strict=True)
        except OSError:
            continue
        for ext in (suffix,) if suffix else _SUFFIXES:
            candidate = root / f"{stem}{ext}"
            if not candidate.is_symlink() and not candidate.exists():
                continue
            try:
                resolved = candidate.resolve(strict=True)
            except (OSError, RuntimeError):  # a dangling symlink or a loop
                resolved = None
            if resolved is None or not resolved.is_relative_to(root) or not resolved.is_file():
                raise NotFound("name", f"scenario {stem!r} does not resolve to a file in {folder.name}/")
            return resolved
    hint = _did_you_mean(stem, scenario_names())  # the names GET /api/v1/scenarios lists anyway
    raise NotFound("name", f"no scenario named {stem!r} in the scenario directories{hint}")


def load_scenario(path: Path, *, max_bytes: int | None = None) -> Scenario:
    """The scenario in ``path``; problems name the path, never quote the file's contents."""
    try:
        with path.open("rb") as fh:
            data = fh.read() if max_bytes is None else fh.read(max_bytes + 1)
    except FileNotFoundError:
        raise ScenarioError([(str(path), "", "file not found")]) from None
    except OSError as exc:
        raise ScenarioError([(str(path), "", f"cannot read: {exc.strerror}")]) from None
    return parse_scenario(data, str(path), max_bytes=max_bytes)


def parse_scenario(text: str | bytes, source: str, *, max_bytes: int | None = None) -> Scenario:
    """A scenario from YAML or JSON; every problem names ``source``, the field and what is wrong.

    A document that starts with ``{`` and is valid JSON is read as JSON (PyYAML reads YAML 1.1, which
    misreads some JSON: ``1e3`` as text, ``\\ud83d\\ude00`` escapes as errors); one that is not, as YAML
    (``{name: x}`` is a YAML flow mapping), unless ``source`` ends in ``.json``.

    Safe for untrusted input: bytes must be UTF-8, the document at most ``max_bytes`` (UTF-8) bytes,
    at most 32 collections deep and at most 100,000 nodes with each alias counted at the size of
    what it refers to (so "billion laughs" alias bombs are refused early). Anchors and aliases are
    allowed, at most 100 alias uses, never recursive. Messages give a position (line, column) and
    the kind of problem, never the document's text or values.
    """
    size = len(text) if isinstance(text, bytes) or text.isascii() else len(text.encode("utf-8", "surrogatepass"))
    if max_bytes is not None and size > max_bytes:
        raise ScenarioError([(source, "", f"larger than {max_bytes} bytes")])
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ScenarioError([(source, "", f"not valid UTF-8 (byte {exc.start + 1})")]) from None
    unprintable = Reader.NON_PRINTABLE.search(text)
    if unprintable is not None:
        at = unprintable.start()
        line, column = text.count("\n", 0, at) + 1, at - text.rfind("\n", 0, at)
        problem = f"unacceptable character #x{ord(unprintable[0]):04x}"
        raise ScenarioError([(source, "", f"not valid YAML at line {line}, column {column}: {problem}")])
    raw = _json_document(text, source)
    if raw is _NOT_JSON:
        loader = _BoundedLoader(text)
        try:
            raw = loader.get_single_data()
        except _Refused as exc:
            raise ScenarioError([(source, "", _describe(exc, "refused"))]) from None
        except yaml.YAMLError as exc:
            raise ScenarioError([(source, "", _describe(exc, "not valid YAML"))]) from None
        finally:
            loader.dispose()
    if not isinstance(raw, dict):
        raise ScenarioError([(source, "", "a scenario is a mapping with a name, and actions or a duration")])
    try:
        return Scenario.model_validate(raw)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            field = ".".join(_loc_part(p) for p in error["loc"]) or "(top level)"
            msg = _unknown_key(tuple(error["loc"])) if error["type"] == "extra_forbidden" else str(error["msg"])
            problems.append((source, field, _without_input(msg.removeprefix("Value error, "), error.get("input"))))
        raise ScenarioError(problems) from None


def _unknown_key(loc: tuple[int | str, ...]) -> str:
    """``unknown key; did you mean duration?`` for a misspelt key of the scenario's own (not its config's)."""
    known = known_keys(Scenario, loc[:-1])
    near = closest(str(loc[-1]), known) if known else None
    if near is None:
        return "unknown key"
    return f"unknown key; did you mean {'.'.join(str(p) for p in (*loc[:-1], near))}?"


def settings_for(
    scenario: Scenario, path: Path, config_path: Path | None, overrides: Mapping[str, object] | None = None
) -> Settings:
    """The config file overlaid with the scenario, the environment, then ``overrides`` (the command line's).

    The file must be valid by itself as well. ``run.duration`` is the scenario's duration: as written, or
    derived from its actions and the configured ``faults.default_ttl`` when it gives none. Errors in the
    overlay name the scenario file and the key as the scenario spells it (``config.queue.capacity``).
    """
    try:
        settings = load_settings(config_path, scenario.overlay(), overlay_source=str(path), overrides=overrides)
    except ConfigError as exc:
        problems = [
            (src, _scenario_field(field), _HINT.sub(lambda m: f"did you mean {_scenario_field(m[1])}?", msg))
            if src == str(path)
            else (src, field, msg)
            for src, field, msg in exc.problems
        ]
        raise ScenarioError(problems) from None
    duration = scenario.run_duration(settings.faults.default_ttl)
    return settings.model_copy(update={"run": settings.run.model_copy(update={"duration": duration})})


_HINT = re.compile(r"did you mean ([\w.-]+)\?")


def _scenario_field(field: str) -> str:
    # Keys the scenario sets under `load:` are reported where the user wrote them.
    return field if field.startswith("load") or field == "seed" else f"config.{field}"


# --- JSON ------------------------------------------------------------------------------------------

_NOT_JSON = object()


def _json_document(text: str, source: str) -> object:
    """The JSON document in ``text``, held to the YAML limits; ``_NOT_JSON`` if it is not JSON (read it as YAML)."""
    body = text.removeprefix("\ufeff")
    if not body.lstrip(" \t\r\n").startswith("{"):
        return _NOT_JSON
    try:
        raw = json.loads(body, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        if not source.endswith(".json"):
            return _NOT_JSON
        # JSON's messages are fixed phrases ("Expecting ',' delimiter"): they quote nothing.
        raise ScenarioError(
            [(source, "", f"not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}")]
        ) from None
    except RecursionError:
        raise ScenarioError([(source, "", f"refused: nested deeper than {_MAX_DEPTH} levels")]) from None
    except ValueError:  # NaN or Infinity, or an integer longer than Python converts
        raise ScenarioError([(source, "", "not valid JSON: NaN, Infinity or a number too long to read")]) from None
    _check_shape(raw, source)
    return raw


def _no_constant(name: str) -> NoReturn:
    raise ValueError(name)


def _check_shape(document: object, source: str) -> None:
    """The YAML limits on a parsed JSON document: 32 collections deep, 100,000 nodes."""
    nodes = 0
    stack: list[tuple[object, int]] = [(document, 1)]
    while stack:
        value, depth = stack.pop()
        nodes += 1
        if nodes > _MAX_NODES:
            raise ScenarioError([(source, "", f"refused: more than {_MAX_NODES} nodes")])
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else None
        if children is None:
            continue
        if depth > _MAX_DEPTH:
            raise ScenarioError([(source, "", f"refused: nested deeper than {_MAX_DEPTH} levels")])
        stack.extend((child, depth + 1) for child in children)


# --- bounded YAML -----------------------------------------------------------------------------------


class _Refused(MarkedYAMLError):
    """A document refused for its shape (depth, size, aliases) rather than its syntax."""

    def __init__(self, problem: str, mark: Mark | CMark | None) -> None:
        if mark is not None and not isinstance(mark, Mark):  # libyaml's: its position, as yaml.error's
            mark = Mark(mark.name, mark.index, mark.line, mark.column, None, 0)
        super().__init__(None, None, problem, mark)


if yaml.__with_libyaml__:
    from yaml._yaml import CParser as _Events  # libyaml reads about five times faster than pure Python
else:  # pragma: no cover — a PyYAML built without libyaml

    class _Events(Reader, Scanner, Parser):  # type: ignore[no-redef]
        def __init__(self, stream: str) -> None:
            Reader.__init__(self, stream)
            Scanner.__init__(self)
            Parser.__init__(self)


class _BoundedLoader(Composer, _Events, SafeConstructor, Resolver):
    """``SafeLoader`` whose (Python) composer counts, so a bomb is refused before it is built.

    Every node counts once; an alias counts as the whole subtree it refers to, and that subtree's
    height counts towards the depth where the alias stands.
    """

    def __init__(self, stream: str) -> None:
        _Events.__init__(self, stream)
        Composer.__init__(self)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)
        self._level = 0  # collections enclosing the node being composed
        self._peak = 0  # deepest level reached in the subtree being composed
        self._nodes = 0
        self._aliases = 0
        self._expanded: dict[str, tuple[int, int]] = {}  # anchor → (nodes, height) once composed

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        level = self._level
        event = self.peek_event()  # AliasEvent, ScalarEvent or a collection's start
        if not isinstance(event, NodeEvent):  # not a node's first event: the composer's own error
            return super().compose_node(parent, index)
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > _MAX_ALIASES:
                raise _Refused(f"too many YAML aliases (more than {_MAX_ALIASES})", event.start_mark)
            if event.anchor in self.anchors:  # an undefined one is left to the composer's own error
                if event.anchor not in self._expanded:
                    raise _Refused("recursive YAML alias (a node inside itself)", event.start_mark)
                nodes, height = self._expanded[event.anchor]
                self._grow(nodes, level + height, event.start_mark)
            return super().compose_node(parent, index)
        collection = int(self.check_event(yaml.SequenceStartEvent, yaml.MappingStartEvent))
        first, outer_peak = self._nodes, self._peak
        self._peak = level
        self._grow(1, level + collection, event.start_mark)
        self._level = level + collection
        node = super().compose_node(parent, index)
        self._level = level
        if event.anchor is not None:
            self._expanded[event.anchor] = (self._nodes - first, self._peak - level)
        self._peak = max(outer_peak, self._peak)
        return node

    def _grow(self, nodes: int, depth: int, mark: Mark | CMark | None) -> None:
        self._nodes += nodes
        self._peak = max(self._peak, depth)
        if depth > _MAX_DEPTH:
            raise _Refused(f"nested deeper than {_MAX_DEPTH} levels", mark)
        if self._nodes > _MAX_NODES:
            raise _Refused(f"more than {_MAX_NODES} YAML nodes, counting what aliases expand to", mark)

    def construct_object(self, node: Node, deep: bool = False) -> object:
        # int("abc"), a 5,000-digit integer or 2020-13-45 raise ValueError quoting the value.
        try:
            return super().construct_object(node, deep)
        except (ValueError, OverflowError):
            kind = str(node.tag).rsplit(":", 1)[-1]
            raise ConstructorError(None, None, f"not a valid {kind} value", node.start_mark) from None


# A quoted fragment of a YAML problem text is kept only if it is one character or a token name.
_QUOTED = re.compile(r"'(?:[^'\\]|\\.)*'" r'|"(?:[^"\\]|\\.)*"')
_KEEP = re.compile(r"""['"](?:<[a-z ]+>|.|\\(?:[a-z0-9]|x[0-9a-f]{2}|u[0-9a-f]{4}|U[0-9a-f]{8}))['"]""")


def _describe(exc: yaml.YAMLError, prefix: str) -> str:
    """``prefix at line L, column C: problem`` — yaml's own ``str()`` would print a snippet of the document."""
    if isinstance(exc, ReaderError):  # libyaml's printable set differs a little from Python's
        return f"{prefix}: unacceptable character #x{exc.character:04x}"
    if not isinstance(exc, MarkedYAMLError):
        return prefix
    mark = exc.problem_mark or exc.context_mark
    # Contexts and problems are fixed phrases, bar the quoted tags, anchors and characters redacted here.
    said = ", ".join(part for part in (exc.context, exc.problem) if part)
    problem = _QUOTED.sub(lambda m: m[0] if _KEEP.fullmatch(m[0]) else "'…'", said)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"{prefix}{where}: {problem}" if problem else f"{prefix}{where}"


def _loc_part(part: object) -> str:
    text = str(part)
    return text if len(text) <= 40 and text.isprintable() else f"{text[:40].encode('unicode_escape').decode()}…"


def _without_input(msg: str, value: object) -> str:
    # Custom validators (durations) quote the text they were given; the field name says where to look.
    # Numbers are left alone: pydantic's own messages quote the bound ("greater than 0"), not the input.
    if isinstance(value, str | bytes):
        shown = repr(value)
        msg = msg.replace(f": {shown}", "").replace(shown, "the value")
    return msg
