"""One time base for every process on every host: Redis's own clock, estimated once per connection."""

from __future__ import annotations

from redis.asyncio import Redis

from chaosd.core.clock import Clock, unix_time

__all__ = ["server_offset"]


async def server_offset(client: Redis, clock: Clock, samples: int = 5) -> float:
    """Seconds to add to ``clock.now()`` to read Redis's clock: the sample with the shortest round trip wins.

    Timestamps carried with each task (offered, accepted, started, ended) are on this clock, so wait and
    sojourn measured across hosts do not depend on their clocks agreeing.
    """
    best: tuple[float, float] | None = None
    for _ in range(samples):
        sent = clock.now()
        seconds, micros = await client.time()
        back = clock.now()
        rtt = back - sent
        offset = seconds + micros / 1e6 - (sent + back) / 2
        if best is None or rtt < best[0]:
            best = (rtt, offset)
    return best[1] if best is not None else unix_time() - clock.now()
