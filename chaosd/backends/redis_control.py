"""The fault switches as the worker processes read them: a control hash per worker and one stage document.

The flags are the pipeline's (status, metrics and the catalogue read them); each change reaches the processes
at once: the pipeline's switch wakes the monitor, which writes what changed. Its periodic pass writes the same
documents again if a write was lost (the safety net).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Collection

from chaosd.pipeline import Pipeline

__all__ = ["DEFAULT_CONTROL", "Controls", "flat"]

DEFAULT_CONTROL = {"slow": "1.0", "drop": "0.0", "paused": "0", "partitioned": "0", "exit": ""}


def flat(doc: dict[str, str]) -> list[str]:
    """A hash as HSET's items."""
    return [x for kv in doc.items() for x in kv]


class Controls:
    """What each process should read now, what was last written, and the wake-up a switch gives the monitor."""

    def __init__(self, pipeline: Pipeline, local: Collection[str]) -> None:
        self._p = pipeline
        self._local = local  # agents whose process this daemon runs: SIGSTOP pauses them, not the hash
        self.written: dict[str, dict[str, str]] = {}
        self.stages_written = ""
        self.killed: dict[str, str] = {}  # remote worker -> the instance asked to exit (dead until another beats)
        self.wake = asyncio.Event()  # a fault changed something the processes must hear of now

    def switched(self, switch: str, ids: Collection[str]) -> None:
        self.wake.set()

    def forget(self) -> None:
        """Nothing is known to be written (the next pass writes every document)."""
        self.written, self.stages_written = {}, ""

    def control_docs(self) -> dict[str, dict[str, str]]:
        docs = {}
        for w in self._p.workers:
            a = w.agent
            paused = a.exhausted or (a.paused and a.id not in self._local)  # local ones get SIGSTOP instead
            docs[a.id] = {
                "slow": repr(a.slow),
                "drop": repr(w.drop_probability),
                "paused": "1" if paused else "0",
                "partitioned": "1" if a.partitioned else "0",
                "exit": self.killed.get(a.id, ""),  # the process (instance) kill_agent asked to exit
            }
        return docs

    def stages_doc(self) -> str:
        p = self._p
        stages: dict[str, dict[str, object]] = {}
        for name, s in p.stages.items():
            flags: dict[str, object] = {
                "removed": s.removed,
                "hang": s.hang,
                "hang_timeout": s.hang_timeout,
                "llm_down": s.llm_down,
                "jitter": s.jitter,
            }
            # Only the dependencies some fault acts on: with none, the document is what it was before they existed.
            faulted = {dep: f.as_json() for dep, f in s.dependency_faults.items() if f.as_json()}
            if faulted:
                flags["dependencies"] = faulted
            stages[name] = flags
        edges = sorted([a, b] for a, b in p.dag.removed_edges)
        return json.dumps({"stages": stages, "removed_edges": edges}, sort_keys=True)

    async def nap(self, seconds: float) -> None:
        """Until the next poll is due, or sooner when a fault has something for the processes to hear."""
        wake = self.wake
        if not wake.is_set():
            # The loop's own deadline (the clock reads the same loop): a fault's set() ends the nap early.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(seconds):
                    await wake.wait()
        wake.clear()
