"""The same leader_assassination scenario as tests/system/test_redis_scenario.py, on the in-memory backend, in real time
at the same speed: the scenario passes its expectations on both backends."""

from __future__ import annotations

import pytest
from test_redis_scenario import assert_passes, run_scenario

# 20 to 25 s of real time, mostly waiting
pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


def test_leader_assassination_in_memory_real_time() -> None:
    report = run_scenario({"backend": {"kind": "memory"}})
    assert report["clock"] == "real"
    assert_passes(report)
