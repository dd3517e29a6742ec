"""User stage handlers: ``kind = "python"`` stages run ``package.module:function``, an async callable of yours.

The handler is called as ``await handler(task, context)`` with the :class:`StageContext` below. Returning is
success (the value is not used); raising is a failed attempt, retried per the stage's policy. Handlers run on
the real clock only: a virtual-time run refuses them.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import os
import sys
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol

from chaosd.core.errors import ConfigError

__all__ = [
    "Handler",
    "HandlerError",
    "Setup",
    "StageContext",
    "StageInfo",
    "Teardown",
    "handler_problems",
    "load_handler",
    "refuse_virtual_time",
]

# Called with the pipeline's ``Task`` (None in a Redis worker process, which walks a stream entry: its task_id is -1).
# This module sits below the pipeline and only passes the task through, so to it the task is opaque.
Handler = Callable[[object, "StageContext"], Awaitable[object]]


@dataclass(frozen=True, slots=True)
class StageContext:
    """What a handler knows about the attempt it serves; a new one for every attempt.

    ``deadline`` is on the event loop's clock (``asyncio.get_running_loop().time()``): the handler is cancelled
    at it. It is None when the stage has no ``timeout``. ``faults`` names the faults acting on this attempt,
    in catalogue terms: ``slow_agent`` (the worker is slow: the attempt was delayed before the call) and
    ``latency_jitter`` (likewise). A ``tool_timeout`` or ``llm_failure`` fails the attempt instead of calling
    the handler, so a handler that runs never sees those two; the ``dependency_*`` faults on the stage's
    dependencies show here too. ``params`` is the stage's ``params`` table, ``state`` what its ``setup``
    returned, and ``dependencies`` the URL to call each dependency at: chaosd's fault proxy in front of it.
    """

    stage: str
    attempt: int  # 1 for the first attempt of this stage for this delivery, 2 for the first retry, …
    timeout: float | None  # seconds the attempt may take (the stage's timeout), None = no limit
    deadline: float | None
    faults: tuple[str, ...]
    task_id: int
    params: Mapping[str, object] = field(default_factory=lambda: MappingProxyType({}))
    state: object = None  # what the stage's setup returned (None without one)
    dependencies: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))  # name -> proxy URL


@dataclass(frozen=True, slots=True)
class StageInfo:
    """What a stage's ``setup`` and ``teardown`` are told: ``setup(info)`` returns the state every call sees
    as ``context.state``; ``teardown(state, info)`` gets it back at stop."""

    stage: str
    params: Mapping[str, object]
    dependencies: Mapping[str, str]  # name -> the URL of chaosd's proxy in front of it


Setup = Callable[[StageInfo], Awaitable[object]]
Teardown = Callable[[object, StageInfo], Awaitable[object]]


class HandlerError(ValueError):
    """A handler spec that cannot be used; the message says why (one line)."""


class _Stage(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def kind(self) -> str: ...

    @property
    def handler(self) -> str | None: ...

    @property
    def setup(self) -> str | None: ...

    @property
    def teardown(self) -> str | None: ...

    @property
    def dependencies(self) -> tuple[str, ...]: ...


def _is_async_callable(obj: object) -> bool:
    if inspect.iscoroutinefunction(obj):
        return True
    call = getattr(obj, "__call__", None)  # noqa: B004 - an instance whose __call__ is async
    return not isinstance(obj, type) and call is not None and inspect.iscoroutinefunction(call)


def _search_working_directory() -> None:
    # `python -m chaosd` finds modules in the working directory, the `chaosd` script does not: make both
    # find them, after everything installed, so a local file never shadows a package.
    cwd = os.getcwd()
    if "" not in sys.path and cwd not in sys.path:
        sys.path.append(cwd)


def load_handler(spec: str) -> Handler:
    """Import ``package.module:function`` (or ``module:object.attribute``) and check it is an async callable."""
    module_name, sep, attr_path = spec.partition(":")
    if (
        not sep
        or not all(part.isidentifier() for part in module_name.split("."))
        or not all(part.isidentifier() for part in attr_path.split("."))
    ):
        raise HandlerError(f'expected "package.module:function" (got {spec!r})')
    _search_working_directory()
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # an import runs the module: whatever it raises is the reason
        reason = " ".join(f"{type(exc).__name__}: {exc}".split())
        raise HandlerError(f"cannot import module {module_name!r} ({reason})") from None
    obj: object = module
    for depth, part in enumerate(attr_path.split(".")):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            owner = ".".join([module_name, *attr_path.split(".")[:depth]])
            raise HandlerError(f"{owner!r} has no attribute {part!r}") from None
    if not _is_async_callable(obj):
        raise HandlerError(f"{spec!r} is not an async callable (define it with `async def`; got {type(obj).__name__})")
    handler: Handler = obj  # type: ignore[assignment]
    return handler


def handler_problems(stages: Sequence[_Stage], dependencies: Collection[str] = ()) -> list[tuple[str, str]]:
    """(field, problem) for each stage whose handler, setup, teardown or dependencies are missing, misplaced or
    unusable; imports each function it names."""
    problems: list[tuple[str, str]] = []
    for stage in stages:
        where = f"stages.{stage.name}"
        if stage.kind != "python":
            for key, what in (
                ("handler", "a handler"),
                ("setup", "a setup"),
                ("teardown", "a teardown"),
                ("dependencies", "dependencies"),
            ):
                if getattr(stage, key):
                    problems.append(
                        (f"{where}.{key}", f'only a kind = "python" stage takes {what} (this one is {stage.kind!r})')
                    )
            continue
        if stage.handler is None:
            problems.append((f"{where}.handler", 'required for kind = "python" (e.g. "mypackage.tools:call")'))
        for key, spec in (("handler", stage.handler), ("setup", stage.setup), ("teardown", stage.teardown)):
            if spec is None:
                continue
            try:
                load_handler(spec)
            except HandlerError as exc:
                problems.append((f"{where}.{key}", str(exc)))
        if len(set(stage.dependencies)) != len(stage.dependencies):
            problems.append((f"{where}.dependencies", "a dependency is listed twice"))
        for name in stage.dependencies:
            if name not in dependencies:
                known = ", ".join(sorted(dependencies)) or "none declared"
                near = difflib.get_close_matches(name, list(dependencies), n=1)
                hint = f"; did you mean {near[0]!r}?" if near else ""
                problems.append((f"{where}.dependencies", f"{name!r} is not in [dependencies]{hint} ({known})"))
    return problems


def refuse_virtual_time(stages: Sequence[_Stage], source: str = "configuration") -> None:
    """Raise :class:`ConfigError` when a stage runs user code: that code waits on the real clock, not a virtual one."""
    python = [s.name for s in stages if s.kind == "python"]
    if python:
        raise ConfigError(
            [
                (
                    source,
                    f"stages.{python[0]}.kind",
                    '"python" stages run your own code on the real clock, which virtual time cannot speed up: '
                    "use `chaosd run --realtime`, or the daemon (`chaosd --config FILE`)",
                )
            ]
        )
