"""The house's plan, read by the house-rules tests and kept true in docs/development.md: chaosd's packages in import
order (each may import itself and those above it in this list, never those below), and the size limits.

The debt lists name what does not keep a rule yet; a test fails when an entry there keeps it (take it off) or
when something not listed breaks it. They only ever shrink.
"""

from __future__ import annotations

PACKAGES: list[tuple[str, str]] = [
    ("views", "the shapes chaosd answers with, and what clients and daemon agree on"),
    ("core", "clock, event loops, random streams, durations, errors, histograms, bounded history"),
    ("events", "the flight recorder and what each kind of event carries"),
    ("config", "settings, their sources and problems, user handlers, secrets kept out"),
    ("faults", "the fault catalogue, the injector, fault records, the dependency proxy"),
    ("pipeline", "tasks, the queue, stages, workers, producers, the ledger"),
    ("backends", "where the pipeline runs: in memory, or on Redis Streams"),
    ("telemetry", "windows, percentiles, snapshots of the pipeline"),
    ("admission", "the detector and the throttle"),
    ("experiment", "one run: assembly, plans, scenarios, report, score, verdict"),
    ("batch", "many runs: replications, clusters, sweeps"),
    ("exporters", "Prometheus metrics and OpenTelemetry traces"),
    ("daemon", "the live experiment's controller and the run history"),
    ("arena", "the web page and the post-mortem file"),
    ("api", "HTTP routes, schemas, the event stream, the server"),
    ("cli", "the commands, the daemon's start-up, the HTTP client"),
    ("chaostoolkit", "the Chaos Toolkit extension"),
]
ORDER = [name for name, _ in PACKAGES]

FLAT_MODULES = 12  # at most, directly in chaosd/
CLASS_METHODS = 25
MODULE_LINES = 800
FUNCTION_LINES = 60
TOP_TEST_FILES = 10

# Known debts (see the module docstring).
DEBT_CLASSES: set[str] = {
    "chaosd/events/log.py:EventLog",
    "chaosd/pipeline/pipeline.py:Pipeline",
    "chaosd/daemon/control.py:Controller",
    "chaosd/faults/injector.py:Injector",
    "chaosd/daemon/storage.py:Storage",
    "chaosd/faults/runtime.py:Runtime",
    "chaosd/faults/proxy.py:FaultProxy",
}
DEBT_MODULES: set[str] = {"chaosd/views/__init__.py", "chaosd/cli/client.py"}
DEBT_FUNCTIONS: set[str] = {
    "chaosd/admission/detector.py:_judge",
    "chaosd/backends/redis/monitor.py:_poll_once",
    "chaosd/batch/replicate.py:prepare",
    "chaosd/cli/client.py:add_client_commands",
    "chaosd/cli/main.py:_parser",
    "chaosd/cli/main.py:_run",
    "chaosd/cli/main.py:main",
    "chaosd/core/_asyncio_internals.py:_run_once",
    "chaosd/core/humanize.py:fixes",
    "chaosd/experiment/plans.py:survival_plan",
    "chaosd/experiment/plans.py:window_report",
    "chaosd/experiment/report.py:render_summary",
    "chaosd/experiment/runner.py:_resilience",
    "chaosd/experiment/runner.py:report",
    "chaosd/experiment/score.py:compute_score",
    "chaosd/exporters/metrics.py:collect",
    "chaosd/faults/injector.py:_observe",
    "chaosd/faults/injector.py:on_tick",
    "chaosd/pipeline/pipeline.py:__init__",
    "chaosd/pipeline/producer.py:run",
    "chaosd/pipeline/stages.py:__init__",
}
