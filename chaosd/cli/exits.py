"""The exit codes of chaosd's commands, which scripts and CI jobs read: one table for all of them."""

from __future__ import annotations

__all__ = [
    "EXIT_EXPECTATION",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_PLAN_FAILED",
    "EXIT_REJECTED",
    "EXIT_REPORT_NOT_WRITTEN",
    "EXIT_SERVER",
    "EXIT_UNREACHABLE",
    "EXIT_USAGE",
]

EXIT_OK = 0
EXIT_USAGE = 2  # a bad option or value: the message names it
EXIT_EXPECTATION = 3  # the run (or a fault, a scenario's expectation) did not hold
EXIT_UNREACHABLE = 4
EXIT_REJECTED = 5
EXIT_SERVER = 6
EXIT_PLAN_FAILED = 7  # a survival or scenario run did not reach its end: failed (crashed) or stopped by another
EXIT_REPORT_NOT_WRITTEN = 8  # the run ended, but its report could not be written where asked (kept elsewhere, named)
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a Ctrl-C
