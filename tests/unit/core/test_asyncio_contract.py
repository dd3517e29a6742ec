"""What chaosd takes from asyncio's internals (chaosd/core/_asyncio_internals.py), checked against this interpreter.

One test per assumption named there, each named after it: a Python whose asyncio changed one of them fails here
before a virtual-time run quietly differs.
"""

from __future__ import annotations

import ast
import asyncio
import collections
import contextvars
import functools
import heapq
import inspect
import random
import sys
import time
from asyncio import base_events
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chaosd.core import _asyncio_internals as internals
from chaosd.core.clock import VirtualEventLoop

ASYNCIO = Path(asyncio.__file__).parent


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.SelectorEventLoop()
    yield loop
    loop.close()


@pytest.fixture
def vloop() -> Iterator[VirtualEventLoop]:
    loop = VirtualEventLoop()
    yield loop
    loop.close()


def _nothing(*_args: object) -> None:
    pass


def _slots(cls: type) -> set[str]:
    names: set[str] = set()
    for klass in cls.__mro__:
        slots = klass.__dict__.get("__slots__", ())
        names.update([slots] if isinstance(slots, str) else slots)
    return names - {"__weakref__"}


@functools.cache
def _attribute_uses() -> list[tuple[str, bool, str, str]]:
    """Every ``owner.attr`` in asyncio's functions and methods: (``Class.method`` or ``module.function``, whether
    the class is an event loop, attr, owner as written)."""
    uses = []
    for path in sorted(ASYNCIO.glob("*.py")):
        module = sys.modules.get(f"asyncio.{path.stem}")
        scopes: list[tuple[str, bool, ast.AST]] = []
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef):
                cls = getattr(module, node.name, None)
                is_loop = isinstance(cls, type) and issubclass(cls, asyncio.AbstractEventLoop)
                scopes += [
                    (f"{node.name}.{fn.name}", is_loop, fn) for fn in node.body if isinstance(fn, ast.FunctionDef)
                ]
            elif isinstance(node, ast.FunctionDef):
                scopes.append((f"{path.stem}.{node.name}", False, node))
        for name, is_loop, fn in scopes:
            uses += [
                (name, is_loop, sub.attr, ast.unparse(sub.value))
                for sub in ast.walk(fn)
                if isinstance(sub, ast.Attribute)
            ]
    return uses


def _users(attr: str, *, on: str = "") -> set[str]:
    """Where asyncio uses ``self.<attr>`` in an event loop's methods, or ``<attr>`` of a name ending in ``loop``
    anywhere (``loop.<attr>``, ``self._loop.<attr>``); with ``on``, of a name ending in ``on`` instead."""
    return {
        name
        for name, is_loop, used, owner in _attribute_uses()
        if used == attr and (owner.endswith(on) if on else (is_loop and owner == "self") or owner.endswith("loop"))
    }


def test_timer_fields(vloop: VirtualEventLoop) -> None:
    # chaosd makes its timers with object.__new__ and sets these slots itself: that is asyncio's TimerHandle only if
    # the class takes object.__new__, keeps all its state in slots, and has exactly these.
    assert asyncio.TimerHandle.__new__ is object.__new__
    assert _slots(asyncio.TimerHandle) == set(internals.TIMER_FIELDS)
    context = contextvars.copy_context()
    made = vloop.call_at(5.0, _nothing, 1, "a", context=context)
    built = asyncio.TimerHandle(5.0, _nothing, (1, "a"), vloop, context)
    assert not hasattr(built, "__dict__")
    built._scheduled = True  # type: ignore[attr-defined]  # as BaseEventLoop.call_at does once it is pushed
    fields = internals.TIMER_FIELDS
    assert {f: getattr(made, f) for f in fields} == {f: getattr(built, f) for f in fields}
    assert type(made) is asyncio.TimerHandle and made == built and hash(made) == hash(built)
    assert repr(made) == repr(built) and made.when() == 5.0 and not made.cancelled()


