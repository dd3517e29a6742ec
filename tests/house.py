"""The house's plan, read by the house-rules tests and kept true in docs/development.md: chaosd's packages in import
order (each may import itself and those above it in this list, never those below), and the size limits.
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


def diagram() -> str:
    """The plan as docs/development.md draws it: the top package first, each above the ones it may import."""
    width = max(len(name) for name in ORDER)
    rows = [f"{name:<{width}}  {what}" for name, what in reversed(PACKAGES)]
    return "\n" + f"\n{'↓':>{width // 2 + 1}}\n".join(rows) + "\n"
