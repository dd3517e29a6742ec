"""The peer of ``redis_throughput.py``: a zero-work Dramatiq actor on the Redis broker (``CHAOSD_PEER_URL``).

Each message's one effect is an INCR of ``peer:done``, so the bench counts the tasks done as it counts chaosd's
results. Run by ``dramatiq _dramatiq_peer --processes 4`` from this folder.
"""

from __future__ import annotations

import os

import dramatiq
import redis
from dramatiq.brokers.redis import RedisBroker

URL = os.environ.get("CHAOSD_PEER_URL", "redis://127.0.0.1:6379/0")
DONE = "peer:done"

broker = RedisBroker(url=URL)
dramatiq.set_broker(broker)
_effects = redis.Redis.from_url(URL)


@dramatiq.actor(max_retries=0)
def zero(i: int) -> None:
    _effects.incr(DONE)
