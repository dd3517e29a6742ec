"""The fault switches as the worker processes read them: a control hash per worker and one stage document.

The flags are the pipeline's (status, metrics and the catalogue read them); each change reaches the processes
at once: the pipeline's switch wakes the monitor, which writes what changed. Its periodic pass writes the same
documents again if a write was lost (the safety net).

A memory stage's corruption and an MCP stage's drop are orders, not flags: each has a token of its own, so a
process carries it out once however often it reads the document (and a process started after it, whose memory
and connection are fresh, not at all). The heartbeats say which order each process has seen and what its store
or connection is now; the daemon's copies (what the catalogue judges) follow them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from collections.abc import Collection, Iterable

from chaosd.backends.redis.replies import Heartbeat
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
        # Memory stage -> the last corruption order: its token and every entry the daemon holds corrupted then
        # (those of earlier orders too: a process that missed one still gets its entries).
        self.corruptions: dict[str, tuple[str, tuple[int, ...]]] = {}
        self.drops: dict[str, str] = {}  # MCP stage -> the token of its last drop

    def switched(self, switch: str, ids: Collection[str]) -> None:
        if switch == "memory_corrupt":
            for name in ids:
                self.corruptions[name] = (secrets.token_hex(4), tuple(sorted(self._p.memory[name].corrupted)))
        elif switch == "mcp_disconnect":
            for name in ids:
                self.drops[name] = secrets.token_hex(4)
        self.wake.set()

    def observe(self, beats: Iterable[Heartbeat]) -> None:
        """The daemon's memory stores and MCP connections as the beating processes report theirs: an entry stays
        corrupted, a connection down, until every one of them has seen the order and none still has it so."""
        beats = [b for b in beats if b.beating]
        if not beats:
            return  # nobody to ask: what the daemon holds stands
        p = self._p
        for name, (token, _) in self.corruptions.items():
            store = p.memory[name]
            if not store.corrupted or any(b.memory.get(name, ("", ()))[0] != token for b in beats):
                continue
            held = {i for b in beats for i in b.memory[name][1]}
            for i in sorted(store.corrupted - held):
                store.restore(i)  # restored from the checkpoint in every process
        for name, token in self.drops.items():
            conn = p.mcp[name]
            seen = [b.mcp.get(name) for b in beats]
            connected = all(s is not None and s[0] == token and s[1] for s in seen)
            if connected and not conn.connected:
                conn.reconnected_at = p.elapsed()
                p.events.record(conn.reconnected_at, "mcp", stage=name, state="reconnected")
            conn.connected = connected

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
            # Likewise the orders: only once one was given.
            if name in self.corruptions:
                token, entries = self.corruptions[name]
                flags["corrupt"] = [token, list(entries)]
            if name in self.drops:
                conn = p.mcp[name]
                flags["mcp_drop"] = [self.drops[name], conn.outage, conn.server_up]
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
