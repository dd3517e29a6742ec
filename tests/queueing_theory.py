"""Queueing theory the simulator is judged against: M/M/c (Erlang C) and M/D/1 waits and sojourn percentiles, and
M/M/n+M (Erlang A: callers who abandon), with its birth–death chain as an independent check."""

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


# --- M/M/n+M (Erlang A): Poisson callers, n exponential servers, exponential patience of rate θ ---------------------


def erlang_b(n: int, a: float) -> float:
    """Erlang B: the share of callers n servers turn away at offered load ``a`` = λ/μ (the stable recursion)."""
    b = 1.0
    for k in range(1, n + 1):
        b = a * b / (k + a * b)
    return b


def erlang_a_log_series(x: float, y: float) -> float:
    """ln A(x, y), where A(x, y) = 1 + Σ_{j≥1} y^j / ∏_{i=1..j} (x + i), summed until the terms vanish.

    The terms grow while x + j < y (far past a double's range when θ is small), so they are summed as logarithms
    scaled by the largest, and the sum runs past j = y − x before it may stop.
    """
    logs, top, j = [0.0], 0.0, 0
    while True:
        j += 1
        logs.append(logs[-1] + math.log(y / (x + j)))
        top = max(top, logs[-1])
        if x + j > y and logs[-1] < top - 45:  # e^-45: below a double's precision against the largest term
            return top + math.log(math.fsum(math.exp(t - top) for t in logs))


def erlang_a(n: int, lam: float, mu: float, theta: float) -> dict[str, float]:
    """Mandelbaum & Zeltyn's closed forms for M/M/n+M: P(wait > 0), P(abandon), E[Q] and goodput.

    Written with 1/A so that a huge A (small θ above capacity) cannot overflow: A·E_B / (1 + (A − 1)·E_B) is
    E_B / (1/A + E_B − E_B/A).
    """
    rho = lam / (n * mu)
    inv_a = math.exp(-erlang_a_log_series(n * mu / theta, lam / theta))
    eb = erlang_b(n, lam / mu)
    p_wait = eb / (inv_a + eb - eb * inv_a)
    p_abandon = p_wait * (inv_a / rho + 1 - 1 / rho)
    return {
        "p_wait": p_wait,
        "p_abandon": p_abandon,
        "queue": lam * p_abandon / theta,
        "goodput": lam * (1 - p_abandon),
    }


def erlang_a_chain(n: int, lam: float, mu: float, theta: float) -> dict[str, float]:
    """The same measures from the birth–death chain itself (birth λ; death min(k, n)·μ + max(0, k − n)·θ),
    its stationary vector truncated where the terms vanish: no closed form involved.

    P(wait > 0) is the chain's mass at k ≥ n (Poisson arrivals see time averages); P(abandon) = θ·E[Q]/λ (the
    rate of abandonment over the rate of arrivals); goodput is the rate of service, Σ min(k, n)·μ·π_k. The
    weights are kept as logarithms, as in :func:`erlang_a_log_series`.
    """
    logs, top, k = [0.0], 0.0, 0
    while True:
        k += 1
        death = min(k, n) * mu + max(0, k - n) * theta
        logs.append(logs[-1] + math.log(lam / death))
        top = max(top, logs[-1])
        if death > lam and logs[-1] < top - 45:
            break
    weights = [math.exp(t - top) for t in logs]
    total = math.fsum(weights)
    pi = [w / total for w in weights]
    queue = math.fsum(max(0, k - n) * p for k, p in enumerate(pi))
    return {
        "p_wait": math.fsum(pi[n:]),
        "p_abandon": theta * queue / lam,
        "queue": queue,
        "goodput": math.fsum(min(k, n) * mu * p for k, p in enumerate(pi)),
    }
