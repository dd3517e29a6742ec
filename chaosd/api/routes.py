"""Route handlers: thin — parse and validate at the edge, act through the controller, answer JSON.

What each serves (method, path, parameters, body, answer) is declared once, in ``chaosd.api.table``.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable
from typing import TypeVar

from aiohttp import web
from pydantic import BaseModel

from chaosd.api.bodies import (
    InjectRequest,
    LeverRequest,
    ScenarioRunRequest,
    SurvivalRequest,
    WindowRequest,
    clients_policy,
    merge_patch,
)
from chaosd.api.errors import HttpError
from chaosd.api.keys import BROKER, CONTROLLER, LIMITS, OPENAPI, REGISTRY, RUN_ID, STARTED, STOP, STORAGE, TRACING
from chaosd.config.redact import redacted
from chaosd.core.durations import parse_duration
from chaosd.core.errors import FaultError
from chaosd.experiment.report import rounded
from chaosd.experiment.scenario import load_scenario, parse_scenario, resolve_scenario_name, scenario_names
from chaosd.exporters.exposition import CONTENT_TYPES, accepts_gzip, negotiate
from chaosd.faults import CATALOGUE
from chaosd.faults.record import check_labels
from chaosd.views import (
    ActionsBody,
    HealthBody,
    LeverBody,
    ReadyBody,
    RevertedBody,
    RunsBody,
    ScenariosBody,
    WindowsBody,
)
from chaosd.views.wire import MAX_WAIT_S, STATES

__all__ = [
    "UNDO",
    "actions",
    "clients",
    "close_window",
    "declared_body_type",
    "events",
    "fault",
    "faults",
    "healthz",
    "inject",
    "metrics",
    "open_window",
    "openapi",
    "patch_clients",
    "pull_lever",
    "put_clients",
    "readyz",
    "release_lever",
    "report",
    "revert",
    "revert_selected",
    "run",
    "run_scenario",
    "runs",
    "scenario_status",
    "scenarios",
    "score",
    "start_survival",
    "status",
    "stop_scenario",
    "stop_survival",
    "survival_status",
    "window",
    "windows",
]

M = TypeVar("M", bound=BaseModel)
# Steps that take back what a mutation did, run (newest first) when its writes did not reach storage.
UNDO = "chaosd.undo"


def _undo(request: web.Request, step: Callable[[], Awaitable[object]]) -> None:
    if UNDO in request:
        request[UNDO].append(step)


def _ok(body: object, status: int = 200) -> web.Response:
    return web.json_response(rounded(body), status=status, dumps=lambda o: json.dumps(o, sort_keys=True))


def _created(request: web.Request, body: object, location: str, take_back: Callable[[], object]) -> web.Response:
    """201 with the new resource's ``Location``; ``take_back`` undoes its creation if the request is not stored
    (the request is then answered 503, as if never made)."""

    async def undo() -> None:
        take_back()

    _undo(request, undo)
    response = _ok(body, 201)
    response.headers["Location"] = location
    return response


async def _read(request: web.Request) -> bytes:
    """The body, within the request deadline: a client trickling it in gets 408, not a held handler."""
    limits = request.app[LIMITS]
    if request.content_length is not None and request.content_length > limits.max_body_bytes:
        # Refused on what it announces: nothing is read, nobody waits for 50 MB to arrive.
        raise HttpError(413, "body", f"body larger than {limits.max_body_bytes} bytes (api.max_body_bytes)")
    limit = limits.request_timeout
    try:
        async with asyncio.timeout(limit):
            return await request.read()
    except TimeoutError:
        raise HttpError(408, "body", f"not received within {limit:g} s (api.request_timeout)") from None


_JSON_TYPES = ("application/json",)


def _is_json(content_type: str) -> bool:
    return content_type in _JSON_TYPES or (content_type.startswith("application/") and content_type.endswith("+json"))


def declared_body_type(content_type: str) -> bool:
    """Whether a change declares a type some route takes: JSON, or YAML (an uploaded scenario). A form or
    text/plain, what a web page may send anywhere without a CORS preflight, never is (docs/security.md)."""
    return _is_json(content_type) or content_type in _YAML_TYPES


def _unsupported(request: web.Request, takes: str) -> HttpError:
    sent = request.headers.get("Content-Type", "")[:100] or "none"
    return HttpError(415, "Content-Type", f"this route takes {takes} (sent: {sent})")


async def _object(request: web.Request, *, optional: bool = False) -> dict[str, object] | None:
    """The JSON object the body holds; None for an empty body when it is ``optional``."""
    # Declared even with no body: an empty POST without it is what a page of any site may send unasked.
    if not _is_json(request.content_type):
        raise _unsupported(request, "a JSON body (Content-Type: application/json), declared even when empty")
    raw = await _read(request)
    if not raw.strip() and optional:
        return None
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise HttpError(400, "body", "malformed JSON") from None
    if not isinstance(data, dict):
        raise HttpError(422, "body", "must be a JSON object")
    return data


async def _body(request: web.Request, model: type[M], *, optional: bool = False) -> M:
    data = await _object(request, optional=optional)
    return model() if data is None else model.model_validate(data)


# --- health, docs, status ---------------------------------------------------------------------------


def _failed_parts(request: web.Request) -> list[str]:
    """Parts that have died and will not come back by themselves: the process needs a restart."""
    problems = list(request.app[CONTROLLER].crashed)
    storage = request.app[STORAGE]
    if not storage.alive and not request.app[STOP].is_set():
        problems.append("storage: the writer has stopped; history is no longer recorded")
    if TRACING in request.app and (stalled := request.app[TRACING].stalled()) is not None:
        problems.append(stalled)
    return problems


_PROBE_AFTER_S = 1.0  # readiness trusts a write committed this recently; else it writes a probe


def _degraded_parts(request: web.Request) -> list[str]:
    """Parts that do not work now but may come back (a full disk freed): serving goes on, changes are refused."""
    storage = request.app[STORAGE]
    if request.app[STOP].is_set() or not storage.alive or (problem := storage.problem) is None:
        return []
    return [f"storage: {problem}"]


async def healthz(request: web.Request) -> web.Response:
    problems = _failed_parts(request)
    degraded = _degraded_parts(request)
    state = "failed" if problems else "degraded" if degraded else "ok"
    body: HealthBody = {"status": state, "problems": problems + degraded}
    return _ok(body, 503 if problems else 200)  # degraded is alive: restarting would not give the disk room


async def readyz(request: web.Request) -> web.Response:
    ctl = request.app[CONTROLLER]
    problems = _failed_parts(request) + ctl.plans.problems
    storage = request.app[STORAGE]
    # The storage's health now: a probe write when the last write failed or none committed for a second, never
    # the errors since the start (a freed disk is ready again at the next probe).
    stale = storage.problem is not None or storage.unproven_s > _PROBE_AFTER_S
    checked = storage.alive and not request.app[STOP].is_set() and stale
    if checked and (problem := await storage.probe()) is not None:
        problems.append(f"storage: {problem}")
    if TRACING in request.app and (failing := request.app[TRACING].failing()) is not None:
        problems.append(failing)
    problems += ctl.board.pipeline_problems()
    if ctl.stopping:
        problems.append("shutting down")
    body: ReadyBody = {"ready": not problems, "problems": problems}
    return _ok(body, 200 if not problems else 503)


async def metrics(request: web.Request) -> web.Response:
    # The pipeline's series as read at the last telemetry tick: a scrape renders nothing of the pipeline (OpenMetrics
    # and gzip at most once a tick), so it costs the same at 1,000 tasks/s as idle; the server's and the process's
    # own series are read now. OpenMetrics (with exemplars) to who asks for it, the text format to anyone else.
    fmt = negotiate(request.headers.get("Accept", ""))
    packed = accepts_gzip(request.headers.get("Accept-Encoding", ""))
    body = request.app[REGISTRY].scrape(fmt, gzip=packed)
    headers = {"Content-Type": CONTENT_TYPES[fmt], "Vary": "Accept, Accept-Encoding"}
    if packed:
        headers["Content-Encoding"] = "gzip"
    return web.Response(body=body, headers=headers)


async def openapi(request: web.Request) -> web.Response:
    return _ok(request.app[OPENAPI])


async def status(request: web.Request) -> web.Response:
    return _ok(request.app[CONTROLLER].board.status(request.app[RUN_ID], request.app[STARTED]))


async def actions(request: web.Request) -> web.Response:
    body: ActionsBody = {"actions": [a.describe() for a in CATALOGUE.values()]}
    return _ok(body)


# --- faults and the lever ----------------------------------------------------------------------------


async def inject(request: web.Request) -> web.Response:
    body = await _body(request, InjectRequest)
    faults = request.app[CONTROLLER].faults
    record = faults.inject(body.action, body.target, dict(body.params), body.ttl, dict(body.labels))
    return _created(request, record.as_dict(), f"/api/v1/faults/{record.id}", lambda: faults.take_back(record))


def _selector(request: web.Request) -> tuple[dict[str, str], frozenset[str], frozenset[str]]:
    """``label=key=value`` (repeatable, all must hold), ``action`` and ``state`` (repeatable, any may hold)."""
    labels: dict[str, str] = {}
    for raw in request.query.getall("label", []):
        key, sep, value = raw.partition("=")
        if not sep:
            raise HttpError(400, "label", f"a label selector is key=value (got {raw[:64]!r})")
        try:
            labels.update(check_labels({key: value}, "label"))
        except FaultError as exc:
            raise HttpError(400, exc.field, exc.message) from None
    actions = frozenset(request.query.getall("action", []))
    unknown = sorted(actions - set(CATALOGUE))
    if unknown:
        raise HttpError(400, "action", f"unknown action {unknown[0][:64]!r} (valid: {', '.join(sorted(CATALOGUE))})")
    states = frozenset(request.query.getall("state", []))
    unknown = sorted(states - set(STATES))
    if unknown:
        raise HttpError(400, "state", f"unknown state {unknown[0][:64]!r} (valid: {', '.join(STATES)})")
    return labels, actions, states


async def faults(request: web.Request) -> web.Response:
    active = request.query.get("active", "").lower()
    if active not in ("", "true", "false", "1", "0"):
        raise HttpError(400, "active", "must be true or false")
    labels, actions, states = _selector(request)
    chosen = None if not active else active in ("true", "1")
    return _ok(request.app[CONTROLLER].faults.select(chosen, labels, actions, states))


async def revert_selected(request: web.Request) -> web.Response:
    """Revert exactly the active faults a selector picks (``label``, ``action``); never everyone's by accident."""
    for key in ("active", "state"):
        if key in request.query:
            raise HttpError(400, key, "only label and action select the faults to revert (active ones)")
    labels, actions, _ = _selector(request)
    if not labels and not actions:
        raise HttpError(
            400, "label", "give a selector (label=key=value or action=…); to revert every fault, pull the lever"
        )
    reverted = request.app[CONTROLLER].faults.revert_matching(labels, actions)
    body: RevertedBody = {"reverted": [f.id for f in reverted], "faults": [f.as_dict() for f in reverted]}
    return _ok(body)


