"""The pipeline's behaviour a user relies on: accounting, refusals, arrivals, stages, determinism."""

from __future__ import annotations

import asyncio
import random
import statistics
from pathlib import Path

import pytest
from conftest import mmc, run, settings

from chaosd.config.settings import BackoffConfig, Phase, ServiceConfig, load_settings
from chaosd.core.clock import LoopClock, VirtualEventLoop
from chaosd.core.histogram import LogHistogram, percentiles
from chaosd.experiment.runner import Experiment, run_offline
from chaosd.pipeline import Pipeline
from chaosd.pipeline.backoff import backoff_delay
from chaosd.pipeline.dag import Dag
from chaosd.pipeline.dispatch import Dispatcher
from chaosd.pipeline.in_memory import InProcess, worker_for
from chaosd.pipeline.load import LoadShape
from chaosd.pipeline.parts import Assembly, Core, Parts, orchestrators, producers
from chaosd.pipeline.producer import Producer
from chaosd.pipeline.queue import IngressQueue
from chaosd.pipeline.stages import make_sampler
from chaosd.pipeline.task import Task
from chaosd.pipeline.worker import BusyMeter


def _accounted(report: dict) -> None:
    t = report["tasks"]
    assert t["offered"] == t["accepted"] + t["rejected"]
    assert t["accepted"] == t["completed"] + t["failed"] + t["in_flight"] + t["lost"]
    assert t["lost"] == 0 and t["duplicated"] == 0 and t["lost_all_cohorts"] == 0


@pytest.mark.parametrize(
    ("policy", "reason"),
    [("reject", "queue_full"), ("drop", "dropped")],
)
def test_full_queue_refusals_are_counted_with_their_reason(policy: str, reason: str) -> None:
    overlay = mmc(200.0, 1, queue={"capacity": 20, "when_full": policy})
    report = run(overlay, duration=30.0, warmup=3.0)
    t = report["tasks"]
    assert t["rejected"] > 1000  # ρ = 2: about half the offers are refused
    assert t["rejected_by"] == {reason: t["rejected"]}
    assert report["queue"]["max_depth"] == 20
    _accounted(report)


def test_block_policy_refuses_nothing_and_delays_producers() -> None:
    overlay = mmc(200.0, 1, queue={"capacity": 20, "when_full": "block"})
    report = run(overlay, duration=30.0, warmup=3.0)
    t = report["tasks"]
    assert t["rejected"] == 0
    # Producers wait for room, so only about what the worker serves (100/s) is offered.
    assert t["offered"] == pytest.approx(100 * 27, rel=0.1)
    _accounted(report)


def test_every_accepted_task_is_accounted_exactly_once_under_failures() -> None:
    overlay = mmc(
        90.0,
        1,
        stages=[
            {
                "name": "flaky",
                "kind": "tool",
                "service": {"distribution": "exponential", "mean": 0.005},
                "timeout": 0.02,
                "retries": 2,
                "failure_probability": 0.2,
            },
            {"name": "llm", "kind": "llm", "service": {"distribution": "lognormal", "mean": 0.003}},
        ],
    )
    report = run(overlay, duration=60.0, warmup=6.0)
    t = report["tasks"]
    assert t["failed"] > 0 and t["completed"] > 0
    assert set(t["failed_by"]) <= {"timeout", "error"}
    # P(all 3 attempts fail) ≈ (0.2 + 0.8·P(service > 20 ms))³ ≈ 0.25³
    assert t["failed"] / (t["failed"] + t["completed"]) == pytest.approx(0.25**3, rel=0.5)
    assert t["retries"] > 0
    _accounted(report)


@pytest.mark.parametrize("arrival", ["poisson", "constant", "bursty"])
def test_arrival_processes_offer_the_configured_rate(arrival: str) -> None:
    overlay = mmc(150.0, 4, load={"arrival": arrival, "rate": 150.0, "producers": 3, "burst_size": 5.0})
    report = run(overlay, duration=200.0, warmup=20.0)
    assert report["tasks"]["offered"] / 180.0 == pytest.approx(150.0, rel=0.03)


def test_bursty_arrivals_queue_more_than_poisson() -> None:
    base = run(mmc(200.0, 4), duration=200.0, warmup=20.0)
    bursty = run(mmc(200.0, 4, load={"arrival": "bursty", "burst_size": 10.0}), duration=200.0, warmup=20.0)
    assert bursty["queue"]["mean_depth"] > 3 * base["queue"]["mean_depth"]


