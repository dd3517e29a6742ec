"""The hot paths' written-out random draws and sleeps behave as the library calls they stand for."""

from __future__ import annotations

import asyncio
import math
import random

import pytest

from chaosd.config.settings import ServiceConfig
from chaosd.core._asyncio_internals import Alarm
from chaosd.core.clock import LoopClock, VirtualEventLoop
from chaosd.pipeline.stages import make_sampler


@pytest.mark.parametrize("seed", [1, 7, 42])
def test_an_exponential_stage_draws_what_expovariate_draws_bit_for_bit(seed: int) -> None:
    sampler = make_sampler(ServiceConfig(distribution="exponential", mean=0.01), random.Random(seed))
    reference = random.Random(seed)
    draws = [sampler() for _ in range(10_000)]
    expected = [reference.expovariate(1.0 / 0.01) for _ in range(10_000)]
    assert draws == expected
    assert math.fsum(draws) / len(draws) == pytest.approx(0.01, rel=0.05)
    # The negative control: the tempting rewrite (times the mean, not divided by the rate) rounds differently, and
    # this comparison sees it.
    control = random.Random(seed)
    rewritten = [-math.log(1.0 - control.random()) * 0.01 for _ in range(10_000)]
    assert sum(a != b for a, b in zip(rewritten, expected, strict=True)) > 100


def test_an_alarm_sleeps_once_then_returns_at_once_and_a_cancel_wakes_it_where_it_waited() -> None:
    loop = VirtualEventLoop()
    clock = LoopClock(loop)

    async def main() -> tuple[float, float, float, float]:
        alarm = clock.sleep(2.0)
        assert isinstance(alarm, Alarm)
        await alarm
        slept = loop.time()
        await alarm  # over already: no second wait
        again = loop.time()

        async def sleeper() -> None:
            await clock.sleep(100.0)

        task = asyncio.ensure_future(sleeper())
        await clock.sleep(1.0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        cancelled_at = loop.time()
        await clock.sleep(0.5)
        return slept, again, cancelled_at, loop.time()

    try:
        slept, again, cancelled_at, after = loop.run_until_complete(main())
    finally:
        loop.close()
    assert (slept, again) == (2.0, 2.0)
    # The cancelled 100 s sleep ended when cancelled (3 s), and its timer no longer holds the clock back.
    assert (cancelled_at, after) == (3.0, 3.5)
