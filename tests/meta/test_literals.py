"""The closed sets named once as Literals agree with the enums that list their values at run time."""

from __future__ import annotations

from typing import get_args

from chaosd.admission.detector import DetectorState
from chaosd.views import DetectorStateName


def test_the_detector_states_are_the_literal() -> None:
    assert sorted(s.value for s in DetectorState) == sorted(get_args(DetectorStateName))
