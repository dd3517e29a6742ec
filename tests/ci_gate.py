"""Where CI is set, a skip for a missing module is a failure: the pytest hooks behind ``tests/needs.py``'s rule.

``pytest.importorskip`` skips with the message below when the module is missing; ``tests/needs.py`` fails by itself
where CI is set. A plugin of its own (``tests/conftest.py`` loads it) so a test of the rule can load it alone.
"""

from __future__ import annotations

from typing import Any

import pytest
from needs import in_ci

# pytest.importorskip's message when the module is missing
_IMPORT_SKIP = "could not import "


def _fail_missing_import(report: pytest.CollectReport | pytest.TestReport) -> None:
    if report.skipped and in_ci() and isinstance(report.longrepr, tuple) and _IMPORT_SKIP in report.longrepr[2]:
        report.outcome = "failed"
        report.longrepr = f"{report.longrepr[2]}; CI is set, so the install step (the test extra) must provide it"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    outcome = yield
    _fail_missing_import(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Any:
    outcome = yield
    _fail_missing_import(outcome.get_result())