def test_timer_order(loop: asyncio.AbstractEventLoop) -> None:
    # Equal times are "not less" either way, whatever the callbacks: then a pair's order is its time's alone too.
    first = asyncio.TimerHandle(1.0, _nothing, (), loop)
    for other in (asyncio.TimerHandle(1.0, _nothing, (), loop), asyncio.TimerHandle(1.0, print, (7,), loop)):
        assert not first < other and not other < first
        assert not (1.0, first) < (1.0, other) and not (1.0, other) < (1.0, first)
    # Pushed and popped alike, a heap of pairs pops the very handles a heap of handles pops, ties included.
    rng = random.Random(3)
    handles: list[asyncio.TimerHandle] = []
    pairs: list[tuple[float, asyncio.TimerHandle]] = []
    from_handles, from_pairs = [], []
    for _ in range(3000):
        if rng.random() < 0.6 or not handles:
            timer = asyncio.TimerHandle(rng.choice([0.5, 1.0, rng.uniform(0, 2)]), _nothing, (), loop)
            heapq.heappush(handles, timer)
            heapq.heappush(pairs, (timer.when(), timer))
        else:
            from_handles.append(heapq.heappop(handles))
            from_pairs.append(heapq.heappop(pairs)[1])
    assert [id(timer) for timer in from_pairs] == [id(timer) for timer in from_handles]


def test_timer_cancel(vloop: VirtualEventLoop) -> None:
    timer = vloop.call_at(10.0, _nothing)
    assert vloop._timer_cancelled_count == 0
    timer.cancel()
    timer.cancel()
    assert timer._cancelled is True and vloop._timer_cancelled_count == 1
    unscheduled = asyncio.TimerHandle(10.0, _nothing, (), vloop)  # never pushed: not counted
    unscheduled.cancel()
    assert unscheduled._cancelled is True and vloop._timer_cancelled_count == 1


def test_heap_owners() -> None:
    # The heap holds (when, handle) pairs: any other asyncio code that read it would find pairs, not handles.
    assert _users("_scheduled") == {
        "BaseEventLoop.__init__",
        "BaseEventLoop.call_at",
        "BaseEventLoop.close",
        "BaseEventLoop._run_once",
    }
    assert "call_at" in asyncio.BaseEventLoop.call_later.__code__.co_names  # asyncio's sleeps and timeouts


def test_loop_state(loop: asyncio.AbstractEventLoop) -> None:
    kinds = {
        "_scheduled": list,
        "_ready": collections.deque,
        "_timer_cancelled_count": int,
        "_stopping": bool,
        "_closed": bool,
        "_clock_resolution": float,
    }
    assert {name: type(getattr(loop, name)) for name in kinds} == kinds
    handle = loop.call_soon(_nothing)
    assert loop._ready[-1] is handle  # type: ignore[attr-defined]
    loop.stop()
    assert loop._stopping is True  # type: ignore[attr-defined]
    loop.close()
    assert loop._closed is True  # type: ignore[attr-defined]


def test_one_poll() -> None:
    # The virtual selector's clock moves when it is polled with a timeout: a poll anywhere but the iteration chaosd
    # wrote would move virtual time.
    assert _users("select", on="_selector") == {"BaseEventLoop._run_once"}
    assert _users("_process_events") == {"BaseEventLoop._run_once"}
    process_events = asyncio.SelectorEventLoop._process_events  # type: ignore[attr-defined]
    assert list(inspect.signature(process_events).parameters) == ["self", "event_list"]
    assert list(inspect.signature(asyncio.SelectorEventLoop._run_once).parameters) == ["self"]  # type: ignore[attr-defined]
    # Only the iteration reads the clock's resolution, which the virtual loop sets to 1 ns.
    assert _users("_clock_resolution") == {"BaseEventLoop.__init__", "BaseEventLoop._run_once"}


class _Turns(asyncio.SelectorEventLoop):
    turns = 0

    def _run_once(self) -> None:
        self.turns += 1
        super()._run_once()  # type: ignore[misc]


def test_run_forever_turns() -> None:
    loop = _Turns()
    try:
        loop.run_until_complete(asyncio.sleep(0))
    finally:
        loop.close()
    assert loop.turns >= 2  # the task's first step, then its wake-up
    # No other method runs what is ready: the callbacks queue in _ready and only the iteration pops them.
    assert _users("_ready") == {
        "BaseEventLoop.__init__",
        "BaseEventLoop._add_callback",
        "BaseEventLoop._call_soon",
        "BaseEventLoop._run_once",
        "BaseEventLoop.close",
    }


