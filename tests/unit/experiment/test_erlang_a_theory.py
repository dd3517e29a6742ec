"""The tests' own Erlang A (M/M/n+M) oracle: its closed forms against the birth–death chain they describe, and
against the limits it must reach (Erlang C as patience grows without bound, M/M/∞ when patience equals service)."""

from __future__ import annotations

import math

import pytest
from queueing_theory import erlang_a, erlang_a_chain, erlang_a_log_series, erlang_b, erlang_c, mmc_lq

MU = 1.0
CASES = [
    pytest.param(n, rho, theta, id=f"n{n}-rho{rho}-theta{theta}")
    for n in (1, 4, 10)
    for rho in (0.5, 0.9, 1.2, 2.0)
    for theta in (0.2, 1.0, 3.0)
]
MEASURES = ("p_wait", "p_abandon", "queue", "goodput")


@pytest.mark.parametrize(("n", "rho", "theta"), CASES)
def test_the_closed_forms_agree_with_the_chain(n: int, rho: float, theta: float) -> None:
    lam = rho * n * MU
    closed, chain = erlang_a(n, lam, MU, theta), erlang_a_chain(n, lam, MU, theta)
    for measure in MEASURES:
        assert closed[measure] == pytest.approx(chain[measure], rel=1e-6, abs=1e-12), measure
    # Flow conservation inside the chain: what arrives is served or abandons.
    assert chain["goodput"] + theta * chain["queue"] == pytest.approx(lam, rel=1e-9)
    assert 0 < closed["p_abandon"] < closed["p_wait"] < 1


def _p_abandon_wrong_sign(n: int, lam: float, theta: float) -> float:
    """The abandonment formula with the sign of its (1 − 1/ρ) term flipped: what a slip in copying it gives."""
    rho = lam / (n * MU)
    big_a = math.exp(erlang_a_log_series(n * MU / theta, lam / theta))
    eb = erlang_b(n, lam / MU)
    p_wait = big_a * eb / (1 + (big_a - 1) * eb)
    return p_wait * (1 / (rho * big_a) - 1 + 1 / rho)


@pytest.mark.parametrize(("n", "rho", "theta"), CASES)
def test_the_chain_tells_a_wrong_formula_apart(n: int, rho: float, theta: float) -> None:
    """Negative control: the check that passes the right formula fails one with a flipped sign, by far more than
    its 1e-6 tolerance."""
    lam = rho * n * MU
    wrong = _p_abandon_wrong_sign(n, lam, theta)
    assert abs(wrong - erlang_a_chain(n, lam, MU, theta)["p_abandon"]) > 1e-3


@pytest.mark.parametrize("n", [1, 4, 10])
@pytest.mark.parametrize("rho", [0.5, 0.9])
def test_endless_patience_below_capacity_is_erlang_c(n: int, rho: float) -> None:
    """As θ → 0 with ρ < 1 nobody abandons, and M/M/n+M becomes M/M/n: P(wait > 0) → Erlang C and E[Q] → L_q.
    The gap shrinks in proportion to θ (measured at three values, each a tenth of the last), so the limit is
    reached, not merely approached by chance."""
    lam = rho * n * MU
    lq = mmc_lq(n, lam, MU)
    gaps = []
    for theta in (1e-3, 1e-4, 1e-5):
        m = erlang_a(n, lam, MU, theta)
        gaps.append(abs(m["p_wait"] - erlang_c(n, lam / MU)) + abs(m["queue"] - lq) / lq)
        assert m["p_abandon"] == pytest.approx(theta * lq / lam, rel=0.2)  # θ·E[Q]/λ with E[Q] near L_q
    assert gaps[1] < gaps[0] / 5 and gaps[2] < gaps[1] / 5
    assert gaps[2] < 3e-3


@pytest.mark.parametrize("rho", [1.2, 2.0])
def test_endless_patience_above_capacity_loses_the_excess(rho: float) -> None:
    """As θ → 0 with ρ > 1 there is no Erlang C to reach; the servers stay busy and the excess abandons:
    P(abandon) → 1 − 1/ρ, the fluid share. With θ larger, callers leave sooner and more of them abandon."""
    n, lam = 4, rho * 4 * MU
    assert erlang_a(n, lam, MU, 1e-3)["p_abandon"] == pytest.approx(1 - 1 / rho, rel=1e-2)
    assert erlang_a(n, lam, MU, 3.0)["p_abandon"] > erlang_a(n, lam, MU, 1e-3)["p_abandon"] + 0.02


@pytest.mark.parametrize("n", [1, 4, 10])
def test_patience_as_long_as_service_is_an_infinite_server_queue(n: int) -> None:
    """With θ = μ every caller present leaves at rate μ, served or not: the number present is Poisson(λ/μ),
    so P(wait > 0) = P(Poisson ≥ n), E[Q] = E[(N − n)+], whatever ρ is."""
    a = 1.5 * n
    poisson = [math.exp(-a + k * math.log(a) - math.lgamma(k + 1)) for k in range(200)]
    m = erlang_a(n, a * MU, MU, MU)
    assert m["p_wait"] == pytest.approx(math.fsum(poisson[n:]), rel=1e-9)
    assert m["queue"] == pytest.approx(math.fsum((k - n) * p for k, p in enumerate(poisson) if k > n), rel=1e-9)