def _path_id(request: web.Request, what: str = "fault") -> int:
    raw = request.match_info["id"]
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 12):
        raise HttpError(400, "id", f"must be a {what} id (an integer)")
    return int(raw)


def _wait(request: web.Request) -> float:
    raw = request.query.get("wait")
    if raw is None:
        return 0.0
    try:
        parsed = parse_duration(raw)  # "30s", "250ms" or a number of seconds
        wait = float(parsed) if isinstance(parsed, float) else float(raw)
    except ValueError as exc:
        raise HttpError(400, "wait", str(exc)) from None
    if not 0 <= wait <= MAX_WAIT_S:
        raise HttpError(400, "wait", f"must be between 0 and {MAX_WAIT_S:g} s (got {raw[:32]!r})")
    return wait


async def fault(request: web.Request) -> web.Response:
    """One fault; with ``?wait=30s``, answered as soon as it gets its verdict, or with its state at the deadline."""
    wait = _wait(request)
    faults = request.app[CONTROLLER].faults
    fault_id = _path_id(request)
    if faults.forgotten(fault_id):
        # Older than the faults kept in memory (history.faults): as storage recorded it at its last change.
        stored = await request.app[STORAGE].fault(request.app[RUN_ID], fault_id)
        if stored is not None:
            return _ok(stored)
    record = faults.get(fault_id)  # 404 when there is no such fault
    await faults.await_verdicts((record.id,), wait)
    return _ok(record.as_dict())


