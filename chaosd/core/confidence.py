"""A mean and its 95 % confidence interval over a few independent runs (Student's t, n - 1 degrees of freedom)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from chaosd.views import MeanCI

__all__ = ["mean_ci", "t975"]

# The 0.975 quantile of Student's t for 1 to 30 degrees of freedom (a two-sided 95 % interval), to 4 decimals.
_T975 = (
    12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
    2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
    2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423,
)  # fmt: skip
_Z975 = 1.959963984540054


def t975(df: int) -> float:
    """Student's t 0.975 quantile for ``df`` ≥ 1 degrees of freedom.

    A table to 30; beyond, the Cornish-Fisher expansion around the normal quantile (within 1e-5 there).
    """
    if df < 1:
        raise ValueError(f"degrees of freedom must be ≥ 1 (got {df})")
    if df <= len(_T975):
        return _T975[df - 1]
    z = _Z975
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    return z + g1 / df + g2 / df**2 + g3 / df**3


def mean_ci(given: Sequence[float | None], *, quantile: float | None = None) -> MeanCI:
    """The mean of the values given and its 95 % CI: mean ± t(n-1) · s / √n, with s the sample deviation (n - 1).

    None stands for a run that did not measure the figure (no fault of that action, no task done): it is left
    out, and ``n`` counts the rest. No values: mean null. One value: its mean, ci95 null (one run says nothing
    about the spread). ``quantile`` replaces t(n-1) (the tests' negative control uses the normal one).
    """
    values = [v for v in given if v is not None]
    n = len(values)
    if n == 0:
        return {"mean": None, "ci95": None, "n": 0}
    mean = math.fsum(values) / n
    if n == 1:
        return {"mean": mean, "ci95": None, "n": 1}
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    half = (t975(n - 1) if quantile is None else quantile) * sd / math.sqrt(n)
    return {"mean": mean, "ci95": [mean - half, mean + half], "n": n}
