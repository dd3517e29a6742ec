"""Route handlers: thin — parse and validate at the edge, act through the controller, answer JSON."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable, Collection
from typing import Any, TypeVar

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel

from chaosd.api.keys import BROKER, CONTROLLER, LIMITS, REGISTRY, RUN_ID, STARTED, STOP, STORAGE, TRACING
from chaosd.api.schemas import (
    InjectRequest,
    LeverRequest,
    ScenarioRunRequest,
    SurvivalRequest,
    WindowRequest,
    openapi_document,
)
from chaosd.durations import parse_duration
from chaosd.errors import FaultError
from chaosd.faults import CATALOGUE, FaultRecord
from chaosd.faults.injector import check_labels, matches
from chaosd.redact import redacted
from chaosd.report import rounded
from chaosd.scenario import load_scenario, parse_scenario, resolve_scenario_name, scenario_names
from chaosd.views import (
    ActionsBody,
    FaultsBody,
    HealthBody,
    LeverBody,
    ReadyBody,
    RevertedBody,
    RunsBody,
    ScenariosBody,
    ScoreBody,
    StatusBody,
    WindowsBody,
)
from chaosd.wire import MAX_WAIT_S, STATES

__all__ = ["QUERY_PARAMS", "UNDO", "check_query", "routes"]

M = TypeVar("M", bound=BaseModel)
routes = web.RouteTableDef()
# Steps that take back what a mutation did, run (newest first) when its writes did not reach storage.
UNDO = "chaosd.undo"


def _undo(request: web.Request, step: Callable[[], Awaitable[object]]) -> None:
    if UNDO in request:
        request[UNDO].append(step)


def _ok(body: Any, status: int = 200) -> web.Response:
    return web.json_response(rounded(body), status=status, dumps=lambda o: json.dumps(o, sort_keys=True))


# The query parameters each route reads; any other is a mistake to report, never to ignore.
QUERY_PARAMS: dict[str, frozenset[str]] = {
    "/api/v1/faults": frozenset({"active", "label", "action", "state"}),
    "/api/v1/faults/{id}": frozenset({"wait"}),
    "/api/v1/scenarios/run": frozenset({"speed"}),
    "/api/v1/events": frozenset({"types", "last_event_id", "replay"}),
    "/api/v1/runs/{id}": frozenset({"faults_after", "faults_limit"}),
}


def check_query(route: str, query: Collection[str]) -> None:
    allowed = QUERY_PARAMS.get(route, frozenset())
    for key in query:
        if key not in allowed:
            known = f" (this route takes: {', '.join(sorted(allowed))})" if allowed else " (this route takes none)"
            raise FaultError("query", f"unknown query parameter{known}", status=400)


async def _read(request: web.Request) -> bytes:
    """The body, within the request deadline: a client trickling it in gets 408, not a held handler."""
    limits = request.app[LIMITS]
    if request.content_length is not None and request.content_length > limits.max_body_bytes:
        # Refused on what it announces: nothing is read, nobody waits for 50 MB to arrive.
        raise FaultError("body", f"body larger than {limits.max_body_bytes} bytes (api.max_body_bytes)", status=413)
    limit = limits.request_timeout
    try:
        async with asyncio.timeout(limit):
            return await request.read()
    except TimeoutError:
        raise FaultError("body", f"not received within {limit:g} s (api.request_timeout)", status=408) from None


_JSON_TYPES = ("application/json",)


def _is_json(content_type: str) -> bool:
    return content_type in _JSON_TYPES or (content_type.startswith("application/") and content_type.endswith("+json"))


def declared_body_type(content_type: str) -> bool:
    """Whether a change declares a type some route takes: JSON, or YAML (an uploaded scenario). A form or
    text/plain, what a web page may send anywhere without a CORS preflight, never is (docs/security.md)."""
    return _is_json(content_type) or content_type in _YAML_TYPES


def _unsupported(request: web.Request, takes: str) -> FaultError:
    sent = request.headers.get("Content-Type", "")[:100] or "none"
    return FaultError("Content-Type", f"this route takes {takes} (sent: {sent})", status=415)


async def _body(request: web.Request, model: type[M], *, optional: bool = False) -> M:
    # Declared even with no body: an empty POST without it is what a page of any site may send unasked.
    if not _is_json(request.content_type):
        raise _unsupported(request, "a JSON body (Content-Type: application/json), declared even when empty")
    raw = await _read(request)
    if not raw.strip() and optional:
        return model()
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise FaultError("body", "malformed JSON", status=400) from None
    if not isinstance(data, dict):
        raise FaultError("body", "must be a JSON object", status=422)
    return model.model_validate(data)


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


@routes.get("/healthz")
async def healthz(request: web.Request) -> web.Response:
    problems = _failed_parts(request)
    degraded = _degraded_parts(request)
    state = "failed" if problems else "degraded" if degraded else "ok"
    body: HealthBody = {"status": state, "problems": problems + degraded}
    return _ok(body, 503 if problems else 200)  # degraded is alive: restarting would not give the disk room


@routes.get("/readyz")
async def readyz(request: web.Request) -> web.Response:
    ctl = request.app[CONTROLLER]
    problems = _failed_parts(request) + ctl.problems
    storage = request.app[STORAGE]
    # The storage's health now: a probe write when the last write failed or none committed for a second, never
    # the errors since the start (a freed disk is ready again at the next probe).
    stale = storage.problem is not None or storage.unproven_s > _PROBE_AFTER_S
    checked = storage.alive and not request.app[STOP].is_set() and stale
    if checked and (problem := await storage.probe()) is not None:
        problems.append(f"storage: {problem}")
    if TRACING in request.app and (failing := request.app[TRACING].failing()) is not None:
        problems.append(failing)
    if (backend := getattr(ctl.exp.pipeline, "backend_health", None)) is not None and (down := backend()):
        problems.append(down)  # the Redis runtime: unreachable now, and why
    if ctl.exp.telemetry.latest is None:
        problems.append("pipeline: no telemetry yet")
    if ctl.stopping:
        problems.append("shutting down")
    body: ReadyBody = {"ready": not problems, "problems": problems}
    return _ok(body, 200 if not problems else 503)


@routes.get("/metrics")
async def metrics(request: web.Request) -> web.Response:
    # Rendered on the daemon's own loop: a scrape sees one consistent instant and needs no thread.
    body = request.app[REGISTRY].exposition()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


@routes.get("/api/v1/openapi.json")
async def openapi(request: web.Request) -> web.Response:
    return _ok(openapi_document())


@routes.get("/api/v1/status")
async def status(request: web.Request) -> web.Response:
    ctl = request.app[CONTROLLER]
    exp = ctl.exp
    p = exp.pipeline
    snap = exp.telemetry.latest
    body: StatusBody = {
        "run_id": request.app[RUN_ID],
        "started_unix": request.app[STARTED],
        "uptime_s": p.elapsed(),
        "agents": [
            {"id": a.id, "kind": a.kind, "state": a.state, "restarts": a.restart_count, "gave_up": a.gave_up}
            for a in p.agents.values()
        ],
        "leader": p.dispatcher.leader_id,
        "route": list(p.route_names or ()),
        "dag": {
            "nodes": sorted(p.dag.edges),
            "edges": sorted(f"{a}->{b}" for a, succ in p.dag.edges.items() for b in succ),
            "removed_nodes": sorted(p.dag.removed_nodes),
            "removed_edges": sorted(f"{a}->{b}" for a, b in p.dag.removed_edges),
            "breakers_open": sorted(p.avoided),
        },
        "queue": {"depth": p.queue.depth, "capacity": p.queue.capacity},
        "detector": exp.detector.state.value,
        "throttle_factor": exp.throttle.factor,
        "admission": {
            "policy": exp.throttle.policy,
            "limit": exp.throttle.limit,
            "standing": exp.throttle.standing,
            "capacity_per_s": snap.capacity_rate if snap is not None else 0.0,
            "shed_per_s": snap.shed_rate if snap is not None else 0.0,
        },
        "backend": backend() if (backend := getattr(p, "backend_health", None)) is not None else None,
        "telemetry": snap.as_dict() if snap is not None else None,
        "score": exp.live_score().as_dict(),
        "faults_active": len(exp.injector.active()),
        "lever": exp.injector.lever,
        "survival": ctl.survival.state if ctl.survival is not None else "idle",
        "scenario": ctl.scenario.state if ctl.scenario is not None else "idle",
        "stopping": ctl.stopping,
    }
    return _ok(body)


@routes.get("/api/v1/actions")
async def actions(request: web.Request) -> web.Response:
    body: ActionsBody = {"actions": [a.describe() for a in CATALOGUE.values()]}
    return _ok(body)


# --- faults and the lever ----------------------------------------------------------------------------


@routes.post("/api/v1/faults")
async def inject(request: web.Request) -> web.Response:
    body = await _body(request, InjectRequest)
    ctl = request.app[CONTROLLER]
    record = ctl.inject(body.action, body.target, dict(body.params), body.ttl, dict(body.labels))

    async def take_back() -> None:
        if record.active:
            ctl.exp.injector.revert(record.id, why="unstored")

    _undo(request, take_back)
    response = _ok(record.as_dict(), 201)
    response.headers["Location"] = f"/api/v1/faults/{record.id}"
    return response


def _selector(request: web.Request) -> tuple[dict[str, str], frozenset[str], frozenset[str]]:
    """``label=key=value`` (repeatable, all must hold), ``action`` and ``state`` (repeatable, any may hold)."""
    labels: dict[str, str] = {}
    for raw in request.query.getall("label", []):
        key, sep, value = raw.partition("=")
        if not sep:
            raise FaultError("label", f"a label selector is key=value (got {raw[:64]!r})", status=400)
        try:
            labels.update(check_labels({key: value}, "label"))
        except FaultError as exc:
            raise FaultError(exc.field, exc.message, status=400) from None
    actions = frozenset(request.query.getall("action", []))
    unknown = sorted(actions - set(CATALOGUE))
    if unknown:
        raise FaultError(
            "action", f"unknown action {unknown[0][:64]!r} (valid: {', '.join(sorted(CATALOGUE))})", status=400
        )
    states = frozenset(request.query.getall("state", []))
    unknown = sorted(states - set(STATES))
    if unknown:
        raise FaultError("state", f"unknown state {unknown[0][:64]!r} (valid: {', '.join(STATES)})", status=400)
    return labels, actions, states


@routes.get("/api/v1/faults")
async def faults(request: web.Request) -> web.Response:
    active = request.query.get("active", "").lower()
    if active not in ("", "true", "false", "1", "0"):
        raise FaultError("active", "must be true or false", status=400)
    labels, actions, states = _selector(request)
    injector = request.app[CONTROLLER].exp.injector
    records: list[FaultRecord] = list(injector.faults)  # the newest history.faults; older ones: GET …/{id}
    if active in ("true", "1"):
        records = [f for f in records if f.active]
    elif active in ("false", "0"):
        records = [f for f in records if not f.active]
    if labels or actions or states:
        records = [f for f in records if matches(f, labels, actions, states)]
    body: FaultsBody = {
        "faults": [f.as_dict() for f in records],
        "lever": injector.lever,
        "injected": injector.injected,
        "first_in_memory": injector.faults.first_kept,
    }
    return _ok(body)


@routes.delete("/api/v1/faults")
async def revert_selected(request: web.Request) -> web.Response:
    """Revert exactly the active faults a selector picks (``label``, ``action``); never everyone's by accident."""
    for key in ("active", "state"):
        if key in request.query:
            raise FaultError(key, "only label and action select the faults to revert (active ones)", status=400)
    labels, actions, _ = _selector(request)
    if not labels and not actions:
        raise FaultError(
            "label", "give a selector (label=key=value or action=…); to revert every fault, pull the lever", status=400
        )
    reverted = request.app[CONTROLLER].revert_matching(labels, actions)
    body: RevertedBody = {"reverted": [f.id for f in reverted], "faults": [f.as_dict() for f in reverted]}
    return _ok(body)


