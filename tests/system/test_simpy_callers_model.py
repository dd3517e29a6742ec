"""The SimPy model of callers who time out, retry and leave (tests/simpy_callers.py) against what is known of them:
without a timeout it is M/M/c/K; it keeps the conservation laws; a spike or an outage leaves it in a retry storm above
the fluid threshold capacity / (retries + 1), and not below it, nor with retries off, expired work dropped or a
budget."""

from __future__ import annotations

import functools
import math
from typing import Any

import pytest
from simpy_callers import Result, simulate, verdict

pytestmark = pytest.mark.cpu

SERVERS, MEAN = 4, 0.01
CAPACITY = SERVERS / MEAN  # 400 completions per second
SEEDS = range(5)


def mmck_blocking(c: int, a: float, k: int) -> float:
    """The share of arrivals M/M/c/K turns away: c servers, offered load ``a`` = λ/μ, ``k`` places waiting."""
    terms = [a**n / math.factorial(n) for n in range(c + 1)]
    terms += [terms[c] * (a / c) ** j for j in range(1, k + 1)]
    return terms[-1] / math.fsum(terms)


def test_the_blocking_formula_without_a_waiting_room_is_erlang_b() -> None:
    b = 1.0
    for n in range(1, 5):  # Erlang B's recursion
        b = 3.2 * b / (n + 3.2 * b)
    assert mmck_blocking(4, 3.2, 0) == pytest.approx(b, rel=1e-12)


@pytest.mark.parametrize(("lam", "k"), [(320.0, 0), (320.0, 2), (480.0, 3)])
def test_without_timeout_or_retries_the_refused_share_is_mmck_blocking(lam: float, k: int) -> None:
    refused = attempts = 0
    for seed in SEEDS:
        run = simulate(
            seed=seed, lam=lam, c=SERVERS, mean_service=MEAN, capacity=k, timeout=0, retries=0, duration=60.0
        )
        refused += run.totals["refused"]
        attempts += run.totals["attempts"]
    share = refused / attempts
    assert share == pytest.approx(mmck_blocking(SERVERS, lam * MEAN, k), rel=0.04)
    # one more waiting place would show: the check tells K from K + 1
    assert share != pytest.approx(mmck_blocking(SERVERS, lam * MEAN, k + 1), rel=0.04)


def _laws(run: Result) -> None:
    t = run.totals
    assert t["attempts"] == t["accepted"] + t["refused"]
    assert t["attempts"] == t["callers"] + t["retries"]
    assert t["completed"] == t["goodput"] + t["wasted"]
    assert t["accepted"] == t["completed"] + t["dropped"] + run.in_system
    # a caller succeeds at most once: its goodput is one completion while it waits
    assert t["callers"] == t["goodput"] + t["gave_up"] + run.still_waiting


@pytest.mark.parametrize("drop_expired", [False, True])
def test_the_conservation_laws_hold_through_spike_outage_backoff_and_budget(drop_expired: bool) -> None:
    run = simulate(
        seed=3,
        lam=150.0,
        c=SERVERS,
        mean_service=MEAN,
        capacity=500,
        timeout=0.5,
        retries=2,
        backoff=(0.05, 2.0, 0.5, 0.5),
        budget=0.5,
        drop_expired=drop_expired,
        duration=30.0,
        spike=(700.0, 5.0, 5.0),
        loss=(1, 15.0, 5.0),
    )
    _laws(run)
    t = run.totals
    # every term of the laws is at work in this run
    for name in ("refused", "retries", "goodput", "gave_up", "wasted" if not drop_expired else "dropped"):
        assert t[name] > 0, name
    assert run.still_waiting > 0 and run.in_system > 0


def test_with_retries_off_every_caller_makes_one_attempt() -> None:
    common: dict[str, Any] = dict(
        seed=1, lam=300.0, c=SERVERS, mean_service=MEAN, capacity=50, timeout=0.2, duration=20.0
    )
    single = simulate(**common, retries=0, spike=(600.0, 5.0, 5.0))
    _laws(single)
    assert single.totals["attempts"] == single.totals["callers"]
    assert single.totals["refused"] > 0 and single.totals["abandoned"] > 0
    again = simulate(**common, retries=2, spike=(600.0, 5.0, 5.0))  # the control: the same load, retrying
    assert again.totals["attempts"] > 1.2 * again.totals["callers"]