async def revert(request: web.Request) -> web.Response:
    return _ok(request.app[CONTROLLER].faults.revert(_path_id(request)).as_dict())


# --- measurement windows -------------------------------------------------------------------------------


async def open_window(request: web.Request) -> web.Response:
    body = await _body(request, WindowRequest, optional=True)
    kept = request.app[CONTROLLER].windows
    window = kept.open(body.name)
    return _created(request, window.summary(), f"/api/v1/windows/{window.id}", lambda: kept.discard(window))


async def windows(request: web.Request) -> web.Response:
    body: WindowsBody = {"windows": [w.summary() for w in request.app[CONTROLLER].windows]}
    return _ok(body)


async def window(request: web.Request) -> web.Response:
    kept = request.app[CONTROLLER].windows
    return _ok(kept.report(kept.get(_path_id(request, "window"))))


async def close_window(request: web.Request) -> web.Response:
    kept = request.app[CONTROLLER].windows
    window = kept.get(_path_id(request, "window"))
    report = kept.close(window.id)

    async def take_back() -> None:
        kept.reopen(window)

    _undo(request, take_back)
    return _ok(report)


async def pull_lever(request: web.Request) -> web.Response:
    body = await _body(request, LeverRequest, optional=True)
    answer: LeverBody = {"lever": body.reason, "reverted": request.app[CONTROLLER].faults.pull_lever(body.reason)}
    return _ok(answer)


