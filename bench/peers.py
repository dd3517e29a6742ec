"""chaosd's virtual engine beside two discrete-event simulators, on the same M/M/4 at ρ 0.9.

The model is the shipped ``saturation`` scenario: Poisson arrivals at 360 tasks/s, 4 servers, exponential
service with a 10 ms mean (400 tasks/s of capacity), no admission control, no faults. It runs three ways in
one process, interleaved, each repeat with the same seed on every side:

- chaosd: ``run_offline`` on the virtual loop, the full pipeline (producers, leader and replicas, leases,
  ledger, workers, telemetry, detector, injector);
- SimPy: the bare model, a ``Resource`` of capacity 4 with exponential arrivals and service, recording each
  customer's wait and sojourn;
- Ciw: one node with 4 servers, every customer recorded.

It prints simulated seconds per wall second for each (the median of the repeats), chaosd's speed as a share of
each peer's, and a sanity line: each one's mean wait after the warm-up, pooled over the repeats, against
Erlang C's, so the three are known to simulate the same queue.

    python bench/peers.py            # 300 simulated s x 5 repeats
    python bench/peers.py --quick    # 60 simulated s x 3 repeats
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from pathlib import Path

import ciw
import simpy

from chaosd.experiment.runner import run_offline
from chaosd.experiment.scenario import load_scenario, settings_for

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "saturation.yaml"
RATE = 360.0  # arrivals per second
SERVERS = 4
MEAN_SERVICE = 0.010  # seconds
WARMUP_SHARE = 0.1  # the first tenth of each run is left out of the waits, as chaosd's report does


@dataclass(frozen=True)
class Run:
    wall: float  # seconds
    waits: float  # sum of the waits of the customers that arrived after the warm-up
    count: int  # those customers


def erlang_c_wait(rate: float, mean_service: float, servers: int) -> float:
    """Mean wait in queue of M/M/c (Erlang C): P(wait) / (c·μ − λ)."""
    a = rate * mean_service
    rho = a / servers
    top = a**servers / math.factorial(servers) / (1.0 - rho)
    p_wait = top / (sum(a**k / math.factorial(k) for k in range(servers)) + top)
    return p_wait / (servers / mean_service - rate)


def run_chaosd(seed: int, duration: float) -> Run:
    settings = settings_for(load_scenario(SCENARIO), SCENARIO, None, {"seed": seed})
    started = time.perf_counter()
    report = run_offline(settings, duration=duration, warmup=duration * WARMUP_SHARE, virtual=True)
    wall = time.perf_counter() - started
    wait = report["latency"]["wait"]
    count = int(wait["count"])
    return Run(wall, float(wait["mean"]) * count, count)


def run_simpy(seed: int, duration: float) -> Run:
    env = simpy.Environment()
    servers = simpy.Resource(env, capacity=SERVERS)
    arrivals = random.Random(f"simpy:{seed}:arrivals")
    service = random.Random(f"simpy:{seed}:service")
    warmup = duration * WARMUP_SHARE
    waits: list[float] = []
    sojourns: list[float] = []
    mu = 1.0 / MEAN_SERVICE

    def customer() -> Generator[simpy.Event, None, None]:
        arrived = env.now
        with servers.request() as request:
            yield request
            if arrived >= warmup:
                waits.append(env.now - arrived)
            yield env.timeout(service.expovariate(mu))
        if arrived >= warmup:
            sojourns.append(env.now - arrived)

    def source() -> Generator[simpy.Event, None, None]:
        while True:
            yield env.timeout(arrivals.expovariate(RATE))
            env.process(customer())

    started = time.perf_counter()
    env.process(source())
    env.run(until=duration)
    wall = time.perf_counter() - started
    return Run(wall, math.fsum(waits), len(waits))


def run_ciw(seed: int, duration: float) -> Run:
    network = ciw.create_network(
        arrival_distributions=[ciw.dists.Exponential(rate=RATE)],
        service_distributions=[ciw.dists.Exponential(rate=1.0 / MEAN_SERVICE)],
        number_of_servers=[SERVERS],
    )
    started = time.perf_counter()
    ciw.seed(seed)
    simulation = ciw.Simulation(network)
    simulation.simulate_until_max_time(duration)
    wall = time.perf_counter() - started
    warmup = duration * WARMUP_SHARE
    waits = [r.waiting_time for r in simulation.get_all_records() if r.arrival_date >= warmup]
    return Run(wall, math.fsum(waits), len(waits))


SIDES: dict[str, Callable[[int, float], Run]] = {"chaosd": run_chaosd, "SimPy": run_simpy, "Ciw": run_ciw}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="60 simulated s x 3 repeats")
    parser.add_argument("--duration", type=float, default=None, help="simulated seconds per run")
    parser.add_argument("--repeats", type=int, default=None, help="runs of each side (median reported)")
    args = parser.parse_args()
    duration = args.duration if args.duration is not None else (60.0 if args.quick else 300.0)
    repeats = max(1, args.repeats if args.repeats is not None else (3 if args.quick else 5))

    for run in SIDES.values():  # imports and first-call paths outside the timed runs
        run(0, 2.0)
    runs: dict[str, list[Run]] = {name: [] for name in SIDES}
    for i in range(repeats):
        order = list(SIDES.items())
        order = order[i % len(order) :] + order[: i % len(order)]  # nobody always goes first
        for name, run in order:
            runs[name].append(run(i + 1, duration))

    speed = {name: statistics.median(duration / r.wall for r in rs) for name, rs in runs.items()}
    expected = erlang_c_wait(RATE, MEAN_SERVICE, SERVERS)
    print(
        f"model: M/M/{SERVERS}, λ {RATE:g}/s, exponential service {MEAN_SERVICE * 1000:g} ms "
        f"(ρ {RATE * MEAN_SERVICE / SERVERS:.2f}); {duration:g} simulated s x {repeats}, interleaved, "
        f"seeds 1..{repeats}"
    )
    for name, rs in runs.items():
        each = ", ".join(f"{duration / r.wall:.0f}" for r in rs)
        print(f"{name:7s} {speed[name]:7.1f} simulated s per wall s (runs: {each})")
    print(f"ratio chaosd/SimPy: {speed['chaosd'] / speed['SimPy']:.2f} (target ≥ 1)")
    print(f"ratio chaosd/Ciw:   {speed['chaosd'] / speed['Ciw']:.2f}")
    sanity = []
    for name, rs in runs.items():
        mean = math.fsum(r.waits for r in rs) / sum(r.count for r in rs)
        sanity.append(f"{name} {mean * 1000:.2f} ms ({mean / expected - 1:+.1%})")
    print(f"mean wait vs Erlang C's {expected * 1000:.2f} ms: {', '.join(sanity)}")


if __name__ == "__main__":
    main()