def test_handle_run(loop: asyncio.AbstractEventLoop) -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="outside")
    context = contextvars.copy_context()
    context.run(var.set, "inside")
    seen: list[tuple[str, tuple[object, ...]]] = []

    def callback(*args: object) -> None:
        seen.append((var.get(), args))

    handle = loop.call_soon(callback, 1, 2, context=context)
    assert handle._callback is callback and handle._args == (1, 2)  # type: ignore[attr-defined]
    assert handle._context is context and handle._cancelled is False  # type: ignore[attr-defined]
    handle._run()  # type: ignore[attr-defined]
    handle._context.run(handle._callback, *handle._args)  # type: ignore[attr-defined]  # as chaosd runs it
    assert seen == [("inside", (1, 2)), ("inside", (1, 2))]
    handle.cancel()
    assert handle._cancelled is True  # type: ignore[attr-defined]


def test_handle_run_reports_a_raising_callback_as_chaosd_does(loop: asyncio.AbstractEventLoop) -> None:
    def boom() -> None:
        raise ValueError("boom")

    def reported(on: asyncio.AbstractEventLoop) -> dict[str, Any]:
        contexts: list[dict[str, Any]] = []
        on.set_exception_handler(lambda _loop, context: contexts.append(context))
        on.call_soon(boom)
        on.run_until_complete(asyncio.sleep(0))
        assert len(contexts) == 1
        return contexts[0]

    theirs = reported(loop)  # asyncio's own Handle._run
    vloop = VirtualEventLoop()
    try:
        ours = reported(vloop)
    finally:
        vloop.close()
    assert set(ours) == set(theirs) == {"message", "exception", "handle"}
    assert type(ours["exception"]) is type(theirs["exception"]) is ValueError
    assert type(ours["handle"]) is type(theirs["handle"]) is asyncio.Handle


def test_iteration_limits() -> None:
    assert base_events._MIN_SCHEDULED_TIMER_HANDLES == internals.MIN_SCHEDULED_TIMER_HANDLES  # type: ignore[attr-defined]
    assert base_events._MIN_CANCELLED_TIMER_HANDLES_FRACTION == internals.MIN_CANCELLED_TIMER_HANDLES_FRACTION  # type: ignore[attr-defined]
    assert base_events.MAXIMUM_SELECT_TIMEOUT == internals.MAXIMUM_SELECT_TIMEOUT  # type: ignore[attr-defined]
    # ... and they are what asyncio's iteration uses.
    used = set(asyncio.BaseEventLoop._run_once.__code__.co_names)  # type: ignore[attr-defined]
    assert {"_MIN_SCHEDULED_TIMER_HANDLES", "_MIN_CANCELLED_TIMER_HANDLES_FRACTION", "MAXIMUM_SELECT_TIMEOUT"} <= used


class _Awaited:
    """An object a task awaits as a future, recording what the task asks of it."""

    def __init__(self, loop: asyncio.AbstractEventLoop, calls: list[tuple[Any, ...]]) -> None:
        self._loop = loop
        self._calls = calls
        self._woken = False
        self._cancelled: asyncio.CancelledError | None = None
        self.wakeup: Any = None
        self.context: Any = None

    def __await__(self) -> _Awaited:
        return self

    def __iter__(self) -> _Awaited:
        return self

    def __next__(self) -> _Awaited:
        if self._woken:
            raise StopIteration
        self._asyncio_future_blocking = True
        return self

    def get_loop(self) -> asyncio.AbstractEventLoop:
        self._calls.append(("get_loop",))
        return self._loop

    def add_done_callback(self, *args: Any, **kwargs: Any) -> None:
        self._calls.append(("add_done_callback", len(args), sorted(kwargs)))
        (self.wakeup,) = args
        self.context = kwargs["context"]

    def result(self) -> None:
        self._calls.append(("result",))
        if self._cancelled is not None:
            raise self._cancelled

    def cancel(self, *args: Any, **kwargs: Any) -> bool:
        self._calls.append(("cancel", args, kwargs))
        self._cancelled = asyncio.CancelledError(*args, *kwargs.values())
        return True

    def wake(self) -> None:
        self._woken = True
        self._loop.call_soon(self.wakeup, self, context=self.context)