def test_load_shape_steps_ramps_and_spikes() -> None:
    shape = LoadShape(
        100.0,
        [
            Phase(type="step", at=10, rate=200),
            Phase(type="ramp", at=20, rate=400, duration=10),
            Phase(type="spike", at=40, rate=1000, duration=5),
        ],
    )
    assert shape.rate_at(5) == 100
    assert shape.rate_at(15) == 200
    assert shape.rate_at(25) == pytest.approx(300)
    assert shape.rate_at(35) == 400
    assert shape.rate_at(42) == 1000
    assert shape.rate_at(46) == 400  # a spike returns to the rate before it
    assert shape.peak() == 1000
    assert shape.next_change(41) == 45


def test_load_phases_drive_the_offered_rate() -> None:
    overlay = mmc(50.0, 4, run={"timeline": 1.0})
    overlay["load"]["phases"] = [{"type": "step", "at": 20, "rate": 250}]
    report = run(overlay, duration=40.0)
    early = [p["offered_per_s"] for p in report["timeline"] if 5 <= p["t"] <= 19]
    late = [p["offered_per_s"] for p in report["timeline"] if 25 <= p["t"] <= 39]
    assert statistics.mean(early) == pytest.approx(50, rel=0.15)
    assert statistics.mean(late) == pytest.approx(250, rel=0.1)


@pytest.mark.parametrize(
    ("service", "mean", "sd"),
    [
        (ServiceConfig(distribution="exponential", mean=0.01), 0.01, 0.01),
        (ServiceConfig(distribution="constant", mean=0.01), 0.01, 0.0),
        (
            ServiceConfig(distribution="lognormal", mean=0.01, sigma=0.5),
            0.01,
            0.01 * (2.718281828**0.25 - 1) ** 0.5,
        ),
        (ServiceConfig(distribution="uniform", low=0.0, high=0.02), 0.01, 0.02 / 12**0.5),
    ],
)
def test_service_distributions_have_their_moments(service: ServiceConfig, mean: float, sd: float) -> None:
    draw = make_sampler(service, random.Random(7))
    xs = [draw() for _ in range(40_000)]
    assert statistics.fmean(xs) == pytest.approx(mean, rel=0.02)
    assert statistics.pstdev(xs) == pytest.approx(sd, rel=0.03, abs=1e-12)


def test_backoff_grows_exponentially_up_to_its_cap() -> None:
    cfg = BackoffConfig(base=0.01, factor=2.0, max=0.05)
    rng = random.Random(1)
    assert [backoff_delay(cfg, n, rng) for n in (1, 2, 3, 4)] == pytest.approx([0.01, 0.02, 0.04, 0.05])
    jittered = BackoffConfig(base=0.1, factor=1.0, max=1.0, jitter=0.5)
    delays = [backoff_delay(jittered, 1, rng) for _ in range(1000)]
    assert min(delays) >= 0.05 and max(delays) <= 0.1 and len(set(delays)) > 900


def test_pressure_failures_rise_with_saturation() -> None:
    overlay = mmc(
        300.0,
        1,
        queue={"capacity": 200, "when_full": "reject"},
        stages=[
            {
                "name": "dep",
                "service": {"distribution": "exponential", "mean": 0.01},
                "pressure": {"enabled": True, "threshold": 0.5, "max_probability": 0.9},
            }
        ],
    )
    overloaded = run(overlay, duration=30.0, warmup=5.0)
    overlay["load"]["rate"] = 30.0
    calm = run(overlay, duration=30.0, warmup=5.0)
    assert calm["tasks"]["failed"] == 0
    t = overloaded["tasks"]
    assert t["failed_by"].get("error", 0) / (t["completed"] + t["failed"]) > 0.5


def test_a_waiting_task_handed_to_a_cancelled_worker_goes_back_to_the_queue() -> None:
    loop = VirtualEventLoop()
    try:
        clock = LoopClock(loop)

        async def scenario() -> list[int]:
            queue = IngressQueue(10, "reject", clock)
            getter = asyncio.create_task(queue.get())
            await asyncio.sleep(0)  # the worker now waits
            assert queue.offer(Task(1, 0.0, True), clock.now())  # handed straight to the waiting worker
            getter.cancel()  # …which is cancelled before it runs
            with pytest.raises(asyncio.CancelledError):
                await getter
            return [t.id for t in queue.waiting()]

        assert loop.run_until_complete(scenario()) == [1]
    finally:
        loop.close()


def test_same_seed_same_report_other_seed_different() -> None:
    overlay = mmc(300.0, 4, load={"arrival": "bursty", "rate": 300.0})
    a = run(overlay, duration=30.0, warmup=3.0)
    b = run(overlay, duration=30.0, warmup=3.0)
    c = run({**overlay, "seed": 2}, duration=30.0, warmup=3.0)
    assert a == b
    assert a != c