async def release_lever(request: web.Request) -> web.Response:
    faults = request.app[CONTROLLER].faults
    reason = faults.lever
    faults.release_lever()

    async def take_back() -> None:  # pulled again, as it was (no fault got in meanwhile: same request)
        faults.restore_lever(reason)

    _undo(request, take_back)
    answer: LeverBody = {"lever": None}
    return _ok(answer)


# --- the callers' policy ([clients]) -------------------------------------------------------------------------


def _policy_answer(body: object) -> web.Response:
    # Neither rounded nor sorted as other answers are: the policy in force exactly (a 1 µs timeout is not 0), its
    # keys in the order of the config's [clients] table.
    return web.json_response(body)


async def clients(request: web.Request) -> web.Response:
    return _policy_answer(request.app[CONTROLLER].clients.policy.model_dump(mode="json"))


async def _push(request: web.Request, *, merge: bool) -> web.Response:
    """Validate the policy as the config's ``[clients]`` table, then put it in force (an event records it); when
    the push cannot be stored, the policy it replaced is put back (the request is answered 503)."""
    control = request.app[CONTROLLER].clients
    sent = await _object(request) or {}
    previous = control.policy
    data = merge_patch(previous.model_dump(mode="json"), sent) if merge else sent
    policy = clients_policy(data, sent)  # 422 naming clients.<key>: nothing changed
    changed = control.push(policy)

    async def take_back() -> None:
        control.restore(previous)

    _undo(request, take_back)
    # ClientsPushed, its policy as JSON
    return _policy_answer({"clients": policy.model_dump(mode="json"), "changed": changed})


async def put_clients(request: web.Request) -> web.Response:
    """A whole new policy: a key left out takes its default, as in a ``[clients]`` table that leaves it out."""
    return await _push(request, merge=False)


async def patch_clients(request: web.Request) -> web.Response:
    """A JSON merge patch (RFC 7396) on the policy in force: only the keys sent change; null restores a default."""
    return await _push(request, merge=True)


# --- survival and scenarios --------------------------------------------------------------------------


async def start_survival(request: web.Request) -> web.Response:
    body = await _body(request, SurvivalRequest, optional=True)
    plans = request.app[CONTROLLER].plans
    previous = plans.survival
    run = plans.start_survival(
        body.interval, body.duration, tuple(body.actions) if body.actions else None, overlap=body.overlap
    )

    async def take_back() -> None:
        run.reason = "not recorded in storage"
        await plans.stop(run, "survival")
        plans.survival = previous  # GET /api/v1/survival answers what it did before

    _undo(request, take_back)
    return _ok(plans.status(run), 201)


