"""The simulator against queueing theory at ρ = 0.9, where runs must be long (6,750 s measured after a 50 s warm-up;
2,700 s with four servers); apart from ``test_queueing.py`` only so the suite's workers run them side by side."""

from __future__ import annotations

import pytest
from test_queueing import LONG, LONG_4, theory_test

pytestmark = pytest.mark.cpu  # virtual time: CPU only, at a lower priority as root (conftest.py)

test_simulator_agrees_with_queueing_theory_near_saturation = theory_test(
    pytest.param(1, 0.9, "exponential", LONG, id="M/M/1-rho0.9"),
    pytest.param(4, 0.9, "exponential", LONG_4, id="M/M/4-rho0.9"),
)
