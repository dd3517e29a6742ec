"""Configuration: TOML read once, overlaid by a scenario, overridden by ``CHAOSD_…`` variables.

Validated at start and frozen; components receive the parts they need.
"""

from __future__ import annotations

import ipaddress
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from chaosd.config.clients import BackoffConfig, BudgetConfig, ClientsConfig, PatienceConfig, RetryOn
from chaosd.config.handlers import handler_problems
from chaosd.config.logs import LogConfig
from chaosd.config.problems import Layer, closest, problems_of, stray_variables
from chaosd.core.durations import Seconds
from chaosd.core.errors import ConfigError
from chaosd.core.urls import parse_upstream

__all__ = [
    "AdmissionPolicy",
    "ApiConfig",
    "BackendConfig",
    "BackoffConfig",
    "BudgetConfig",
    "ClientsConfig",
    "DaemonConfig",
    "DetectorConfig",
    "FaultsConfig",
    "LoadConfig",
    "LogConfig",
    "OrchestratorConfig",
    "PatienceConfig",
    "Phase",
    "PressureConfig",
    "QueueConfig",
    "RecoveryConfig",
    "RetryOn",
    "RunConfig",
    "ScoreConfig",
    "ServiceConfig",
    "Settings",
    "SinkConfig",
    "SloConfig",
    "StageConfig",
    "StageKind",
    "StopCondition",
    "StorageConfig",
    "SupervisorConfig",
    "TelemetryConfig",
    "ThrottleConfig",
    "TracingConfig",
    "WorkersConfig",
    "deep_merge",
    "environment_settings",
    "load_settings",
    "read_toml",
]

ENV_PREFIX = "CHAOSD_"