def _path_id(request: web.Request, what: str = "fault") -> int:
    raw = request.match_info["id"]
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 12):
        raise FaultError("id", f"must be a {what} id (an integer)", status=400)
    return int(raw)


def _wait(request: web.Request) -> float:
    raw = request.query.get("wait")
    if raw is None:
        return 0.0
    try:
        parsed = parse_duration(raw)  # "30s", "250ms" or a number of seconds
        wait = float(parsed) if isinstance(parsed, float) else float(raw)
    except ValueError as exc:
        raise FaultError("wait", str(exc), status=400) from None
    if not 0 <= wait <= MAX_WAIT_S:
        raise FaultError("wait", f"must be between 0 and {MAX_WAIT_S:g} s (got {raw[:32]!r})", status=400)
    return wait


@routes.get("/api/v1/faults/{id}")
async def fault(request: web.Request) -> web.Response:
    """One fault; with ``?wait=30s``, answered as soon as it gets its verdict, or with its state at the deadline."""
    wait = _wait(request)
    ctl = request.app[CONTROLLER]
    fault_id = _path_id(request)
    record = ctl.exp.injector.faults.get(fault_id)
    if record is None and 0 < fault_id <= ctl.exp.injector.injected:
        # Older than the faults kept in memory (history.faults): as storage recorded it at its last change.
        stored = await request.app[STORAGE].fault(request.app[RUN_ID], fault_id)
        if stored is not None:
            return _ok(stored)
    record = ctl.exp.injector.get(fault_id)  # 404 when there is no such fault
    await ctl.await_verdicts((record.id,), wait)
    return _ok(record.as_dict())