async def survival_status(request: web.Request) -> web.Response:
    plans = request.app[CONTROLLER].plans
    return _ok(plans.status(plans.survival))


async def stop_survival(request: web.Request) -> web.Response:
    plans = request.app[CONTROLLER].plans
    return _ok(plans.status(await plans.stop(plans.survival, "survival")))


def _speed(raw: str | None) -> float:
    if raw is None:
        return 1.0
    try:
        speed = float(raw)
    except ValueError:
        raise HttpError(422, "speed", "must be a number") from None
    if not 1.0 <= speed <= 1000.0:  # NaN fails this too
        raise HttpError(422, "speed", "must be between 1 and 1000")
    return speed


_YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml")


async def run_scenario(request: web.Request) -> web.Response:
    plans = request.app[CONTROLLER].plans
    kind = request.content_type
    if kind not in _YAML_TYPES and not _is_json(kind):
        raise _unsupported(
            request, "a JSON body (application/json) naming a shipped scenario, or a YAML one (application/yaml)"
        )
    if kind in _YAML_TYPES:
        source = "uploaded scenario"
        speed = _speed(request.query.get("speed"))
        raw = await _read(request)
        scenario = parse_scenario(raw, source, max_bytes=request.app[LIMITS].max_body_bytes)
    else:
        if "speed" in request.query:
            raise HttpError(400, "speed", "goes in the JSON body with a named scenario")
        body = await _body(request, ScenarioRunRequest)
        path = resolve_scenario_name(body.name)  # only a name, only inside the scenario directories
        scenario, source, speed = load_scenario(path), str(path.name), body.speed
    previous = plans.scenario
    run = plans.start_scenario(scenario, speed, source)

    async def take_back() -> None:
        run.reason = "not recorded in storage"
        await plans.stop(run, "scenario")
        plans.revert_faults(run)
        plans.scenario = previous

    _undo(request, take_back)
    return _ok(plans.status(run), 201)


async def scenarios(request: web.Request) -> web.Response:
    body: ScenariosBody = {"scenarios": scenario_names()}
    return _ok(body)


async def scenario_status(request: web.Request) -> web.Response:
    plans = request.app[CONTROLLER].plans
    return _ok(plans.status(plans.scenario))


async def stop_scenario(request: web.Request) -> web.Response:
    plans = request.app[CONTROLLER].plans
    run = await plans.stop(plans.scenario, "scenario")
    plans.revert_faults(run)
    return _ok(plans.status(run))


# --- score, report, history, events ------------------------------------------------------------------


async def score(request: web.Request) -> web.Response:
    return _ok(request.app[CONTROLLER].board.score())


async def report(request: web.Request) -> web.Response:
    return _ok(request.app[CONTROLLER].board.report())


async def runs(request: web.Request) -> web.Response:
    storage = request.app[STORAGE]
    await storage.flush()  # what was recorded before the request is in its answer, however busy the writer
    body: RunsBody = {"runs": await storage.runs()}
    return _ok(body)


_RUN_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _int_query(request: web.Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query.get(name)
    if raw is None:
        return default
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 13) or not low <= int(raw) <= high:
        raise HttpError(400, name, f"must be an integer from {low} to {high}")
    return int(raw)


async def run(request: web.Request) -> web.Response:
    run_id = request.match_info["id"]
    if not _RUN_ID.fullmatch(run_id):
        raise HttpError(400, "id", "must be a run id (letters, digits, - and _; at most 64)")
    after = _int_query(request, "faults_after", 0, 0, 10**12)
    limit = _int_query(request, "faults_limit", 1000, 1, 10_000)
    storage = request.app[STORAGE]
    await storage.flush()  # what was recorded before the request is in its answer, however busy the writer
    found = await storage.run(run_id, after, limit)
    if found is None:
        raise HttpError(404, "id", f"no run {run_id!r}")
    # Runs are stored redacted; one an older chaosd stored unredacted is redacted on the way out.
    return _ok({**found, "config": redacted(found.get("config"))})


async def events(request: web.Request) -> web.StreamResponse:
    return await request.app[BROKER].handle(request)