def test_task_wakeup(loop: asyncio.AbstractEventLoop) -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="")

    async def main() -> list[list[tuple[Any, ...]]]:
        logs: list[list[tuple[Any, ...]]] = []
        for cancel in (False, True):
            calls: list[tuple[Any, ...]] = []
            awaited = _Awaited(loop, calls)

            async def sleeper(awaited: _Awaited = awaited) -> str:
                var.set("the task's")
                await awaited
                return "woken"

            task = loop.create_task(sleeper())
            await asyncio.sleep(0)  # the task awaits, and hands its wake-up over
            assert awaited.context.run(var.get) == "the task's"
            if cancel:
                task.cancel("killed")
            awaited.wake()
            if cancel:
                with pytest.raises(asyncio.CancelledError, match="killed"):
                    await task
            else:
                assert await task == "woken"
            logs.append(calls)
        return logs

    resumed, cancelled = loop.run_until_complete(main())
    handed = [("get_loop",), ("add_done_callback", 1, ["context"])]
    assert resumed == [*handed, ("result",)]
    assert cancelled[:2] == handed and cancelled[3:] == [("result",)]
    name, args, kwargs = cancelled[2]  # the message, positional or not: what Alarm.cancel takes either way
    assert name == "cancel"
    assert inspect.signature(internals.Alarm.cancel).bind(None, *args, **kwargs).arguments["msg"] == "killed"


def test_isfuture_by_class(vloop: VirtualEventLoop) -> None:
    alarm = internals.Alarm(vloop, 1.0)
    alarm._asyncio_future_blocking = False  # an instance attribute, as an alarm sets it while awaited
    assert not asyncio.isfuture(alarm)
    assert asyncio.isfuture(vloop.create_future())

    async def main() -> bool:
        wrapped = asyncio.ensure_future(internals.Alarm(vloop, 2.0))  # as gather and wait_for do
        await wrapped
        return isinstance(wrapped, asyncio.Task)

    assert vloop.run_until_complete(main()) is True
    assert vloop.time() == 2.0


def test_monotonic_time(loop: asyncio.AbstractEventLoop) -> None:
    before = time.monotonic()
    now = loop.time()
    after = time.monotonic()
    assert before <= now <= after
    assert internals.keeps_asyncio_time(loop)
    vloop = VirtualEventLoop()
    try:
        assert not internals.keeps_asyncio_time(vloop)
    finally:
        vloop.close()


class _LoopOnly:
    """Awaited as a future with no get_loop: what the task asks of it, and its ``_loop`` as set."""

    def __init__(self, loop: asyncio.AbstractEventLoop, calls: list[str]) -> None:
        self._loop = loop
        self._calls = calls
        self._asyncio_future_blocking = True

    def __await__(self) -> Iterator[_LoopOnly]:
        yield self

    def __getattr__(self, name: str) -> Any:  # only for what the instance lacks
        self._calls.append(name)
        raise AttributeError(name)

    def add_done_callback(self, wakeup: Any, *, context: Any = None) -> None:
        self._calls.append("add_done_callback")
        self._loop.call_soon(wakeup, self, context=context)

    def result(self) -> None:
        self._calls.append("result")


def test_task_wakeup_reads_the_loop_of_an_object_without_get_loop(loop: asyncio.AbstractEventLoop) -> None:
    # An alarm has no get_loop (a Python call per sleep saved): the task looks for one, then takes ``_loop``.
    calls: list[str] = []
    assert loop.run_until_complete(_await(_LoopOnly(loop, calls))) == "woken"
    assert calls == ["get_loop", "add_done_callback", "result"]
    # The negative control: an object whose ``_loop`` is another loop is refused, so ``_loop`` is what is read.
    other = asyncio.SelectorEventLoop()
    try:
        with pytest.raises(RuntimeError, match="different loop"):
            loop.run_until_complete(_await(_LoopOnly(other, [])))
    finally:
        other.close()


async def _await(awaited: _LoopOnly) -> str:
    await awaited
    return "woken"