@routes.delete("/api/v1/faults/{id}")
async def revert(request: web.Request) -> web.Response:
    return _ok(request.app[CONTROLLER].revert(_path_id(request)).as_dict())


# --- measurement windows -------------------------------------------------------------------------------


@routes.post("/api/v1/windows")
async def open_window(request: web.Request) -> web.Response:
    body = await _body(request, WindowRequest, optional=True)
    ctl = request.app[CONTROLLER]
    window = ctl.open_window(body.name)

    async def take_back() -> None:
        if window.open:
            ctl.close_window(window.id)
        ctl.windows.pop(window.id, None)

    _undo(request, take_back)
    response = _ok(window.summary(), 201)
    response.headers["Location"] = f"/api/v1/windows/{window.id}"
    return response


@routes.get("/api/v1/windows")
async def windows(request: web.Request) -> web.Response:
    body: WindowsBody = {"windows": [w.summary() for w in request.app[CONTROLLER].windows.values()]}
    return _ok(body)


@routes.get("/api/v1/windows/{id}")
async def window(request: web.Request) -> web.Response:
    ctl = request.app[CONTROLLER]
    return _ok(ctl.window_report(ctl.window(_path_id(request, "window"))))


@routes.delete("/api/v1/windows/{id}")
async def close_window(request: web.Request) -> web.Response:
    ctl = request.app[CONTROLLER]
    window = ctl.window(_path_id(request, "window"))
    report = ctl.close_window(window.id)

    async def take_back() -> None:  # open again, counting on as if it had never closed
        window.ended_at = window.until_fault = window.final = None
        if window.book is not None:
            ctl.exp.injector.books.append(window.book)

    _undo(request, take_back)
    return _ok(report)


