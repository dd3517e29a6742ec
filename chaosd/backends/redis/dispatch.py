"""Leadership on Redis as the daemon reads it: who holds the lease, its fencing token, the leader's counters.

The replicas lead and dispatch in their own processes (``redis_leader``); the daemon only observes.
"""

from __future__ import annotations

from chaosd.backends.redis.replies import LeaderStats, Lease
from chaosd.pipeline.agents import Agent

__all__ = ["RedisDispatch"]


class RedisDispatch:
    """The lease as the monitor last read it (``chaosd.pipeline.parts.Leadership``)."""

    def __init__(self, replicas: list[Agent]) -> None:
        self.replicas = replicas
        self.holder: str | None = None  # agent id in the lease key
        self.identity: str | None = None  # agent id / pid
        self.token = 0
        self.highest_token = 0  # the fencing counter is at least this (what a Redis that came back empty needs)
        self._first_token: int | None = None
        self.elections = 0
        self.redispatched = 0
        self.lease_expired = 0
        self.refused_writes = 0
        self._alive: dict[str, Agent] = {r.id: r for r in replicas}

    @property
    def leader_id(self) -> str | None:
        holder = self.holder
        if holder is None:
            return None
        agent = self._alive.get(holder)
        return holder if agent is None or agent.alive else None

    @property
    def log_size(self) -> int:
        """The dispatch log is in Redis (the leader's process writes it): the daemon holds none of it."""
        return 0

    def observe(self, lease: Lease | None, stats: LeaderStats) -> None:
        if lease is not None:
            self.identity = lease.identity
            self.holder = lease.holder
            self.token = lease.token
            self.highest_token = max(self.highest_token, self.token)
            if self._first_token is None:
                self._first_token = self.token
            # Every token after the first one the daemon saw is an election.
            self.elections = max(self.elections, self.token - self._first_token)
        else:
            self.holder = self.identity = None
        self.lease_expired = stats.lease_expired
        self.redispatched = stats.redispatched
        self.refused_writes = stats.refused_writes
