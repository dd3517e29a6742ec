"""The route table: every endpoint once — method, path, parameters, body, answer, summary and errors.

The router is built from it (:func:`route_defs`), the OpenAPI document is walked from it
(``chaosd.api.schemas``) and docs/api.md's endpoint table is written from it (:func:`rewrite_docs`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from aiohttp import web
from pydantic import BaseModel

from chaosd import views as v
from chaosd.api import routes as r
from chaosd.api.bodies import (
    ClientsPushed,
    InjectRequest,
    LeverRequest,
    ScenarioRunRequest,
    StagesBody,
    SurvivalRequest,
    WindowRequest,
)
from chaosd.api.errors import HttpError
from chaosd.config.settings import ClientsConfig
from chaosd.core.durations import PATTERN as DURATION_PATTERN
from chaosd.faults import CATALOGUE
from chaosd.views.wire import STATES

__all__ = [
    "BEGIN",
    "END",
    "ENDPOINTS",
    "ERRORS",
    "Endpoint",
    "Media",
    "Param",
    "check_query",
    "declared",
    "markdown_table",
    "rewrite_docs",
    "route_defs",
    "served",
]

Method = Literal["GET", "POST", "PUT", "PATCH", "DELETE"]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# What any JSON route may answer besides success: the middlewares refuse these before or around any handler.
ERRORS = (400, 401, 404, 408, 409, 413, 415, 422, 431, 503)


@dataclass(frozen=True)
class Param:
    """A parameter of the query (or the path, or a header): its name, JSON schema (type, bounds), meaning."""

    name: str
    schema: Mapping[str, object]  # a JSON schema, as the OpenAPI document has it
    description: str = ""
    where: Literal["query", "path", "header"] = "query"
    repeated: bool = False  # ?label=a&label=b: ``schema`` is each value's


@dataclass(frozen=True)
class Media:
    """An answer that is not a JSON view: its content types, what it is, and its schema if it has one."""

    types: tuple[str, ...]
    description: str
    schema: Mapping[str, object] | None = None  # a JSON schema


@dataclass(frozen=True)
class Endpoint:
    """One method on one path. ``answer`` is the view its handler builds (a TypedDict), or a :class:`Media`.

    ``handler`` is None for the Arena's routes: ``chaosd.arena`` mounts them, this table declares them.
    ``request`` and ``answers`` are docs/api.md's two columns (Markdown).
    """

    method: Method
    path: str
    answer: type | Media
    summary: str
    handler: Handler | None
    ok: int = 200
    body: type[BaseModel] | None = None
    yaml: bool = False  # also takes a YAML document (Content-Type: application/yaml)
    params: tuple[Param, ...] = ()
    errors: tuple[int, ...] = ERRORS
    describes: tuple[type, ...] = ()  # views its answer carries that are not its schema (an event's data)
    request: str = ""
    answers: str = ""


_ID = Param("id", {"type": "integer", "minimum": 1}, where="path")
_RUN_ID = Param("id", {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"}, where="path")
_LABEL = Param(
    "label",
    {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_.-]{0,62}=.+$"},
    "key=value; repeat for several (all must hold)",
    repeated=True,
)
_ACTION = Param("action", {"type": "string", "enum": sorted(CATALOGUE)}, repeated=True)
_HTML = Media(("text/html",), "HTML")


ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint(
        "GET",
        "/healthz",
        v.HealthBody,
        "Liveness; 503 names the parts that died (pipeline, storage writer)",
        handler=r.healthz,
        answers=(
            '200 `{"status": "ok", "problems": []}`; 200 `{"status": "degraded", "problems": ["storage: …"]}` while'
            " storage cannot take writes now (a full or read-only disk, a deleted file: see"
            ' [storage.md](storage.md)); or 503 `{"status": "failed", "problems": [...]}` when a part has died and'
            " will not come back (the pipeline crashed, the storage writer stopped, the span exporter has exported"
            " nothing for 300 s while spans wait): restart the daemon"
        ),
    ),
    Endpoint(
        "GET",
        "/readyz",
        v.ReadyBody,
        "Readiness; 503 names the parts that failed",
        handler=r.readyz,
        answers=(
            '200 `{"ready": true}` or 503 with `{"ready": false, "problems": [...]}`: everything `/healthz` reports,'
            " plus the storage's health now (a probe write when the last write failed or none committed for a second;"
            " ready again once the disk has room), span exports failing 3 times in a row, a crashed survival or"
            " scenario run, no telemetry yet, or shutting down"
        ),
    ),
    Endpoint(
        "GET",
        "/metrics",
        Media(("text/plain", "application/openmetrics-text"), "text exposition, or OpenMetrics when asked for"),
        "Prometheus metrics (docs/metrics.md)",
        handler=r.metrics,
        errors=(),
        answers=(
            "Prometheus exposition (`docs/metrics.md`), with the process's own series (open fds, RSS, CPU, GC);"
            " OpenMetrics with exemplars for `Accept: application/openmetrics-text`, gzip for `Accept-Encoding: gzip`"
        ),
    ),
    Endpoint(
        "GET",
        "/api/v1/openapi.json",
        v.OpenApiDocument,
        "This document",
        handler=r.openapi,
        answers="OpenAPI 3.1 document",
    ),
    Endpoint(
        "GET",
        "/api/v1/status",
        v.StatusBody,
        "Pipeline snapshot: agents, leader, DAG, queue, detector, throttle, score",
        handler=r.status,
        answers=(
            "pipeline snapshot: `run_id`, `started_unix`, `uptime_s`, `agents` [{id, kind, state, restarts}],"
            " `leader`, `route`, `dag` {nodes, edges, removed_nodes, removed_edges, breakers_open, `dependencies`"
            " (stage/dependency pairs), `stages` {name:"
            " {kind, attempts_per_s, retries_per_s, p95_s, error_share, breaker, window_s}}},"
            " `queue` {depth, capacity},"
            " `detector` (healthy, warning, overload, collapsed, failing, stall or recovering),"
            " `throttle_factor` (aimd's),"
            " `admission` {policy, limit, standing, capacity_per_s, shed_per_s}, `telemetry` {... `capacity_rate`,"
            " `shed_rate`, `unserved_rate` (refused for a partition or an unavailable backend), `lateness`,"
            " `cpu_wait`, `queue_fill` (depth / capacity) and `saturation`, the detector's:"
            " the largest of `queue_fill`, `utilisation` and `busy_share`}, `score` {...}, `faults_active`, `lever`,"
            " `survival`, `scenario`"
        ),
    ),
    Endpoint(
        "GET",
        "/api/v1/actions",
        v.ActionsBody,
        "The fault catalogue with each action's parameters",
        handler=r.actions,
        answers=(
            '`{"actions": [{action, description, targets, default_target, params{name:'
            " {default,min,max,description}}}]}`"
        ),
    ),
    Endpoint(
        "POST",
        "/api/v1/faults",
        v.FaultView,
        "Inject a fault",
        handler=r.inject,
        ok=201,
        body=InjectRequest,
        request=(
            '`{"action": str, "target": str?, "params": {str: number|"10"|"250ms"}?, "ttl": number|"10s"?, "labels":'
            " {str: str}?}` (a number may be given as JSON or as text; a duration as seconds or with a unit)"
        ),
        answers="201 the fault (below), with `Location: /api/v1/faults/{id}`",
    ),
    Endpoint(
        "GET",
        "/api/v1/faults",
        v.FaultsBody,
        "List faults, all or those a selector picks",
        handler=r.faults,
        params=(
            Param("active", {"type": "boolean"}),
            _LABEL,
            _ACTION,
            Param("state", {"type": "string", "enum": list(STATES)}, repeated=True),
        ),
        request=(
            "`?active=true|false`, and a selector: `label=key=value` (repeatable: all must hold), `action=…` and"
            " `state=…` (repeatable: any may hold)"
        ),
        answers=(
            '`{"faults": [fault…], "lever", "injected": n, "first_in_memory": id}`: the faults still in memory (the'
            " newest `history.faults`, 1,000 by default); `injected` counts them all, and an older one is served by"
            " `GET /api/v1/faults/{id}` from storage"
        ),
    ),
    Endpoint(
        "DELETE",
        "/api/v1/faults",
        v.RevertedBody,
        "Revert the active faults a selector picks (label and/or action)",
        handler=r.revert_selected,
        params=(_LABEL, _ACTION),
        request="a selector: `label=key=value` and/or `action=…` (at least one)",
        answers='200 `{"reverted": [id…], "faults": [fault…]}`: exactly the active faults it picks, reverted',
    ),
    Endpoint(
        "GET",
        "/api/v1/faults/{id}",
        v.FaultView,
        "One fault; with wait, answered at its verdict or with its state at the deadline",
        handler=r.fault,
        params=(
            _ID,
            Param(
                "wait",
                {"type": "string", "pattern": DURATION_PATTERN},  # the one the route's parser accepts
                "long poll: seconds (or '30s'), at most 120",
            ),
        ),
        request="`?wait=30s` (0–120 s; a number of seconds or `250ms`/`30s`/`2m`)",
        answers=(
            "fault (one older than the faults kept in memory comes from storage, as last recorded, with its"
            " `run_id`); with `wait`, a long poll: answered as soon as the fault gets its verdict (`recovered`,"
            " `failed`, `unmeasured`; woken by the verdict event itself, within 100 ms of it), or with its state at"
            " the deadline"
        ),
    ),
    Endpoint(
        "DELETE",
        "/api/v1/faults/{id}",
        v.FaultView,
        "Revert a fault now",
        handler=r.revert,
        params=(_ID,),
        answers="200 the fault, reverted",
    ),
    Endpoint(
        "POST",
        "/api/v1/lever",
        v.LeverBody,
        "Pull the safety lever: revert every fault, refuse new ones",
        handler=r.pull_lever,
        body=LeverRequest,
        request='`{"reason": str?}`',
        answers='`{"lever": "reason", "reverted": n}`',
    ),
    Endpoint(
        "DELETE",
        "/api/v1/lever",
        v.LeverBody,
        "Release the safety lever",
        handler=r.release_lever,
        answers='`{"lever": null}`',
    ),
    Endpoint(
        "POST",
        "/api/v1/survival",
        v.PlanStatus,
        "Start survival mode",
        handler=r.start_survival,
        ok=201,
        body=SurvivalRequest,
        request='`{"interval": "10s", "duration": "30m", "actions": [str]?, "overlap": false}`',
        answers=(
            "201 survival status. One fault at a time: each lasts `interval` less `recovery.confirm` + 1 s, and the"
            " next waits for its verdict; a slot it is still recovering at is skipped (`skipped: previous fault still"
            " recovering` in `log`). 422 on `interval` if it is shorter than a 1 s fault plus that room (5 s by"
            ' default). `"overlap": true`: faults last 2×`interval` and stack'
        ),
    ),
    Endpoint(
        "GET",
        "/api/v1/survival",
        v.PlanStatus,
        "Survival mode status",
        handler=r.survival_status,
        answers=(
            '`{"state": "idle"|"running"|"stopped"|"finished", "elapsed_s", "actions": n, "score": {...},'
            ' "daemon_score": {...}, "window": {"start_at", "end_at"}, "started_at", "ended_at", "reason", "log":'
            " [...]}`: `score` is the survival's own window, `daemon_score` the daemon's lifetime (see *A plan's"
            " score* below)"
        ),
    ),
    Endpoint(
        "DELETE",
        "/api/v1/survival",
        v.PlanStatus,
        "Stop survival mode",
        handler=r.stop_survival,
        answers=(
            "survival status after stopping (its active faults reverted, their ids in the last `log` entry's"
            " `reverted`)"
        ),
    ),
    Endpoint(
        "GET",
        "/api/v1/scenarios",
        v.ScenariosBody,
        "The scenarios a run can name (./scenarios, then the shipped ones)",
        handler=r.scenarios,
        answers='`{"scenarios": [name…]}`: the names a run can give (in `./scenarios`, then the shipped ones)',
    ),
    Endpoint(
        "POST",
        "/api/v1/scenarios/run",
        v.PlanStatus,
        "Run a shipped scenario by name, or an uploaded YAML scenario",
        handler=r.run_scenario,
        ok=201,
        body=ScenarioRunRequest,
        yaml=True,
        params=(Param("speed", {"type": "number", "minimum": 1, "maximum": 1000}),),
        request=(
            'JSON `{"name": "leader_assassination", "speed": 1}` or a YAML body (`Content-Type: application/yaml`,'
            " query `?speed=`)"
        ),
        answers="201 scenario status",
    ),
    Endpoint(
        "GET",
        "/api/v1/scenarios/current",
        v.PlanStatus,
        "The current (or last) scenario run",
        handler=r.scenario_status,
        answers=(
            '`{"state", "name", "elapsed_s", "actions": n (faults injected), "log": [...], "score": {...},'
            ' "daemon_score": {...}, "window": {"start_at", "end_at"}, "expectations": [...], "passed": bool|null}`:'
            " `score` is the scenario's own window, the one its expectations judge (see *A plan's score* below)"
        ),
    ),
    Endpoint(
        "DELETE",
        "/api/v1/scenarios/current",
        v.PlanStatus,
        "Stop the running scenario",
        handler=r.stop_scenario,
        answers="scenario status after stopping (its faults reverted)",
    ),
    Endpoint(
        "POST",
        "/api/v1/windows",
        v.WindowSummary,
        "Open a measurement window",
        handler=r.open_window,
        ok=201,
        body=WindowRequest,
        request='`{"name": str?}`',
        answers='201 `{id, name, state: "open", started_at, ended_at: null}`, with `Location`',
    ),
    Endpoint(
        "GET",
        "/api/v1/windows",
        v.WindowsBody,
        "Measurement windows (open ones and the newest closed)",
        handler=r.windows,
        answers=(
            '`{"windows": [{id, name, state, started_at, ended_at}…]}`: the open ones and the newest closed (100 kept)'
        ),
    ),
    Endpoint(
        "GET",
        "/api/v1/windows/{id}",
        v.WindowReport,
        "A window's own tasks, score, faults, incidents and diagnostics",
        handler=r.window,
        params=(_ID,),
        answers=(
            "the window's own `tasks`, `score`, `faults` (injected while it was open), `incidents`, `diagnostics`,"
            " `window` `{start_at, end_at}`"
        ),
    ),
    Endpoint(
        "DELETE",
        "/api/v1/windows/{id}",
        v.WindowReport,
        "Close a window: its report stops moving",
        handler=r.close_window,
        params=(_ID,),
        answers="200 the window's final report (it stops moving); 409 if already closed",
    ),
    Endpoint(
        "GET",
        "/api/v1/clients",
        ClientsConfig,
        "The callers' policy in force ([clients]: timeout, retries, backoff, budget, patience…)",
        handler=r.clients,
        answers=(
            "the callers' policy in force, as the config's `[clients]` table: `{timeout, retries, retry_on, backoff"
            " {base, factor, max, jitter}, budget {ratio}|null, patience {distribution, mean}|null, drop_expired,"
            " retry_after}` (keys: `config/chaosd.toml`, and *The callers' policy* below)"
        ),
    ),
    Endpoint(
        "PUT",
        "/api/v1/clients",
        ClientsPushed,
        "Push a whole new callers' policy: a key left out takes its default",
        handler=r.put_clients,
        body=ClientsConfig,
        request="the whole `[clients]` table as JSON; a key left out takes its default",
        answers=(
            '200 `{"clients": policy, "changed": [key…]}` (keys in the policy\'s order), recorded as a `clients`'
            " event; 400 naming `clients.<key>` as the config's errors do, and nothing changed"
        ),
    ),
    Endpoint(
        "PATCH",
        "/api/v1/clients",
        ClientsPushed,
        "Change some keys of the callers' policy (a JSON merge patch)",
        handler=r.patch_clients,
        body=ClientsConfig,
        request=(
            'a JSON merge patch (RFC 7396) on the policy: `{"timeout": 0.5, "retries": 3, "budget": {"ratio": 0.1}}`;'
            ' an object merges key by key, `null` restores a key\'s default (`"budget": null`: no budget)'
        ),
        answers="the same as PUT",
    ),
    Endpoint(
        "GET",
        "/",
        _HTML,
        "The Arena: the live page (the same as /arena)",
        handler=None,
        errors=(),
        answers=(
            "the Arena, the live page (`docs/arena.md`), served with a Content-Security-Policy that allows no inline"
            " script; its files are under `/arena/static/`"
        ),
    ),
    Endpoint(
        "GET",
        "/arena",
        _HTML,
        "The Arena: the live page; /arena#run=ID opens a run from history",
        handler=None,
        errors=(),
        answers="the same page; `/arena#run=ID` opens a finished run from history (its post-mortem)",
    ),
    Endpoint(
        "GET",
        "/arena/static/{name}",
        Media(("text/javascript", "text/css", "image/png", "image/svg+xml", "text/html"), "a file of the page"),
        "The Arena's files (scripts, styles, images), with the page's Content-Security-Policy",
        handler=None,
        params=(Param("name", {"type": "string"}, where="path"),),
        errors=(404,),
        answers="a file shipped with the page, with its type; any other name is 404",
    ),
    Endpoint(
        "GET",
        "/arena/stages",
        StagesBody,
        "Each stage's kind, so the page offers only the faults that apply",
        handler=None,
        errors=(),
        answers='`{"stages": {name: kind}}`',
    ),
    Endpoint(
        "GET",
        "/api/v1/timeseries",
        v.TimeseriesBody,
        "The last ten minutes of telemetry for the Arena's charts (600 points at most)",
        handler=None,
        answers=(
            '`{"step_s", "window_s", "points": [{t, queue_depth, queue_slope, sojourn_p95, throughput, arrival_rate,'
            ' admitted_rate, goodput, throttle_factor, detector}…], "faults": {injected, recovered, failed,'
            " mean_recovery_s}}`: the last ten minutes of telemetry, one point per step, 600 at most (what the Arena"
            " charts)"
        ),
    ),
    Endpoint(
        "GET",
        "/api/v1/score",
        v.ScoreBody,
        "The live resilience score",
        handler=r.score,
        answers=(
            '`{"total", "grade", "availability", "recovery", "consistency", "version", "faults_injected",'
            ' "faults_recovered"}`'
        ),
    ),
    Endpoint(
        "GET",
        "/api/v1/report",
        v.ReportView,
        "The inspect report: the run report so far",
        handler=r.report,
        answers=(
            "the inspect report: the run report so far (same fields as `chaosd run`'s). It lists the newest"
            " `history.report` faults and incidents (100 by default; `faults_summary.faults_listed` says how many);"
            " its counts and score are of all of them"
        ),
    ),
    Endpoint(
        "GET",
        "/api/v1/runs",
        v.RunsBody,
        "History of runs, newest first",
        handler=r.runs,
        answers='`{"runs": [{id, started_unix, ended_unix, status, score}]}` (history, newest first)',
    ),
    Endpoint(
        "GET",
        "/api/v1/runs/{id}",
        v.RunBody,
        "One run with its report and a page of its faults",
        handler=r.run,
        params=(
            _RUN_ID,
            Param("faults_after", {"type": "integer", "minimum": 0, "maximum": 10**12}),
            Param("faults_limit", {"type": "integer", "minimum": 1, "maximum": 10_000}),
        ),
        request="`?faults_after=ID&faults_limit=N` (default 0 and 1,000; at most 10,000)",
        answers=(
            '`{run…, "report": {...}|null, "faults": [...], "faults_next": id|null}`: a page of the run\'s faults,'
            " oldest first; `faults_next` is the `faults_after` of the next page (null on the last)"
        ),
    ),
    Endpoint(
        "GET",
        "/api/v1/events",
        Media(
            ("text/event-stream",),
            "an event stream: frames of id, event (the kind) and data (t and EventView's data fields)",
            {"type": "string"},
        ),
        "Server-sent events (fault, detector, throttle, agent, leader, score, …)",
        handler=r.events,
        params=(
            Param("types", {"type": "string", "maxLength": 500, "pattern": "^([a-z_]{1,32}(,[a-z_]{1,32})*)?$"}),
            Param("replay", {"type": "integer", "minimum": 0, "maximum": 1000}),
            Param("last_event_id", {"type": "string", "pattern": "^[0-9]{1,20}$"}),
            Param("Last-Event-ID", {"type": "string", "maxLength": 20}, where="header"),
        ),
        errors=(*ERRORS, 429),
        describes=(v.EventView,),
        request="SSE; `?types=fault,detector`; `?replay=N` (0–1000); header `Last-Event-ID` (or `?last_event_id=`)",
        answers=(
            "`id: n`, `event: kind`, `data: {json}`; `: heartbeat` comments every 15 s. A new stream starts at the"
            " live edge; `replay=N` first sends the newest N matching buffered events; `Last-Event-ID` resumes after"
            " that id (with a `gap` event if the buffer no longer holds all that was missed). A client too slow for"
            " its 2,000-event queue gets an `overflow` event with `resume_after` and the stream ends; a stream whose"
            " writes stay blocked for 5 s (its client stopped reading) is cut"
        ),
    ),
)


def route_defs(endpoints: Iterable[Endpoint] = ENDPOINTS) -> list[web.RouteDef]:
    """What the router serves: every endpoint with a handler here (a GET answers HEAD too)."""
    return [web.route(e.method, e.path, e.handler) for e in endpoints if e.handler is not None]


def declared(endpoints: Iterable[Endpoint] = ENDPOINTS) -> set[tuple[str, str]]:
    return {(e.method, e.path) for e in endpoints}


def served(app: web.Application) -> set[tuple[str, str]]:
    """Every method and path the app's router answers (without the HEAD each GET adds)."""
    found = set()
    for route in app.router.routes():
        resource = route.resource
        if resource is not None and route.method != "HEAD":
            found.add((route.method, resource.canonical))
    return found


