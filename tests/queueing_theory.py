"""Queueing theory the simulator is judged against: M/M/c (Erlang C) and M/D/1 waits and sojourn percentiles."""

from __future__ import annotations

import math
from collections.abc import Callable


def erlang_c(c: int, a: float) -> float:
    """Probability that an arrival waits in M/M/c with offered load ``a`` = λ/μ."""
    rho = a / c
    top = a**c / math.factorial(c) / (1 - rho)
    return top / (sum(a**k / math.factorial(k) for k in range(c)) + top)


def mmc_lq(c: int, lam: float, mu: float) -> float:
    rho = lam / (c * mu)
    return erlang_c(c, lam / mu) * rho / (1 - rho)


def mmc_wq(c: int, lam: float, mu: float) -> float:
    return mmc_lq(c, lam, mu) / lam


def mmc_wait_p95(c: int, lam: float, mu: float) -> float:
    theta = c * mu - lam
    return max(0.0, math.log(erlang_c(c, lam / mu) / 0.05) / theta)


def _bisect(f: Callable[[float], float], lo: float, hi: float) -> float:
    """Root of an increasing ``f`` with f(lo) ≤ 0 < f(hi)."""
    for _ in range(200):
        mid = (lo + hi) / 2
        if f(mid) > 0:
            hi = mid
        else:
            lo = mid
    return (lo + hi) / 2


def _grow_until_positive(f: Callable[[float], float], start: float) -> float:
    hi = start
    while f(hi) <= 0:
        hi *= 2
    return hi


def mmc_sojourn_tail(c: int, lam: float, mu: float, t: float) -> float:
    """P(T > t) for the time in system of M/M/c."""
    if c == 1:
        return math.exp(-(mu - lam) * t)
    cw = erlang_c(c, lam / mu)
    theta = c * mu - lam
    if math.isclose(theta, mu):  # the limit of the general form as θ → μ
        return math.exp(-mu * t) * (1 + cw * mu * t)
    return (1 - cw) * math.exp(-mu * t) + cw * (theta * math.exp(-mu * t) - mu * math.exp(-theta * t)) / (theta - mu)


def mmc_sojourn_p95(c: int, lam: float, mu: float) -> float:
    if c == 1:
        return math.log(20) / (mu - lam)

    def excess(t: float) -> float:
        return 0.05 - mmc_sojourn_tail(c, lam, mu, t)

    return _bisect(excess, 0.0, _grow_until_positive(excess, 1 / mu))


def md1_wq(lam: float, d: float) -> float:
    """Pollaczek–Khinchine mean wait for M/D/1 with service time ``d``."""
    rho = lam * d
    return rho * d / (2 * (1 - rho))


def md1_wait_cdf(lam: float, d: float, t: float) -> float:
    """Erlang's M/D/1 waiting-time CDF: (1−ρ) Σ_{k=0}^{⌊t/D⌋} (λ(kD−t))^k / k! · e^{−λ(kD−t)}.

    The terms alternate in sign and grow like e^{λt}; doubles are accurate while λt stays small
    (here λt ≲ 6 at the 95th percentile).
    """
    rho = lam * d
    n = math.floor(t / d)
    terms = ((lam * (k * d - t)) ** k / math.factorial(k) * math.exp(-lam * (k * d - t)) for k in range(n + 1))
    return (1 - rho) * math.fsum(terms)


def md1_sojourn_p95(lam: float, d: float) -> float:
    def excess(t: float) -> float:
        return md1_wait_cdf(lam, d, t) - 0.95

    return _bisect(excess, 0.0, _grow_until_positive(excess, d)) + d