def test_the_documented_mmc_example_is_a_single_stage_chain(tmp_path: Path) -> None:
    example = tmp_path / "mm1.toml"
    example.write_text(
        'seed = 1\n[load]\narrival = "poisson"\nrate = 80.0\nproducers = 4\n[queue]\ncapacity = 10000\n'
        'when_full = "reject"\n[workers]\ncount = 1\n[[stages]]\nname = "work"\nkind = "compute"\n'
        'service = { distribution = "exponential", mean = 0.01 }\n[detector]\nenabled = true\n'
        "[throttle]\nenabled = false\n"
    )
    report = run_offline(load_settings(example), duration=200.0, warmup=20.0)
    assert report["load"]["offered_rho"] == pytest.approx(0.8)
    assert report["utilisation"] == pytest.approx(0.8, abs=0.03)


def test_the_default_dag_routes_around_its_tool() -> None:
    dag = Dag(settings({}).stages)
    assert dag.route() == ("plan", "search", "recall", "context", "answer")
    dag.removed_nodes.add("search")
    assert dag.route() == ("plan", "search_backup", "recall", "context", "answer")
    dag.removed_edges.add(("plan", "search_backup"))
    assert dag.route() is None


def test_a_task_handed_to_a_worker_that_has_not_resumed_is_not_counted_lost() -> None:
    loop = VirtualEventLoop()
    try:
        clock = LoopClock(loop)

        async def scenario() -> tuple[list[int], list[int]]:
            queue = IngressQueue(10, "reject", clock)
            getter = asyncio.create_task(queue.get())
            await asyncio.sleep(0)
            queue.offer(Task(5, 0.0, True), clock.now())
            in_hand = [t.id for t in queue.waiting()]  # the run could end right here
            await getter
            return in_hand, [t.id for t in queue.waiting()]

        assert loop.run_until_complete(scenario()) == ([5], [])
    finally:
        loop.close()


def test_producers_stages_and_workers_run_on_the_queue_their_backend_supplies() -> None:
    # The settings ask for a queue of 1000; the backend hands over one of 2 (and otherwise the in-memory parts).
    def tiny_queue(core: Core) -> Parts[Assembly]:
        queue = IngressQueue(2, "reject", core.clock)
        busy = BusyMeter(core.t0)
        replicas = orchestrators(core.settings)
        dispatcher = Dispatcher(core.settings.orchestrator, replicas, queue, core.clock, core.events, core.t0)
        return Parts(
            queue=queue,
            busy=busy,
            dispatcher=dispatcher,
            producers=producers(Producer, core, queue),
            worker=lambda agent, routing: worker_for(core, agent, routing, queue, dispatcher, busy),
            host=lambda p: InProcess(p, dispatcher),
        )

    loop = VirtualEventLoop()
    try:
        clock = LoopClock(loop)
        pipeline = Pipeline(settings(mmc(200.0, 1, queue={"capacity": 1000})), clock, backend=tiny_queue)

        async def scenario() -> None:
            async with pipeline.running():
                await clock.sleep(10.0)

        loop.run_until_complete(scenario())
    finally:
        loop.close()
    assert pipeline.queue.capacity == 2
    assert pipeline.ledger.total.rejected_by.get("queue_full", 0) > 500  # rho = 2 on a queue of 2
    assert pipeline.ledger.total.completed > 500  # the worker serves from that same queue


def test_a_crashing_worker_stops_the_run_with_its_error() -> None:
    loop = VirtualEventLoop()
    try:
        clock = LoopClock(loop)

        async def scenario() -> None:
            experiment = Experiment(settings(mmc(50.0, 2)), clock, warmup=0.0)

            def broken(*_: object) -> bool:
                raise RuntimeError("worker bug")

            worker = experiment.pipeline.workers[0]
            # Its first task's end, whichever way it served it: walked, or its lone stage served without the walk.
            worker._settle = broken  # type: ignore[method-assign]
            worker._finished = broken  # type: ignore[method-assign]
            await experiment.run(3600.0)

        with pytest.raises(ExceptionGroup) as info:
            loop.run_until_complete(scenario())
        assert info.group_contains(RuntimeError, match="worker bug")
        assert loop.time() < 2.0  # it did not run on for the hour with a dead worker
    finally:
        loop.close()


def test_a_histogram_snapshot_is_shared_read_only_until_a_sample_arrives() -> None:
    # The telemetry tick takes a snapshot of each histogram: while no sample arrives it gets the same read-only
    # array (no copy) and reports the window's percentiles as 0 without computing them.
    h = LogHistogram()
    empty = h.snapshot()
    assert h.snapshot() is empty and not empty.flags.writeable
    with pytest.raises(ValueError):
        empty[0] = 1
    assert percentiles(empty - empty, (0.5, 0.95, 0.99)) == (0.0, 0.0, 0.0)
    h.add(0.01)
    h.add(0.02)
    one = h.snapshot()
    assert one is not empty and int(empty.sum()) == 0 and int((one - empty).sum()) == 2
    assert h.snapshot() is one
    assert percentiles(one - empty, (0.99,))[0] == pytest.approx(0.02, rel=0.05)