AdmissionPolicy = Literal["capacity", "aimd", "none"]
StageKind = Literal["compute", "tool", "llm", "memory", "mcp", "python"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Phase(_Model):
    """One change of the offered rate: a step, a linear ramp, or a spike that ends."""

    type: Literal["step", "ramp", "spike"]
    at: Seconds = Field(ge=0, description="clock seconds from the start of the run")
    rate: float = Field(ge=0, description="tasks per second, all producers together")
    duration: Seconds = Field(default=0.0, ge=0, description="ramp length or spike length")

    @model_validator(mode="after")
    def _needs_duration(self) -> Phase:
        if self.type in ("ramp", "spike") and self.duration <= 0:
            raise ValueError(f"a {self.type} needs a duration > 0")
        return self


class LoadConfig(_Model):
    arrival: Literal["poisson", "constant", "bursty"] = "poisson"
    rate: float = Field(default=200.0, ge=0)
    producers: int = Field(default=4, ge=1, le=10_000)
    burst_size: float = Field(default=10.0, ge=1)
    deadline: Seconds = Field(default=1.0, ge=0)
    phases: tuple[Phase, ...] = ()

    @model_validator(mode="after")
    def _phases_in_order(self) -> LoadConfig:
        times = [p.at for p in self.phases]
        if times != sorted(times):
            raise ValueError("phases must be listed in order of `at`")
        return self


class QueueConfig(_Model):
    capacity: int = Field(default=10_000, ge=1)
    when_full: Literal["block", "drop", "reject"] = "reject"


class WorkersConfig(_Model):
    count: int = Field(default=4, ge=1, le=100_000)


class ServiceConfig(_Model):
    distribution: Literal["exponential", "constant", "lognormal", "uniform"] = "exponential"
    mean: Seconds = Field(default=0.01, ge=0)
    sigma: float = Field(default=0.5, gt=0, description="lognormal: sd of the underlying normal")
    low: Seconds | None = Field(default=None, ge=0)
    high: Seconds | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _consistent(self) -> ServiceConfig:
        if self.distribution in ("exponential", "lognormal") and self.mean <= 0:
            raise ValueError(f"mean must be > 0 for a {self.distribution} distribution")
        if self.distribution == "uniform":
            if self.low is None or self.high is None:
                raise ValueError("a uniform distribution needs low and high")
            if self.low > self.high:
                raise ValueError("low must not exceed high")
        return self

    def expected(self) -> float:
        if self.distribution == "uniform" and self.low is not None and self.high is not None:
            return (self.low + self.high) / 2
        return self.mean


class PressureConfig(_Model):
    enabled: bool = False
    threshold: float = Field(default=0.5, ge=0, lt=1, description="queue saturation where failures start")
    max_probability: float = Field(default=0.5, ge=0, le=1, description="failure probability at a full queue")


class StageConfig(_Model):
    name: str = Field(min_length=1, max_length=64)
    kind: StageKind = "compute"
    handler: str | None = Field(
        default=None, min_length=1, description='python: "package.module:function", an async callable of yours'
    )
    params: dict[str, str | int | float | bool] = Field(
        default_factory=dict, description="python: a table handed to the handler as context.params"
    )
    setup: str | None = Field(
        default=None,
        min_length=1,
        description='python: "package.module:function", awaited once at start; what it returns is context.state',
    )
    teardown: str | None = Field(
        default=None,
        min_length=1,
        description='python: "package.module:function", awaited once at stop with the state setup returned',
    )
    dependencies: tuple[str, ...] = Field(
        default=(),
        description="python: names from [dependencies] whose calls pass through chaosd's fault proxy",
    )
    service: ServiceConfig = ServiceConfig()
    timeout: Seconds = Field(default=0.0, ge=0, description="0 = none")
    retries: int = Field(default=0, ge=0, le=100)
    backoff: BackoffConfig = BackoffConfig()
    failure_probability: float = Field(default=0.0, ge=0, le=1)
    pressure: PressureConfig = PressureConfig()
    next: tuple[str, ...] | None = Field(
        default=None, description="successors in order of preference; unset everywhere = a chain in list order"
    )
    optional: bool = Field(
        default=False, description="removed or breaker open: tasks skip the stage and complete degraded"
    )
    # Kind-specific recovery (ignored by other kinds):
    degrade: bool = Field(default=True, description="tool: after the last retry, complete degraded")
    fallback: ServiceConfig | None = Field(default=None, description="llm: fallback model's service time")
    reconnect: BackoffConfig = Field(
        default=BackoffConfig(base=0.05, factor=2.0, max=2.0), description="mcp: reconnect backoff"
    )
    entries: int = Field(default=256, ge=1, le=1_000_000, description="memory: entries in the store")
    checksums: bool = Field(default=True, description="memory: detect corruption on read and by scrubbing")
    restore_time: Seconds = Field(default=0.005, ge=0, description="memory: time to restore one entry")
    breaker_threshold: int = Field(default=5, ge=0, description="consecutive failed attempts that open the breaker")
    breaker_reset: Seconds = Field(default=2.0, gt=0, description="seconds open before a trial (half-open)")


_DEPENDENCY_NAME = r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$"


class DependencyConfig(_Model):
    """Something a python stage calls: its calls go through a fault proxy chaosd starts in front of it."""

    upstream: SecretStr = Field(
        description='"http://host:port/base", "https://…" or "tcp://host:port"; a password in it is never shown'
    )
    connect_timeout: Seconds = Field(default=5.0, gt=0, description="to open a connection to the upstream")
    read_timeout: Seconds = Field(
        default=30.0, gt=0, description="HTTP: the longest wait for the upstream's next bytes; then 504"
    )

    @field_validator("upstream")
    @classmethod
    def _parses(cls, upstream: SecretStr) -> SecretStr:
        parse_upstream(upstream.get_secret_value())  # its message never holds the password
        return upstream


def dependency_kind(dependency: DependencyConfig) -> Literal["http", "tcp"]:
    """``tcp`` for a raw TCP dependency, else ``http`` (an https upstream is called as http through its proxy)."""
    return "tcp" if dependency.upstream.get_secret_value().lower().startswith("tcp://") else "http"


class OrchestratorConfig(_Model):
    replicas: int = Field(default=3, ge=1, le=99)
    lease_ttl: Seconds = Field(default=0.5, gt=0, description="dispatch lease; a standby takes over after it")
    renew_interval: Seconds = Field(default=0.125, gt=0)
    checkpoint_interval: Seconds = Field(default=2.0, gt=0)
    task_lease: Seconds = Field(default=2.0, gt=0, description="a worker's lease on a task; then redelivered")

    @model_validator(mode="after")
    def _renew_within_ttl(self) -> OrchestratorConfig:
        if self.renew_interval >= self.lease_ttl:
            raise ValueError("renew_interval must be shorter than lease_ttl")
        return self


class SupervisorConfig(_Model):
    enabled: bool = True
    backoff: BackoffConfig = BackoffConfig(base=0.5, factor=2.0, max=10.0)
    max_restarts: int = Field(default=5, ge=0, description="restart intensity: at most this many…")
    window: Seconds = Field(default=60.0, gt=0, description="…restarts of one agent within this many seconds")


class StopCondition(_Model):
    metric: Literal["availability", "error_rate", "goodput_ratio"] = "availability"
    below: float | None = Field(default=None, ge=0)
    above: float | None = Field(default=None, ge=0)
    for_s: Seconds = Field(default=10.0, gt=0, alias="for")

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="after")
    def _one_bound(self) -> StopCondition:
        if (self.below is None) == (self.above is None):
            raise ValueError("give exactly one of below or above")
        return self


