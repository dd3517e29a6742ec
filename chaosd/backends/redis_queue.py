"""The ingress queue as a Redis Stream: bounded admission by a script, batched by one flusher per daemon.

Producers keep their arrival process; each offer becomes one ADMIT call, and every offer made while the
previous batch was on the wire goes in the next pipeline, so a busy daemon pays one round trip per batch.
"""

from __future__ import annotations

import asyncio

from redis.asyncio import Redis
from redis.exceptions import RedisError

from chaosd.backends.redis_scripts import ADMIT, Keys
from chaosd.clock import Clock
from chaosd.pipeline.ledger import Ledger
from chaosd.pipeline.producer import Producer
from chaosd.pipeline.queue import IngressQueue
from chaosd.pipeline.task import Task
from chaosd.pipeline.tracing import traceparent

__all__ = ["RedisProducer", "RedisQueue", "still_cancelled"]

_ACCEPTED, _FULL, _UNAVAILABLE = 1, 0, -1


def still_cancelled() -> None:
    """Re-raise a cancellation that redis-py turned into its own error (a socket timeout that fired in the same
    turn as the cancel becomes ``TimeoutError`` on Python 3.11): swallowed, it would leave the owner waiting."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


class RedisQueue(IngressQueue):
    """The stream seen from the daemon: admission, and the depth the monitor last read."""

    def __init__(self, capacity: int, when_full: str, clock: Clock, ledger: Ledger, keys: Keys, poll: float) -> None:
        super().__init__(capacity, when_full, clock)
        self._ledger = ledger
        self._keys = keys
        self._poll = poll
        self._client: Redis | None = None
        self._outbox: list[tuple[list[str], asyncio.Future[int]]] = []
        self._wake = asyncio.Event()
        self._depth = 0
        self._head_age = 0.0
        self.pending = 0  # delivered to a worker, not yet acknowledged
        self.offset = 0.0  # Redis's clock minus ours
        self.run_id = "0"
        self.recent: set[int] = set()  # accepted since the monitor's last look at the stream
        # Offered, and the answer not booked yet: a worker may finish the task and its result be read before the
        # producer resumes with the answer (a busy loop), and that result is not a second outcome.
        self.submitting: set[int] = set()
        self.round_trips = 0
        self.unavailable = 0
        self.closed = False

    def close(self) -> None:
        """End ``flush`` even if a cancellation got lost inside the client library (then it would wait forever)."""
        self.closed = True
        self._wake.set()

    def connect(self, client: Redis, offset: float, run_id: str) -> None:
        self._client = client
        self.offset = offset
        self.run_id = run_id

    # --- what telemetry and the report read -----------------------------------------------------------

    @property
    def depth(self) -> int:
        return self._depth

    def waiting(self) -> list[Task]:
        return []  # the stream answers for its tasks (RedisPipeline.holders)

    def head_age(self, now: float) -> float:
        return self._head_age

    def area_now(self) -> float:
        return self.area + self._depth * (self._clock.now() - self._t)

    def reset_peaks(self) -> None:
        self.max_depth = self._depth
        self.max_blocked = len(self.blocked)

    def reset_area(self) -> None:
        self.area = 0.0
        self._t = self._clock.now()

    def observe(self, depth: int, pending: int, head_age: float) -> None:
        """The monitor's reading of the stream: tasks waiting (not delivered) and delivered but unacknowledged."""
        now = self._clock.now()
        self.area += self._depth * (now - self._t)
        self._t = now
        self._depth = max(0, depth)
        self.pending = pending
        self._head_age = head_age
        self.max_depth = max(self.max_depth, self._depth)

    # --- admission -------------------------------------------------------------------------------------

    def throttles(self) -> bool:
        return self.limit < self.capacity and self._depth < self.capacity

    def offer(self, task: Task, now: float) -> bool:
        raise RuntimeError("the Redis queue admits through put(); producers are RedisProducer")

    def requeue(self, task: Task) -> None:
        raise RuntimeError("re-delivery is the leader's (XAUTOCLAIM), not the daemon's")

    async def put(self, task: Task) -> None:
        """Offer the task to the stream; accept or refuse it in the ledger by the script's answer."""
        now = self._clock.now()
        stamp = repr(now + self.offset)
        fields = ["i", str(task.id), "r", self.run_id, "o", repr(task.offered_at + self.offset), "a", stamp]
        fields += ["m", "1" if task.measured else "0", "n", "0"]
        header = traceparent(task.trace) if task.trace is not None else None
        if header is not None:
            fields += ["t", header]  # a sampled task: the worker process continues its trace
        self.submitting.add(task.id)
        try:
            await self._offer(task, fields, now)
        finally:
            self.submitting.discard(task.id)

    async def _offer(self, task: Task, fields: list[str], now: float) -> None:
        """Submit until answered: accepted or refused in the ledger, or waiting for room (``block``)."""
        counted = False
        ledger = self._ledger
        while True:
            status = await self._submit(fields)
            if not counted:
                ledger.offer(task)  # offered once it has an answer: a run cut short mid-call leaves no orphan
                counted = True
            if status == _ACCEPTED:
                task.accepted_at = now
                ledger.accept(task)
                self.recent.add(task.id)
                return
            if status == _UNAVAILABLE:
                self.unavailable += 1
                ledger.refuse(task, "unavailable")
                return
            if self.throttles():
                ledger.refuse(task, "shed")  # over admission control's limit, whatever when_full says
                return
            if self.when_full != "block":
                ledger.refuse(task, "dropped" if self.when_full == "drop" else "queue_full")
                return
            self.blocked.append(task)
            self.max_blocked = max(self.max_blocked, len(self.blocked))
            try:
                await self._clock.sleep(self._poll)
            finally:
                self.blocked.remove(task)
            now = self._clock.now()

    async def _submit(self, fields: list[str]) -> int:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._outbox.append((fields, future))
        self._wake.set()
        return await future

    async def flush(self) -> None:
        """Send what producers offered, one pipeline per batch; runs for the life of the runtime."""
        keys = self._keys
        while not self.closed:
            await self._wake.wait()
            self._wake.clear()
            batch, self._outbox = self._outbox, []
            if not batch:
                continue
            client = self._client
            replies: list[object]
            if client is None:
                replies = [None] * len(batch)
            else:
                admit = client.register_script(ADMIT)
                pipe = client.pipeline(transaction=False)
                try:
                    bound = min(self.capacity, self.limit)
                    for fields, _ in batch:
                        await admit(keys=[keys.stream], args=[keys.group, bound, *fields], client=pipe)
                    replies = await pipe.execute(raise_on_error=False)
                except (RedisError, OSError):
                    still_cancelled()
                    replies = [None] * len(batch)
                finally:
                    await pipe.reset()  # type: ignore[no-untyped-call]  # a pipeline cancelled before it ran, too
                self.round_trips += 1
            for (_, future), reply in zip(batch, replies, strict=True):
                if future.done():
                    continue
                if isinstance(reply, str):
                    future.set_result(_ACCEPTED)
                elif reply == 0:
                    future.set_result(_FULL)
                else:
                    future.set_result(_UNAVAILABLE)


class RedisProducer(Producer):
    """A producer whose every offer goes through ``RedisQueue.put`` (an await: the answer comes from Redis)."""

    def _emit(self, t: float) -> Task | None:
        task = Task(next(self._ids), t, t >= self._measure_from)
        tracer = self.tracer
        if tracer is not None and task.id % tracer.every == 0:
            task.trace = tracer.produced(task, self.agent.id, t)
        ledger = self._ledger
        if self.agent.partitioned:
            ledger.offer(task)
            ledger.refuse(task, "partitioned")
            return None
        factor = self._admission.factor
        if factor < 1.0 and self._throttled(factor):
            ledger.offer(task)
            ledger.refuse(task, "throttled")
            return None
        return task  # run() awaits queue.put(task), which offers it and accepts or refuses it

    def restart_clock(self, shift: float) -> None:
        """The runtime's time origin moved ``shift`` seconds later (its processes took that long to start)."""
        self._t0 += shift
        self._measure_from += shift
