"""An orchestrator replica process: competes for the leader lease; the leader reclaims expired task leases.

The lease is a key with an expiry naming the holder and its fencing token (from INCR). Every write the leader
makes — reclaiming, the checkpoint, the dispatch log — is a script that first compares the token, so a leader
that lost the lease while stopped or cut off is refused (and the refusal counted) instead of acting on stale state.
"""

from __future__ import annotations

import os

from redis.asyncio import Redis
from redis.exceptions import RedisError

from chaosd.backends.redis.queue import still_cancelled
from chaosd.backends.redis.scripts import ACQUIRE, CHECKPOINT, RENEW, SWEEP, Keys
from chaosd.config.settings import Settings
from chaosd.core.clock import Clock, unix_time

__all__ = ["LOG_MAXLEN", "Replica"]

LOG_MAXLEN = 10_000  # dispatch log entries kept (approximately)
_SWEEP_COUNT = 1000


class Replica:
    """One orchestrator replica; ``token`` is non-zero while it believes it leads."""

    def __init__(self, settings: Settings, agent_id: str, client: Redis, clock: Clock) -> None:
        self.settings = settings
        self.identity = f"{agent_id}/{os.getpid()}"
        self.keys = Keys.of(settings.backend)
        self._client = client
        self._clock = clock
        self._acquire = client.register_script(ACQUIRE)
        self._renew = client.register_script(RENEW)
        self._sweep = client.register_script(SWEEP)
        self._checkpoint = client.register_script(CHECKPOINT)
        self.token = 0
        self.refused = 0
        self.redispatched = 0
        self._checkpoint_at = 0.0

    async def run(self) -> None:
        interval = self.settings.orchestrator.renew_interval
        while True:
            try:
                await self.beat()
            except (RedisError, OSError):
                # Unreachable, or loading its data after a restart: the lease runs out unless we get back first.
                still_cancelled()
            await self._clock.sleep(interval)

    async def beat(self) -> None:
        """Renew or acquire the lease; as leader, reclaim expired task leases and checkpoint."""
        cfg = self.settings.orchestrator
        keys = self.keys
        ttl_ms = max(1, int(cfg.lease_ttl * 1000))
        if self.token:
            renewed = await self._renew(keys=[keys.lease, keys.stats], args=[self.identity, self.token, ttl_ms])
            if not renewed:
                self.token = 0
                self.refused += 1
        if not self.token:
            self.token = int(await self._acquire(keys=[keys.lease, keys.fence], args=[self.identity, ttl_ms]))
            if self.token:
                self._checkpoint_at = 0.0  # a new leader records where it starts from
        if not self.token:
            return
        n = int(
            await self._sweep(
                keys=[keys.stream, keys.lease, keys.log, keys.stats],
                args=[keys.group, self.identity, self.token, int(cfg.task_lease * 1000), _SWEEP_COUNT, LOG_MAXLEN],
            )
        )
        if n < 0:
            self.token = 0
            self.refused += 1
            return
        self.redispatched += n
        now = self._clock.now()
        if now - self._checkpoint_at >= cfg.checkpoint_interval:
            self._checkpoint_at = now
            await self.write_checkpoint()

    async def write_checkpoint(self) -> bool:
        """The leader's checkpoint: who, with which token, when; refused (False) for a stale token."""
        keys = self.keys
        written = await self._checkpoint(
            keys=[keys.lease, keys.checkpoint, keys.log, keys.stats],
            args=[
                self.identity,
                self.token,
                LOG_MAXLEN,
                "leader",
                self.identity,
                "token",
                self.token,
                "at",
                unix_time(),
            ],
        )
        if int(written) < 0:
            self.token = 0
            self.refused += 1
            return False
        return True