class FaultsConfig(_Model):
    default_ttl: Seconds = Field(default=10.0, gt=0)
    max_ttl: Seconds = Field(default=600.0, gt=0)
    max_concurrent: int = Field(default=5, ge=1)
    stop_conditions: tuple[StopCondition, ...] = ()

    @model_validator(mode="after")
    def _ttl_order(self) -> FaultsConfig:
        if self.default_ttl > self.max_ttl:
            raise ValueError("default_ttl must not exceed max_ttl")
        return self


class RecoveryConfig(_Model):
    baseline_window: Seconds = Field(default=10.0, gt=0, description="fault-free time the baseline covers")
    baseline_min: Seconds = Field(default=5.0, gt=0, description="fault-free time before a baseline counts")
    tolerance: float = Field(default=0.25, gt=0, description="relative distance from the baseline allowed")
    confirm: Seconds = Field(default=3.0, ge=0, description="how long the service must stay within it")
    limit: Seconds = Field(default=60.0, gt=0, description="after the fault ends; else the recovery failed")
    unplanned_after: Seconds = Field(
        default=5.0,
        ge=0,
        description="out of tolerance this long with no fault in play opens an incident nobody injected; 0 = never",
    )
    cpu_wait: float = Field(
        default=0.2,
        gt=0,
        le=1,
        description="a telemetry window in which the daemon waited this share of its time for a CPU is the host's",
    )


class SloConfig(_Model):
    """Service-level objectives; where given, recovery is judged against them instead of the baseline."""

    availability: float | None = Field(default=None, gt=0, le=1, description="goodput / offered, per window")
    p95: Seconds | None = Field(default=None, gt=0, description="p95 sojourn of completed tasks")


class ScoreConfig(_Model):
    availability: float = Field(default=0.4, ge=0, le=1)
    recovery: float = Field(default=0.3, ge=0, le=1)
    consistency: float = Field(default=0.3, ge=0, le=1)
    recovery_rate_share: float = Field(default=0.7, ge=0, le=1)
    speed_best: Seconds = Field(default=1.0, ge=0)
    speed_worst: Seconds = Field(default=10.0, gt=0)

    @model_validator(mode="after")
    def _weights(self) -> ScoreConfig:
        if abs(self.availability + self.recovery + self.consistency - 1.0) > 1e-9:
            raise ValueError("availability + recovery + consistency weights must sum to 1")
        if self.speed_best >= self.speed_worst:
            raise ValueError("speed_best must be below speed_worst")
        return self


class SinkConfig(_Model):
    idempotent: bool = Field(default=True, description="suppress a second outcome for a task")


class TelemetryConfig(_Model):
    tick: Seconds = Field(default=0.1, gt=0, le=10)
    window: Seconds = Field(default=1.0, gt=0, le=600)

    @model_validator(mode="after")
    def _window_spans_ticks(self) -> TelemetryConfig:
        if self.window < self.tick:
            raise ValueError("window must be at least one tick")
        return self