def test_backoff_delays_retry_n_by_base_times_factor_to_the_n_minus_1_capped() -> None:
    # Every attempt refused (no queue, every server out): callers arriving in [5, 6) retry after 0.5, 1.0 and
    # min(1.5, 2.0) s, so the attempts of second 5 are theirs and half their first retries, and so on.
    run = simulate(
        seed=0,
        lam=0.0,
        c=SERVERS,
        mean_service=MEAN,
        capacity=0,
        timeout=1.0,
        retries=3,
        backoff=(0.5, 2.0, 1.5, 0.0),
        duration=12.0,
        spike=(1000.0, 5.0, 1.0),
        loss=(0, 0.0, 12.0),
    )
    n = run.totals["callers"]
    attempts = run.series["attempts"]
    assert attempts[6] == n  # the second halves of retry 1 and the first of retry 2
    assert attempts[8] == n  # retry 3, 3 s after the first
    assert attempts[5] == pytest.approx(1.5 * n, rel=0.05)
    assert attempts[7] == pytest.approx(0.5 * n, rel=0.1)
    assert run.totals["gave_up"] == n and run.totals["attempts"] == 4 * n


# --- the retry storm -------------------------------------------------------------------------------------------------
# Retries 3 and a 1 s timeout: the fluid threshold is CAPACITY / 4 = 100 callers per second. A queue of 2,000
# places holds 5 s of work (more than the timeout, so a storm can hold) and drains within the run below the threshold.
STORM: dict[str, Any] = dict(c=SERVERS, mean_service=MEAN, capacity=2000, timeout=1.0, retries=3, duration=60.0)
TRIGGERS: dict[str, dict[str, Any]] = {
    "spike": {"spike": (2 * CAPACITY, 5.0, 10.0)},  # twice the capacity for 10 s
    "outage": {"loss": (0, 5.0, 10.0)},  # every server out for 10 s
}
AFTER = 35.0  # 20 s after either trigger ended
HIGH, LOW = 0.5 * CAPACITY, 0.15 * CAPACITY
CONTROLS: dict[str, dict[str, Any]] = {
    "retries off": {"retries": 0},
    "drop expired": {"drop_expired": True},
    "budget 10 %": {"budget": 0.1},
}


@functools.cache
def _storm(lam: float, seed: int, trigger: str = "spike", control: str | None = None) -> Result:
    return simulate(seed=seed, lam=lam, **(STORM | TRIGGERS[trigger] | CONTROLS.get(control or "", {})))


@pytest.mark.parametrize("trigger", TRIGGERS)
@pytest.mark.parametrize("seed", SEEDS)
def test_above_the_threshold_the_storm_outlives_its_trigger(seed: int, trigger: str) -> None:
    run = _storm(HIGH, seed, trigger)
    _laws(run)
    assert verdict(run, after=AFTER, lam=HIGH) == "storm"
    assert run.rate("goodput", AFTER) < 0.02 * HIGH
    assert run.rate("attempts", AFTER) / run.rate("callers", AFTER) == pytest.approx(4.0, rel=0.03)
    assert run.rate("wasted", AFTER) == pytest.approx(CAPACITY, rel=0.05)


@pytest.mark.parametrize("trigger", TRIGGERS)
@pytest.mark.parametrize("seed", SEEDS)
def test_below_the_threshold_it_recovers(seed: int, trigger: str) -> None:
    run = _storm(LOW, seed, trigger)
    assert verdict(run, after=AFTER, lam=LOW) == "recovers"
    assert run.rate("attempts", AFTER) / run.rate("callers", AFTER) < 1.05
    assert run.rate("wasted", AFTER) < 0.02 * CAPACITY


@pytest.mark.parametrize("control", CONTROLS)
@pytest.mark.parametrize("seed", SEEDS)
def test_above_the_threshold_it_recovers_when_the_loop_is_broken(seed: int, control: str) -> None:
    run = _storm(HIGH, seed, control=control)
    _laws(run)
    assert verdict(run, after=AFTER, lam=HIGH) == "recovers"
    assert run.rate("wasted", AFTER) < 0.02 * CAPACITY


def test_a_budget_holds_retries_to_its_share_of_first_attempts() -> None:
    during = (5.0, 15.0)  # the spike: the budget is what limits the retries
    held = _storm(HIGH, 0, control="budget 10 %")
    assert held.rate("retries", *during) / held.rate("callers", *during) == pytest.approx(0.1, abs=0.005)
    free = _storm(HIGH, 0)
    assert free.rate("retries", *during) / free.rate("callers", *during) > 2.0
