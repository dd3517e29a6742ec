"""The daemon's controller: one live experiment, and the parts that act on it for the HTTP API.

It composes them (faults and the lever, plan runs, measurement windows, the status board) and owns their shutdown.
"""

from __future__ import annotations

from chaosd.daemon.clients_control import ClientsControl
from chaosd.daemon.fault_control import FaultControl
from chaosd.daemon.gate import Gate
from chaosd.daemon.measure import LiveMeasure
from chaosd.daemon.plan_runs import PlanRun, PlanRunner
from chaosd.daemon.status import StatusBoard
from chaosd.daemon.windows import Windows
from chaosd.experiment.runner import Experiment

__all__ = ["Controller", "PlanRun"]  # PlanRun: where tests and clients have always found it


class Controller:
    """Faults, the lever, survival and scenarios, windows, the callers' policy and status on the daemon's
    experiment; refuses new work once stopping."""

    def __init__(self, experiment: Experiment) -> None:
        self.exp = experiment
        self.gate = Gate()
        self.crashed: list[str] = []  # a crashed pipeline, for /healthz: the daemon needs a restart
        measure = LiveMeasure(experiment)
        self.faults = FaultControl(experiment, self.gate)
        self.plans = PlanRunner(experiment, self.gate, self.faults, measure)
        self.windows = Windows(experiment, measure)
        self.clients = ClientsControl(experiment, self.gate)
        self.board = StatusBoard(experiment, self.plans, self.windows, self.gate)

    @property
    def stopping(self) -> bool:
        return self.gate.closed

    def refuse_new(self) -> None:
        """The first step of shutdown: no new fault from anyone (the injector refuses survival's too)."""
        self.gate.close()
        self.exp.injector.close(Gate.REFUSAL)

    async def shutdown(self) -> int:
        """Refuse new faults, stop the plans, revert every active fault. Returns how many were reverted."""
        self.refuse_new()
        await self.plans.stop_running("daemon shutting down")
        return self.exp.injector.revert_all("shutdown")