class DetectorConfig(_Model):
    enabled: bool = True
    saturation: float = Field(default=0.85, gt=0, le=1)
    hold: Seconds = Field(default=2.0, ge=0)
    hold_fraction: float = Field(default=0.7, gt=0, le=1)
    slope_window: Seconds = Field(default=1.0, gt=0)
    min_growth: float = Field(default=0.05, ge=0, description="dQ/dt as a share of the service rate")
    latency_growth: float = Field(default=1.0, gt=0, description="rule 2: p95 growth, 1.0 = +100 %")
    latency_hold: Seconds = Field(default=4.0, ge=0, description="rule 2's hold time")
    baseline_window: Seconds = Field(default=30.0, gt=0)
    standing_queue: float = Field(default=3.0, gt=0, description="in mean service times")
    standing_window: Seconds = Field(default=0.3, ge=0)
    clear_hold: Seconds = Field(default=2.0, ge=0)
    recover_hold: Seconds = Field(default=5.0, ge=0)
    shed_share: float = Field(
        default=0.01, gt=0, le=1, description="overload: refusals above this share of the offered load"
    )
    collapse_goodput: float = Field(
        default=0.5, gt=0, le=1, description="collapse: goodput below this share of min(offered, capacity)"
    )
    storm_attempts: float = Field(
        default=1.5, gt=1, description="metastable: attempts per caller above this (callers retrying)"
    )
    storm_waste: float = Field(
        default=0.5, gt=0, le=1, description="metastable: completions nobody waited for above this share of them"
    )
    stall: Seconds = Field(default=0.05, gt=0, description="a tick this late means the process was paused")
    failing_goodput: float = Field(
        default=0.75,
        gt=0,
        le=1,
        description="failing: the good share of tasks ending below this share of its baseline (1 until learnt)",
    )
    failing_min_tasks: int = Field(
        default=2,
        ge=1,
        description="failing: at least this many tasks not good in the evidence (up to ten windows back at low load)",
    )


class ThrottleConfig(_Model):
    """Admission control: which policy decides what producers may submit, and its knobs."""

    enabled: bool = Field(default=True, description="false = policy none")
    policy: AdmissionPolicy = "capacity"
    max_wait: float = Field(
        default=0.8, gt=0, le=1, description="capacity: the longest wait admitted, as a share of the deadline"
    )
    target: Seconds = Field(
        default=0.0, ge=0, description="capacity: the wait kept once a queue stands; 0 = deadline/4"
    )
    standing: Seconds = Field(default=10.0, gt=0, description="capacity: a queue above target this long is no burst")
    decrease: float = Field(default=0.5, gt=0, lt=1, description="aimd: multiply the factor by this on an alarm")
    increase: float = Field(default=0.05, gt=0, le=1, description="aimd: add this while healthy")
    interval: Seconds = Field(default=1.0, gt=0, description="aimd: seconds between adjustments")
    min_factor: float = Field(default=0.05, gt=0, le=1, description="aimd: never admit less than this share")

    @property
    def active(self) -> AdmissionPolicy:
        """The policy in force: ``enabled = false`` is ``none`` whatever ``policy`` says."""
        return self.policy if self.enabled else "none"


class RunConfig(_Model):
    duration: Seconds = Field(default=60.0, gt=0)
    warmup: Seconds | None = Field(default=None, ge=0, description="default: 10 % of duration")
    report: str = "chaosd-report.json"
    timeline: Seconds = Field(default=5.0, gt=0, description="report timeline sample interval")


class HistoryConfig(_Model):
    """What a long-running process keeps in memory; everything older is in storage (the daemon) or counted."""

    faults: int = Field(default=1000, ge=10, le=1_000_000, description="newest faults and incidents kept in memory")
    report: int = Field(
        default=100, ge=1, le=1_000_000, description="newest faults and incidents the live report lists"
    )
    timeline: int = Field(default=2000, ge=10, le=1_000_000, description="newest report timeline points kept")
    entries: int = Field(
        default=1000, ge=10, le=1_000_000, description="newest plan log entries, collapse episodes and throttle actions"
    )


class DaemonConfig(_Model):
    status_interval: Seconds = Field(default=10.0, gt=0)
    report: str = "chaosd-report.json"
    shutdown_grace: Seconds = Field(default=5.0, gt=0, description="time the pipeline gets to stop")


_HOST_LABEL = re.compile(r"(?!-)[a-z0-9_-]{1,63}(?<!-)")


def _host_problem(raw: str) -> str | None:
    """Why ``raw`` is not a host name or IP address for ``api.allowed_hosts`` (None: it is one)."""
    name = raw.strip().lower()
    if name == "*":
        return None
    if not name:
        return "empty"
    if "://" in name or "/" in name:
        return "a host name, not a URL (e.g. chaosd.example.com)"
    if "*" in name:
        return 'the only wildcard is "*" alone (any host)'
    bare = name.removeprefix("[").removesuffix("]")
    if name.startswith("[") != name.endswith("]"):
        return "unbalanced brackets around an IPv6 address"
    try:
        ipaddress.ip_address(bare)
        return None
    except ValueError:
        if name.startswith("["):
            return "not an IPv6 address"
    if ":" in name:
        return "no port: a name is allowed on every port"
    labels = name.rstrip(".").split(".")
    if len(name) > 253 or not all(_HOST_LABEL.fullmatch(label) for label in labels):
        return "not a host name (letters, digits, - and _ in dot-separated labels)"
    return None