@routes.post("/api/v1/lever")
async def pull_lever(request: web.Request) -> web.Response:
    body = await _body(request, LeverRequest, optional=True)
    answer: LeverBody = {"lever": body.reason, "reverted": request.app[CONTROLLER].pull_lever(body.reason)}
    return _ok(answer)


@routes.delete("/api/v1/lever")
async def release_lever(request: web.Request) -> web.Response:
    injector = request.app[CONTROLLER].exp.injector
    reason = injector.lever
    request.app[CONTROLLER].release_lever()

    async def take_back() -> None:  # pulled again, as it was (no fault got in meanwhile: same request)
        injector.lever = reason

    _undo(request, take_back)
    answer: LeverBody = {"lever": None}
    return _ok(answer)


# --- survival and scenarios --------------------------------------------------------------------------


@routes.post("/api/v1/survival")
async def start_survival(request: web.Request) -> web.Response:
    body = await _body(request, SurvivalRequest, optional=True)
    ctl = request.app[CONTROLLER]
    previous = ctl.survival
    run = ctl.start_survival(
        body.interval, body.duration, tuple(body.actions) if body.actions else None, overlap=body.overlap
    )

    async def take_back() -> None:
        run.reason = "not recorded in storage"
        await ctl.stop_plan(run, "survival")
        ctl.survival = previous  # GET /api/v1/survival answers what it did before

    _undo(request, take_back)
    return _ok(ctl.plan_status(run), 201)


