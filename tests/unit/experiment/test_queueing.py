"""The simulator against queueing theory: M/M/1, M/M/4 and M/D/1 (shared/reference/queueing.md).

Expected values come from closed forms (Erlang C, Pollaczek–Khinchine, Erlang's M/D/1 wait CDF);
the helpers are first checked against the worked table of the reference.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
from queueing_theory import (
    erlang_c,
    md1_sojourn_p95,
    md1_wait_cdf,
    md1_wq,
    mmc_lq,
    mmc_sojourn_p95,
    mmc_sojourn_tail,
    mmc_wait_p95,
    mmc_wq,
)

from chaosd.config.settings import load_settings
from chaosd.experiment.runner import run_offline

pytestmark = pytest.mark.cpu  # virtual time: CPU only, at a lower priority as root (conftest.py)

MU = 100.0  # per worker: mean service 10 ms
SEED = 1
TOLERANCE = 0.05
WARMUP_SHARE = 0.10  # of a run's duration, up to SHORT; longer runs warm up for LONG_WARMUP


# --- Reference formulas -------------------------------------------------------------------------


def _agrees_to_3_sig_figs(computed: float, table: float) -> bool:
    """Within half a unit of the table value's third significant figure."""
    if table == 0:
        return computed == 0
    half_unit = 0.5 * 10 ** (math.floor(math.log10(abs(table))) - 2)
    return abs(computed - table) <= half_unit


# --- The helpers reproduce the reference -------------------------------------------------------

# c, ρ, C, Lq, Wq (ms), W (ms), p95 wait (ms), p95 sojourn (ms) — the worked table, μ = 100/s.
WORKED = [
    (1, 0.50, 0.5000, 0.500, 10.00, 20.00, 46.05, 59.91),
    (1, 0.80, 0.8000, 3.200, 40.00, 50.00, 138.63, 149.79),
    (1, 0.90, 0.9000, 8.100, 90.00, 100.00, 289.04, 299.57),
    (4, 0.80, 0.5964, 2.386, 7.46, 17.46, 30.99, 47.38),
    (4, 0.95, 0.8914, 16.937, 44.57, 54.57, 144.04, 155.20),
]


@pytest.mark.parametrize("row", WORKED, ids=[f"c{row[0]}-rho{row[1]}" for row in WORKED])
def test_helpers_reproduce_the_worked_table(
    row: tuple[int, float, float, float, float, float, float, float],
) -> None:
    c, rho, cw, lq, wq_ms, w_ms, wait_p95_ms, sojourn_p95_ms = row
    lam = rho * c * MU
    computed = {
        "C": (erlang_c(c, lam / MU), cw),
        "Lq": (mmc_lq(c, lam, MU), lq),
        "Wq ms": (mmc_wq(c, lam, MU) * 1000, wq_ms),
        "W ms": ((mmc_wq(c, lam, MU) + 1 / MU) * 1000, w_ms),
        "p95 wait ms": (mmc_wait_p95(c, lam, MU) * 1000, wait_p95_ms),
        "p95 sojourn ms": (mmc_sojourn_p95(c, lam, MU) * 1000, sojourn_p95_ms),
    }
    wrong = {k: v for k, v in computed.items() if not _agrees_to_3_sig_figs(*v)}
    assert not wrong, f"helpers disagree with queueing.md (computed, table): {wrong}"


def test_general_sojourn_tail_matches_the_single_server_form() -> None:
    # With c = 1, C = ρ and θ = μ − λ: the general c > 1 expression must collapse to e^{−(μ−λ)t}.
    lam, mu, cw, theta = 80.0, MU, 0.8, MU - 80.0
    for t in (0.0, 0.01, 0.05, 0.15):
        general = (1 - cw) * math.exp(-mu * t) + cw * (theta * math.exp(-mu * t) - mu * math.exp(-theta * t)) / (
            theta - mu
        )
        assert general == pytest.approx(mmc_sojourn_tail(1, lam, mu, t), rel=1e-12)


def test_md1_wait_cdf_known_points() -> None:
    # P(W ≤ 0) = 1 − ρ (the arrival finds the server idle) and P(W ≤ D) = (1 − ρ)·e^ρ.
    d = 1 / MU
    for rho in (0.5, 0.8, 0.9):
        lam = rho * MU
        assert md1_wait_cdf(lam, d, 0.0) == pytest.approx(1 - rho, rel=1e-12)
        assert md1_wait_cdf(lam, d, d) == pytest.approx((1 - rho) * math.exp(rho), rel=1e-12)
    # Deterministic service waits less than exponential: P-K halves the M/M/1 mean wait.
    assert md1_wq(80.0, d) == pytest.approx(mmc_wq(1, 80.0, MU) / 2, rel=1e-12)
    assert md1_sojourn_p95(80.0, d) < mmc_sojourn_p95(1, 80.0, MU)


# --- The simulator agrees with the formulas ----------------------------------------------------


def _expected(c: int, rho: float, distribution: str) -> dict[str, float]:
    lam = rho * c * MU
    if distribution == "constant":
        assert c == 1, "only M/D/1 has a closed form here"
        wq = md1_wq(lam, 1 / MU)
        return {"mean wait": wq, "mean queue length": lam * wq, "p95 sojourn": md1_sojourn_p95(lam, 1 / MU)}
    return {
        "mean wait": mmc_wq(c, lam, MU),
        "mean queue length": mmc_lq(c, lam, MU),
        "p95 sojourn": mmc_sojourn_p95(c, lam, MU),
    }


