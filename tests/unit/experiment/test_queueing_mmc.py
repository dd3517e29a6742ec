"""The simulator against queueing theory with four servers, at ρ 0.5 and 0.8 (M/M/4, 2,000 s each); apart from
``test_queueing.py`` only so the suite's workers run them side by side."""

from __future__ import annotations

import pytest
from test_queueing import SHORT, theory_test

pytestmark = pytest.mark.cpu  # virtual time: CPU only, at a lower priority as root (conftest.py)

test_simulator_agrees_with_queueing_theory_with_four_servers = theory_test(
    pytest.param(4, 0.5, "exponential", SHORT, id="M/M/4-rho0.5"),
    pytest.param(4, 0.8, "exponential", SHORT, id="M/M/4-rho0.8"),
)