@routes.get("/api/v1/survival")
async def survival_status(request: web.Request) -> web.Response:
    ctl = request.app[CONTROLLER]
    return _ok(ctl.plan_status(ctl.survival))


@routes.delete("/api/v1/survival")
async def stop_survival(request: web.Request) -> web.Response:
    ctl = request.app[CONTROLLER]
    return _ok(ctl.plan_status(await ctl.stop_plan(ctl.survival, "survival")))


def _speed(raw: str | None) -> float:
    if raw is None:
        return 1.0
    try:
        speed = float(raw)
    except ValueError:
        raise FaultError("speed", "must be a number", status=422) from None
    if not 1.0 <= speed <= 1000.0:  # NaN fails this too
        raise FaultError("speed", "must be between 1 and 1000", status=422)
    return speed


_YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml")


@routes.post("/api/v1/scenarios/run")
async def run_scenario(request: web.Request) -> web.Response:
    ctl = request.app[CONTROLLER]
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
            raise FaultError("speed", "goes in the JSON body with a named scenario", status=400)
        body = await _body(request, ScenarioRunRequest)
        path = resolve_scenario_name(body.name)  # only a name, only inside the scenario directories
        scenario, source, speed = load_scenario(path), str(path.name), body.speed
    previous = ctl.scenario
    run = ctl.start_scenario(scenario, speed, source)

    async def take_back() -> None:
        run.reason = "not recorded in storage"
        await ctl.stop_plan(run, "scenario")
        ctl.revert_faults(run)
        ctl.scenario = previous

    _undo(request, take_back)
    return _ok(ctl.plan_status(run), 201)


@routes.get("/api/v1/scenarios")
async def scenarios(request: web.Request) -> web.Response:
    body: ScenariosBody = {"scenarios": scenario_names()}
    return _ok(body)


@routes.get("/api/v1/scenarios/current")
async def scenario_status(request: web.Request) -> web.Response:
    ctl = request.app[CONTROLLER]
    return _ok(ctl.plan_status(ctl.scenario))


@routes.delete("/api/v1/scenarios/current")
async def stop_scenario(request: web.Request) -> web.Response:
    ctl = request.app[CONTROLLER]
    run = await ctl.stop_plan(ctl.scenario, "scenario")
    ctl.revert_faults(run)
    return _ok(ctl.plan_status(run))


# --- score, report, history, events ------------------------------------------------------------------


@routes.get("/api/v1/score")
async def score(request: web.Request) -> web.Response:
    exp = request.app[CONTROLLER].exp
    body: ScoreBody = {
        **exp.live_score().as_dict(),
        "faults_injected": exp.injector.injected,
        "faults_recovered": exp.injector.outcomes["recovered"],
    }
    return _ok(body)


@routes.get("/api/v1/report")
async def report(request: web.Request) -> web.Response:
    exp = request.app[CONTROLLER].exp
    return _ok(exp.report(listed=exp.settings.history.report))


@routes.get("/api/v1/runs")
async def runs(request: web.Request) -> web.Response:
    body: RunsBody = {"runs": await request.app[STORAGE].runs()}
    return _ok(body)


_RUN_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _int_query(request: web.Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query.get(name)
    if raw is None:
        return default
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 13) or not low <= int(raw) <= high:
        raise FaultError(name, f"must be an integer from {low} to {high}", status=400)
    return int(raw)


@routes.get("/api/v1/runs/{id}")
async def run(request: web.Request) -> web.Response:
    run_id = request.match_info["id"]
    if not _RUN_ID.fullmatch(run_id):
        raise FaultError("id", "must be a run id (letters, digits, - and _; at most 64)", status=400)
    after = _int_query(request, "faults_after", 0, 0, 10**12)
    limit = _int_query(request, "faults_limit", 1000, 1, 10_000)
    found = await request.app[STORAGE].run(run_id, after, limit)
    if found is None:
        raise FaultError("id", f"no run {run_id!r}", status=404)
    # Runs are stored redacted; one an older chaosd stored unredacted is redacted on the way out.
    return _ok({**found, "config": redacted(found.get("config"))})


@routes.get("/api/v1/events")
async def events(request: web.Request) -> web.StreamResponse:
    return await request.app[BROKER].handle(request)
