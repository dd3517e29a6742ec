"""Stage handlers the handler tests name in their configs (``handler_fixtures:record`` …); they record their calls."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from chaosd.handlers import StageContext
from chaosd.pipeline import Task


@dataclass(frozen=True)
class Call:
    task: Task
    context: StageContext
    started: float  # the loop's clock
    ended: float | None = None  # when it returned, raised or was cancelled
    cancelled: bool = False


CALLS: list[Call] = []


def reset() -> None:
    CALLS.clear()
    TEARDOWNS.clear()


def _now() -> float:
    return asyncio.get_running_loop().time()


async def record(task: Task, context: StageContext) -> str:
    CALLS.append(Call(task, context, _now()))
    return f"done {task.id}"


async def boom(task: Task, context: StageContext) -> None:
    CALLS.append(Call(task, context, _now()))
    raise RuntimeError(f"tool refused task {task.id}")


async def hang(task: Task, context: StageContext) -> None:
    """Never answers on its own: only the stage timeout ends it."""
    started = _now()
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        CALLS.append(Call(task, context, started, _now(), cancelled=True))
        raise


class _Tool:
    async def __call__(self, task: Task, context: StageContext) -> None:
        CALLS.append(Call(task, context, _now()))


tool = _Tool()  # an object with an async __call__ is a handler too


TEARDOWNS: list[int] = []  # at each teardown, how many calls had ended cancelled by then


async def count_cancelled(state: object, info: object) -> None:
    """A teardown: notes how many calls had been cancelled and had ended when it ran."""
    TEARDOWNS.append(sum(1 for call in CALLS if call.cancelled))


def not_async(task: Task, context: StageContext) -> None:
    """A plain function: refused at config load."""


VALUE = 42