# The theory runs read the report's whole-run measures (the wait and sojourn histograms, the depth integral), which
# the telemetry tick does not touch: they tick once a simulated second instead of ten times, which saves a quarter of
# their CPU. test_the_tick_does_not_change_what_the_theory_tests_measure checks that the measures are the same.
THEORY_TICK = 1.0


def _run(c: int, rho: float, distribution: str, duration: float, tick: float | None = THEORY_TICK) -> dict[str, Any]:
    warmup = WARMUP_SHARE * duration if duration <= SHORT else LONG_WARMUP
    overlay: dict[str, Any] = {
        "seed": SEED,
        "load": {"arrival": "poisson", "rate": rho * c * MU, "producers": 4},
        "workers": {"count": c},
        "queue": {"capacity": 100_000, "when_full": "reject"},
        "stages": [{"name": "work", "service": {"distribution": distribution, "mean": 1 / MU}}],
        "detector": {"enabled": False},
        # The textbook queue is unbounded: admission control would refuse the rare arrival behind 0.8 s of work.
        "throttle": {"policy": "none"},
    }
    if tick is not None:
        overlay["telemetry"] = {"tick": tick}
    return run_offline(load_settings(None, overlay), duration=duration, warmup=warmup)


def test_the_tick_does_not_change_what_the_theory_tests_measure() -> None:
    def measures(report: dict[str, Any]) -> tuple[float, ...]:
        return (
            report["latency"]["wait"]["mean"],
            report["queue"]["mean_depth"],
            report["latency"]["sojourn"]["p95"],
            report["tasks"]["completed"],
        )

    assert load_settings(None, {}).telemetry.tick < THEORY_TICK  # the default ticks more often
    default = _run(2, 0.8, "exponential", 200.0, tick=None)
    assert measures(_run(2, 0.8, "exponential", 200.0)) == measures(default)


# Run lengths such that what is measured after the warm-up estimates the M/M/1 queue within ±5 % at 95 %
# confidence: the time-average number in system has asymptotic variance 2ρ(1+ρ)/(μ(1−ρ)⁴) (Whitt 1989), which
# asks for 1,700 s at ρ = 0.8 and 6,500 s at ρ = 0.9 with μ = 100/s.
SHORT = 2_000.0  # a 10 % warm-up, then 1,800 s measured
# The warm-up only has to outlast the start from an empty queue: M/M/1 relaxes with time constant 1/(μ(1−√ρ)²),
# 3.8 s at ρ = 0.9 (the slowest queue here; four servers relax faster), so 50 s is 13 of them. A 10 % warm-up would
# simulate 750 s (300 s with four servers) that nothing measures.
LONG_WARMUP = 50.0
LONG = LONG_WARMUP + 6_750.0
# Four servers relax about four times faster than one at the same ρ (in heavy traffic the queue is an M/M/1
# queue served at 4μ), less the share of arrivals that never wait (Erlang C: 0.80 at ρ = 0.9). At 2,500 s seeds
# 1–5 fall within 2.7 % on all three quantities (std ≈ 1.7 %), so 2,700 s measured keeps ±5 % at 95 %.
LONG_4 = LONG_WARMUP + 2_700.0

# Four servers (test_queueing_mmc.py) and ρ = 0.9 (test_queueing_long.py, both beside this file) run in files of
# their own: the suite's workers take whole files, and these runs are a few CPU-minutes in all, so split they run
# side by side.
CASES = [
    pytest.param(1, 0.5, "exponential", SHORT, id="M/M/1-rho0.5"),
    pytest.param(1, 0.8, "exponential", SHORT, id="M/M/1-rho0.8"),
    pytest.param(1, 0.8, "constant", SHORT, id="M/D/1-rho0.8"),
]


def theory_test(*cases: Any) -> Callable[..., None]:
    """A test of ``cases`` (``pytest.param(c, rho, distribution, duration)``) against theory, for a module to
    bind to a ``test_`` name; marked slow."""

    @pytest.mark.slow
    @pytest.mark.parametrize(("c", "rho", "distribution", "duration"), cases)
    def test(c: int, rho: float, distribution: str, duration: float) -> None:
        check_against_theory(c, rho, distribution, duration)

    return test


test_simulator_agrees_with_queueing_theory = theory_test(*CASES)


def check_against_theory(c: int, rho: float, distribution: str, duration: float) -> None:
    expected = _expected(c, rho, distribution)
    report = _run(c, rho, distribution, duration)
    measured = {
        "mean wait": report["latency"]["wait"]["mean"],
        "mean queue length": report["queue"]["mean_depth"],
        "p95 sojourn": report["latency"]["sojourn"]["p95"],
    }
    lines = []
    too_far = False
    for name, want in expected.items():
        got = measured[name]
        error = (got - want) / want
        too_far |= abs(error) > TOLERANCE
        lines.append(f"{name}: measured {got:.6g} vs expected {want:.6g} ({error:+.2%})")
    assert not too_far, f"more than {TOLERANCE:.0%} off the reference:\n" + "\n".join(lines)
    assert report["tasks"]["lost"] == 0
    assert report["tasks"]["rejected"] == 0
