"""Which of chaosd's modules run compiled.

A wheel built from the source (``pip install .``) compiles the hot path below with mypyc: the simulated steps, the
queue, the ledger, the histograms, the telemetry tick and the fault injector's watch. That is the same source, so
the answers are the same bytes (CI compares the shipped scenarios' reports of both builds), and it runs faster. An
editable install (``pip install -e .``), ``CHAOSD_NO_EXTENSIONS=1``, or a machine without a C compiler gives plain
Python. ``chaosd --version`` says which one is running.

This module imports nothing of chaosd's: the build reads :data:`COMPILED` from it before anything is installed.
"""

from __future__ import annotations

import importlib
import importlib.machinery

__all__ = ["COMPILED", "build"]

COMPILED = (
    "chaosd/core/engine.py",
    "chaosd/core/histogram.py",
    "chaosd/pipeline/task.py",
    "chaosd/pipeline/ledger.py",
    "chaosd/pipeline/queue.py",
    "chaosd/pipeline/worker.py",
    "chaosd/pipeline/producer.py",
    "chaosd/telemetry/engine.py",
    "chaosd/faults/steady.py",
    "chaosd/faults/unplanned.py",
    "chaosd/faults/injector.py",
)


def build() -> str:
    """``compiled``, ``pure Python``, or ``partly compiled (k of n modules)`` when some failed to build."""
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    names = [path.removesuffix(".py").replace("/", ".") for path in COMPILED]
    native = sum(1 for name in names if str(importlib.import_module(name).__file__).endswith(suffixes))
    if native == len(names):
        return "compiled"
    return "pure Python" if native == 0 else f"partly compiled ({native} of {len(names)} modules)"