class ApiConfig(_Model):
    host: str = "127.0.0.1"
    port: int = Field(default=8686, ge=0, le=65535)
    token: SecretStr | None = Field(default=None, min_length=8, description="bearer token for mutating routes")
    token_file: str | None = Field(
        default=None, min_length=1, description="read the token from this file (a mounted secret), not the config"
    )
    heartbeat: Seconds = Field(default=15.0, gt=0, description="SSE heartbeat interval")
    max_connections: int = Field(default=8192, ge=1, le=1_000_000, description="open connections; more get 503")
    max_sse_subscribers: int = Field(default=100, ge=1, le=100_000, description="open event streams; more get 429")
    max_header_bytes: int = Field(default=8190, ge=1024, le=1 << 20, description="request line or one header; 431")
    max_body_bytes: int = Field(default=64 * 1024, ge=1024, le=64 << 20, description="request body; larger get 413")
    request_timeout: Seconds = Field(default=10.0, gt=0, le=3600, description="first byte to response; then 408")
    idle_timeout: Seconds = Field(default=60.0, gt=0, le=86400, description="a connection with no request is closed")
    allowed_hosts: tuple[str, ...] = Field(
        default=(),
        max_length=256,
        description='Host header names answered besides loopback and api.host (any port); "*" = any (docs/security.md)',
    )

    @field_validator("allowed_hosts", mode="before")
    @classmethod
    def _host_list(cls, value: object) -> object:
        if isinstance(value, str):
            raise ValueError('must be a list of host names, e.g. ["chaosd", "10.0.0.5"] (or ["*"] for any)')
        return value

    @field_validator("allowed_hosts")
    @classmethod
    def _host_names(cls, hosts: tuple[str, ...]) -> tuple[str, ...]:
        names = []
        for i, raw in enumerate(hosts):
            problem = _host_problem(raw)
            if problem is not None:
                raise ValueError(f"entry {i} ({raw[:64]!r}): {problem}")
            names.append(raw.strip().lower().removeprefix("[").removesuffix("]").rstrip("."))
        return tuple(names)

    @model_validator(mode="before")
    @classmethod
    def _read_token_file(cls, data: object) -> object:
        if not isinstance(data, Mapping) or not data.get("token_file"):
            return data
        if data.get("token") is not None:
            raise ValueError("give token or token_file, not both")
        path = Path(str(data["token_file"]))
        try:
            token = path.read_text().strip()
        except OSError as exc:
            raise ValueError(f"token_file {str(path)!r}: cannot read ({exc.strerror})") from None
        except UnicodeDecodeError:
            raise ValueError(f"token_file {str(path)!r}: not UTF-8 text") from None
        return {**data, "token": token}

    def token_value(self) -> str | None:
        """The token itself, for the one comparison that needs it; never log or store what this returns."""
        return self.token.get_secret_value() if self.token is not None else None


class TracingConfig(_Model):
    sample_every: int = Field(default=1000, ge=1, description="trace one task in this many (by task id)")


class StorageConfig(_Model):
    path: str = Field(default="chaosd-data/chaosd.db", min_length=1)


class BackendConfig(_Model):
    """Where the runtime lives: in this process (``memory``, virtual time possible) or on Redis Streams."""

    kind: Literal["memory", "redis"] = "memory"
    url: str = Field(default="redis://127.0.0.1:6379/0", min_length=1, description="redis: the server")
    stream: str = Field(default="chaosd:tasks", min_length=1, description="redis: the ingress stream")
    group: str = Field(default="chaosd-workers", min_length=1, description="redis: the workers' consumer group")
    prefix: str = Field(default="chaosd", min_length=1, description="redis: namespace of every other key")
    local_workers: bool = Field(default=True, description="redis: the daemon runs workers.count worker processes")
    batch: int = Field(default=1, ge=1, le=1000, description="redis: entries a worker reads at once (COUNT)")
    effect_ttl: Seconds = Field(default=3600.0, gt=0, description="redis: how long the sink remembers an effect")
    poll: Seconds = Field(default=0.05, gt=0, le=5, description="redis: the daemon's read interval")


