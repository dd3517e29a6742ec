"""Shared helpers: build settings from a TOML-shaped overlay and run them in virtual time."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from chaosd.config.settings import Settings, load_settings
from chaosd.core.clock import LoopClock, new_event_loop
from chaosd.daemon.control import Controller
from chaosd.experiment.runner import Experiment, run_offline

ROOT = Path(__file__).resolve().parent.parent
pytest_plugins = ["ci_gate", "versions_beside", "wheel_beside"]  # ci_gate: a missing dependency fails where CI is set


@pytest.fixture
def daemon_env(tmp_path: Path) -> dict[str, str]:
    """The environment for a `python -m chaosd` child started by the test itself, this checkout first."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["CHAOSD_API__PORT"] = "0"  # the daemon prints the port it got
    env["CHAOSD_DAEMON__STATUS_INTERVAL"] = "0.5"
    env["CHAOSD_DAEMON__REPORT"] = str(tmp_path / "daemon-report.json")
    return env


def settings(overlay: dict[str, Any]) -> Settings:
    return load_settings(None, overlay)


def run(overlay: dict[str, Any], duration: float, warmup: float = 0.0) -> dict[str, Any]:
    return run_offline(settings(overlay), duration=duration, warmup=warmup)


def live(script: Callable[[Controller, LoopClock, dict[str, Any]], Awaitable[None]], s: Settings) -> dict[str, Any]:
    """A daemon-like experiment (warm-up 0, as the daemon's) in virtual time; ``script`` drives its controller.

    Returns what ``script`` put in its ``out`` dict, plus ``lifetime``: the daemon's whole report at the end.
    """
    loop = new_event_loop(virtual=True)
    clock = LoopClock(loop)
    out: dict[str, Any] = {}

    async def main() -> None:
        exp = Experiment(s, clock, warmup=0.0, virtual=True)
        ctl = Controller(exp)

        async def plan(e: Experiment) -> None:
            await script(ctl, clock, out)
            out["lifetime"] = e.report()
            e.stop.set()

        await exp.run(None, plan=plan)

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    return out


def mmc(rate: float, workers: int, mean: float = 0.01, **extra: Any) -> dict[str, Any]:
    """An M/M/c overlay (exponential service, Poisson arrivals) with extra top-level sections merged in."""
    overlay: dict[str, Any] = {
        "load": {"arrival": "poisson", "rate": rate, "producers": 4},
        "workers": {"count": workers},
        "queue": {"capacity": 100_000, "when_full": "reject"},
        "stages": [{"name": "work", "service": {"distribution": "exponential", "mean": mean}}],
        "throttle": {"enabled": False},  # no faults and no throttle: the textbook M/M/c queue
    }
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(overlay.get(key), dict):
            overlay[key] = {**overlay[key], **value}
        else:
            overlay[key] = value
    return overlay


# Scheduling priority of `cpu`-marked tests (virtual time: they only need CPU) and of everything else (real
# daemons, Redis, Prometheus, Chromium, judged in real time). The suite runs three workers on two cores; at equal
# priority a real-time test beside two CPU-bound ones sees its processes wait for the scheduler, and a verdict
# judged in real time then measures the host. Lowering a nice value back needs root (CI runs as root); without
# it every test keeps the priority it started with.
_NICE_CPU = 10


def pytest_runtest_setup(item: pytest.Item) -> None:
    if os.geteuid() != 0:
        return
    want = _NICE_CPU if item.get_closest_marker("cpu") is not None else 0
    if os.getpriority(os.PRIO_PROCESS, 0) != want:
        os.setpriority(os.PRIO_PROCESS, 0, want)


# Roughly the wall seconds each file over 10 s takes on one of three workers in a whole-suite run on two cores;
# only their order matters. Under pytest-xdist (``-n 3 --dist loadfile``, as CI runs; the addopts keep this order)
# the longest start first, so the workers end together: in xdist's own order (most tests first) long files that
# mostly wait on real processes, such as the two Redis scenario files, can come last on one worker while the
# others idle.
_FILE_SECONDS = {
    "test_arena.py": 131,
    "test_clients.py": 116,
    "test_retry_storm_e2e.py": 91,
    "test_admission_realtime.py": 83,
    "test_api.py": 80,
    "test_dependencies.py": 76,
    "test_resilience.py": 63,
    "test_chaostoolkit.py": 53,
    "test_redis_clients.py": 52,
    "test_queueing_long.py": 48,
    "test_simpy_callers_model.py": 39,
    "test_install.py": 39,  # a whole-suite run builds its wheel beside (tests/wheel_beside.py)
    "test_redis_reconnect.py": 38,
    "test_storage_failures.py": 31,
    "test_readme_commands.py": 29,
    "test_redis_dependencies.py": 25,
    "test_redis_faults.py": 24,
    "test_redis_faults_more.py": 22,
    "test_redis_scenario.py": 22,
    "test_api_clients.py": 22,
    "test_redis_scenario_memory.py": 21,
    "test_golden_reports.py": 21,
    "test_long_poll.py": 21,
    "test_observability_e2e.py": 20,
    "test_vocabulary.py": 19,
    "test_detector.py": 19,
    "test_admission.py": 18,
    "test_plan_status.py": 17,
    "test_long_run.py": 17,
    "test_sweep.py": 17,
    "test_scenario_replications.py": 16,
    "test_windows.py": 15,
    "test_interrupt.py": 15,
    "test_secrets.py": 15,
    "test_observers.py": 14,
    "test_replications.py": 14,
    "test_survival_acceptance.py": 14,
    "test_redis_admission.py": 14,
    "test_fault_regions.py": 14,
    "test_browser_safety.py": 12,
    "test_memory_flat.py": 12,
    "test_compare_engines.py": 11,
    "test_lifecycle.py": 11,
    "test_signals.py": 10,
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest files first (measured, above), then those holding slow tests, then the rest in the usual order;
    in a serial run too."""
    slow = {item.path for item in items if item.get_closest_marker("slow") is not None}
    # stable: the usual order otherwise
    items.sort(key=lambda item: (-_FILE_SECONDS.get(item.path.name, 0), item.path not in slow))