def _queries(endpoints: Iterable[Endpoint]) -> dict[str, frozenset[str]]:
    # By path, not by method: a route given another method's parameter gets that method's own refusal.
    taken: dict[str, set[str]] = {}
    for e in endpoints:
        taken.setdefault(e.path, set()).update(p.name for p in e.params if p.where == "query")
    return {path: frozenset(names) for path, names in taken.items()}


_QUERIES = _queries(ENDPOINTS)


def check_query(path: str, query: Collection[str]) -> None:
    """A query parameter the route does not take is a mistake to report, never to ignore."""
    allowed = _QUERIES.get(path, frozenset())
    for key in query:
        if key not in allowed:
            known = f" (this route takes: {', '.join(sorted(allowed))})" if allowed else " (this route takes none)"
            raise HttpError(400, "query", f"unknown query parameter{known}")


BEGIN = "<!-- api-table:begin (scripts/api_table.py --write) -->"
END = "<!-- api-table:end -->"


def markdown_table(endpoints: Iterable[Endpoint] = ENDPOINTS) -> str:
    rows = ["| method | path | body / query | answer |", "|---|---|---|---|"]
    for e in endpoints:
        cells = (e.method, f"`{e.path}`", e.request, e.answers)
        rows.append("|" + "|".join(f" {cell} " if cell else " " for cell in cells) + "|")
    return "\n".join(rows) + "\n"


def rewrite_docs(text: str, endpoints: Iterable[Endpoint] = ENDPOINTS) -> str:
    """``text`` (docs/api.md) with what lies between the markers replaced by the endpoint table."""
    if text.count(BEGIN) != 1 or text.count(END) != 1:
        raise ValueError(f"the endpoint table is marked by one {BEGIN} and one {END}")
    head, rest = text.split(BEGIN)
    _, tail = rest.split(END)
    return f"{head}{BEGIN}\n{markdown_table(endpoints)}{END}{tail}"
