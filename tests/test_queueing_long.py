"""The simulator against queueing theory at ρ = 0.9, where runs must be long (7,500 s; 3,000 s with four servers).

Kept apart from ``test_queueing.py`` only so the suite's workers can run them side by side.
"""

from __future__ import annotations

import pytest
from test_queueing import LONG, LONG_4, check_against_theory

pytestmark = pytest.mark.cpu  # virtual time: CPU only, at a lower priority as root (conftest.py)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("c", "rho", "distribution", "duration"),
    [
        pytest.param(1, 0.9, "exponential", LONG, id="M/M/1-rho0.9"),
        pytest.param(4, 0.9, "exponential", LONG_4, id="M/M/4-rho0.9"),
    ],
)
def test_simulator_agrees_with_queueing_theory_near_saturation(
    c: int, rho: float, distribution: str, duration: float
) -> None:
    check_against_theory(c, rho, distribution, duration)
