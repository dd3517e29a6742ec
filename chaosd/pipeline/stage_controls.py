"""What faults do to the pipeline's stages (hang, take the model down, jitter, corrupt memory, drop MCP, break a
dependency): chaosd.faults.runtime.Runtime's stage operations."""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet

from chaosd.pipeline.resources import McpConnection, MemoryStore
from chaosd.pipeline.stages import StageRunner
from chaosd.pipeline.switches import Switchboard

__all__ = ["StageControls"]


class StageControls:
    """Flips the stages' fault flags (and refreshes their inline-serving path).

    With remote stages (Redis) the pipeline's memory stores and MCP clients are the daemon's copies: a fault
    changes them here and the switch takes it to the worker processes, whose heartbeats bring back the state.
    """

    def __init__(
        self,
        stages: Mapping[str, StageRunner],
        memory: Mapping[str, MemoryStore],
        mcp: Mapping[str, McpConnection],
        switches: Switchboard,
    ) -> None:
        self._stages = stages
        self._memory = memory
        self._mcp = mcp
        self._switches = switches

    def hang(self, name: str, on: bool, timeout: float) -> None:
        stage = self._stages[name]
        stage.hang, stage.hang_timeout = on, timeout
        stage.refresh()
        self._switches.switched("hang")

    def llm_down(self, name: str, on: bool) -> None:
        stage = self._stages[name]
        stage.llm_down = on
        stage.refresh()
        self._switches.switched("llm_down")

    def jitter(self, name: str, seconds: float) -> None:
        stage = self._stages[name]
        stage.jitter = seconds
        stage.refresh()
        self._switches.switched("jitter")

    def corrupt_memory(self, name: str, entries: int) -> list[int]:
        picked = self._memory[name].corrupt(entries)
        self._switches.switched("memory_corrupt", (name,))
        return picked

    def corrupted(self, name: str) -> AbstractSet[int]:
        return self._memory[name].corrupted

    def mcp_drop(self, name: str, outage: float) -> None:
        self._mcp[name].drop(outage)
        self._switches.switched("mcp_disconnect", (name,))

    def mcp_restore(self, name: str) -> None:
        self._mcp[name].server_up = True
        self._switches.switched("mcp_restore", (name,))

    def mcp_connected(self, name: str) -> bool:
        return self._mcp[name].connected

    def dependency_fault(self, stage: str, dependency: str, action: str, fields: Mapping[str, float] | None) -> None:
        self._stages[stage].dependency_fault(dependency, action, fields)
        self._switches.switched("dependency")