def _exp(mean: float) -> ServiceConfig:
    return ServiceConfig(distribution="exponential", mean=mean)


def _default_stages() -> tuple[StageConfig, ...]:
    """A small agent workflow where every stage has an alternate or may be skipped (config/chaosd.toml says why)."""
    return (
        StageConfig(
            name="plan",
            kind="llm",
            service=_exp(0.003),
            retries=2,
            next=("search", "search_backup"),
            optional=True,
            fallback=_exp(0.005),
        ),
        StageConfig(name="search", kind="tool", service=_exp(0.003), timeout=0.05, retries=2, next=("recall",)),
        StageConfig(name="search_backup", kind="tool", service=_exp(0.004), timeout=0.05, retries=2, next=("recall",)),
        StageConfig(name="recall", kind="memory", service=_exp(0.001), next=("context",), optional=True),
        StageConfig(
            name="context", kind="mcp", service=_exp(0.001), retries=3, next=("answer", "answer_backup"), optional=True
        ),
        StageConfig(name="answer", kind="compute", service=_exp(0.002), next=()),
        StageConfig(name="answer_backup", kind="compute", service=_exp(0.003), next=()),
    )


class Settings(BaseSettings):
    """The whole configuration; field names are public interface."""

    environment_first: ClassVar[bool] = True  # CHAOSD_… variables read, and over the tables

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="forbid", frozen=True)

    seed: int = Field(default=1, ge=0)
    load: LoadConfig = LoadConfig()
    clients: ClientsConfig = ClientsConfig()
    queue: QueueConfig = QueueConfig()
    workers: WorkersConfig = WorkersConfig()
    stages: tuple[StageConfig, ...] = Field(default_factory=_default_stages)
    history: HistoryConfig = HistoryConfig()
    telemetry: TelemetryConfig = TelemetryConfig()
    detector: DetectorConfig = DetectorConfig()
    throttle: ThrottleConfig = ThrottleConfig()
    orchestrator: OrchestratorConfig = OrchestratorConfig()
    sink: SinkConfig = SinkConfig()
    supervisor: SupervisorConfig = SupervisorConfig()
    faults: FaultsConfig = FaultsConfig()
    recovery: RecoveryConfig = RecoveryConfig()
    slo: SloConfig = SloConfig()
    score: ScoreConfig = ScoreConfig()
    run: RunConfig = RunConfig()
    daemon: DaemonConfig = DaemonConfig()
    api: ApiConfig = ApiConfig()
    storage: StorageConfig = StorageConfig()
    tracing: TracingConfig = TracingConfig()
    log: LogConfig = LogConfig()
    backend: BackendConfig = BackendConfig()
    dependencies: dict[Annotated[str, StringConstraints(pattern=_DEPENDENCY_NAME)], DependencyConfig] = Field(
        default_factory=dict, description="what python stages call, by name: each gets a fault proxy"
    )

    @field_validator("stages")
    @classmethod
    def _unique_stage_names(cls, stages: tuple[StageConfig, ...]) -> tuple[StageConfig, ...]:
        if not stages:
            raise ValueError("at least one stage is needed")
        names = [s.name for s in stages]
        if len(set(names)) != len(names):
            raise ValueError(f"stage names must be unique (got {names})")
        known = set(names)
        for stage in stages:
            for successor in stage.next or ():
                if successor not in known:
                    near = closest(successor, known)
                    hint = f"; did you mean {near!r}?" if near else f" (the stages: {', '.join(names)})"
                    raise ValueError(f"stage {stage.name!r}: next names unknown stage {successor!r}{hint}")
        edges = {s.name: s.next or () for s in stages}
        state: dict[str, int] = {}

        def visit(node: str, path: tuple[str, ...]) -> None:
            if state.get(node) == 1:
                raise ValueError(f"stages form a cycle: {' -> '.join((*path, node))}")
            if state.get(node) == 2:
                return
            state[node] = 1
            for successor in edges[node]:
                visit(successor, (*path, node))
            state[node] = 2

        for name in names:
            visit(name, ())
        return stages

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Environment beats the file (and a scenario's overlay), as operators expect; settings built once the
        # environment has been read into their tables take those alone.
        return (env_settings, init_settings) if cls.environment_first else (init_settings,)


def deep_merge(base: Mapping[str, object], overlay: Mapping[str, object]) -> dict[str, object]:
    """Tables merge key by key; anything else (numbers, lists) is replaced."""
    merged = dict(base)
    for key, value in overlay.items():
        current = merged.get(key)
        if isinstance(value, Mapping) and isinstance(current, Mapping):
            merged[key] = deep_merge(current, value)
        else:
            merged[key] = value
    return merged


def read_toml(path: Path) -> dict[str, object]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError([(str(path), "", "file not found")]) from None
    except OSError as exc:
        raise ConfigError([(str(path), "", f"cannot read: {exc.strerror}")]) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([(str(path), "", f"not valid TOML: {exc}")]) from None


def load_settings(
    config_path: Path | None = None,
    overlay: Mapping[str, object] | None = None,
    overlay_source: str = "scenario",
    *,
    overrides: Mapping[str, object] | None = None,
    overrides_source: str = "command line",
) -> Settings:
    """Defaults < TOML file < overlay (a scenario's) < ``CHAOSD_…`` environment < overrides (the command line's).

    A file given with an overlay must be valid by itself too, as the daemon would read it: a bad value the
    overlay replaces is still reported, naming the file, rather than silently dropped.
    """
    stray = stray_variables(ENV_PREFIX, Settings.model_fields)
    if stray:
        raise ConfigError(stray)
    file_data = read_toml(config_path) if config_path is not None else {}
    layers: list[Layer] = [(str(config_path) if config_path is not None else "configuration", file_data)]
    if config_path is not None and overlay:
        _validated(Settings, file_data, layers)
    if overlay:
        layers.append((overlay_source, overlay))
    settings = _validated(Settings, deep_merge(file_data, overlay or {}), layers)
    if overrides:
        settings = _overridden(settings, overrides, [*layers, (overrides_source, overrides)])
    # Handlers are imported here, once the stages are valid, so a bad one stops chaosd before anything runs.
    handlers = handler_problems(settings.stages, settings.dependencies)
    if handlers:
        if overrides and "stages" in overrides:
            source = overrides_source
        else:
            source = _stages_source(config_path, overlay, overlay_source)
        raise ConfigError([(source, field, problem) for field, problem in handlers])
    return settings


def _validated(model: type[Settings], data: Mapping[str, object], layers: list[Layer]) -> Settings:
    # TOML in: unchecked tables, passed as keywords (BaseSettings's own are typed) for the model to check.
    tables: dict[str, Any] = dict(data)
    try:
        return model(**tables)
    except ValidationError as exc:
        env = ENV_PREFIX if model is Settings else None  # _AboveEnvironment reads no variables
        raise ConfigError(problems_of(exc, Settings, data, layers, env)) from None


class _AboveEnvironment(Settings):
    """Settings built from tables alone: the environment has been read into them already (their sources: above)."""

    environment_first: ClassVar[bool] = False


def _overridden(settings: Settings, overrides: Mapping[str, object], layers: list[Layer]) -> Settings:
    """``settings`` (environment included) with ``overrides`` on top, every section they touch validated again."""
    data: dict[str, object] = {name: getattr(settings, name) for name in Settings.model_fields}
    for name, value in overrides.items():
        current = data.get(name)
        if isinstance(current, BaseModel) and isinstance(value, Mapping):
            # The token read from api.token_file is kept as the token: both at once are refused.
            dumped = current.model_dump(by_alias=True, exclude={"token_file"} if name == "api" else None)
            data[name] = deep_merge(dumped, value)
        else:
            data[name] = value
    checked = _validated(_AboveEnvironment, data, layers)
    fields = {name: getattr(checked, name) for name in Settings.model_fields}
    return Settings.model_construct(settings.model_fields_set | set(overrides), **fields)


def environment_settings() -> list[str]:
    """The ``CHAOSD_…`` variables set now that name a setting (``CHAOSD_LOAD__RATE``), sorted."""
    sections = {name.upper() for name in Settings.model_fields}
    return sorted(
        name
        for name in os.environ
        if name.startswith(ENV_PREFIX) and name.removeprefix(ENV_PREFIX).split("__")[0] in sections
    )


def _stages_source(config_path: Path | None, overlay: Mapping[str, object] | None, overlay_source: str) -> str:
    """Where the stage list came from: it is replaced whole, never merged, so one source holds all of it."""
    if ENV_PREFIX + "STAGES" in os.environ:
        return f"environment {ENV_PREFIX}STAGES"
    if overlay and "stages" in overlay:
        return overlay_source
    return str(config_path) if config_path is not None else "configuration"
