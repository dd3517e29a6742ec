"""The ingress queue as a Redis Stream: bounded admission by a script, batched by one flusher per daemon.

Producers keep their arrival process and do not wait for Redis's answers: every offer made while the previous
batch was on the wire goes in the next pipeline, one ADMIT call per chunk of offers, so a busy daemon pays one
round trip and one script call for hundreds of tasks. The answers are booked in the ledger as they come back.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from redis.asyncio import Redis
from redis.exceptions import RedisError

from chaosd.backends.redis.scripts import ADMIT, Keys, Sha
from chaosd.core.clock import Clock
from chaosd.pipeline.callers import Callers
from chaosd.pipeline.ledger import Ledger
from chaosd.pipeline.producer import Producer
from chaosd.pipeline.queue import IngressQueue
from chaosd.pipeline.task import Task
from chaosd.pipeline.tracing import traceparent
from chaosd.views import RefuseReason

__all__ = ["RedisProducer", "RedisQueue", "still_cancelled"]

_ACCEPTED, _FULL, _UNAVAILABLE = 1, 0, -1
# Offers sent and not answered yet (or waiting for room) that the daemon holds: past it producers wait, so a
# Redis slower than the arrivals costs a bounded backlog here, not memory per task.
_WINDOW = 4096
_CHUNK = 500  # offers per admission script call: Redis serves others between two calls
_ADMIT = Sha(ADMIT)


@dataclass(slots=True, eq=False)
class _Offer:
    """One task offered to the stream, waiting for Redis's answer."""

    task: Task
    fields: str  # the stream entry's fields and values, as the admission script takes them
    at: float  # when it was (last) submitted: its acceptance time if Redis takes it
    counted: bool = False  # in the ledger's offers (or retries) already: a ``block`` offer submitted again
    retry: bool = False  # a caller's retry: booked as a retry, and never waits for room


def still_cancelled() -> None:
    """Re-raise a cancellation that redis-py turned into its own error (a socket timeout that fired in the same
    turn as the cancel becomes ``TimeoutError`` on Python 3.11): swallowed, it would leave the owner waiting."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


class RedisQueue(IngressQueue):
    """The stream seen from the daemon: admission, and the depth the monitor last read."""

    def __init__(
        self,
        capacity: int,
        when_full: str,
        clock: Clock,
        ledger: Ledger,
        keys: Keys,
        poll: float,
        callers: Callers | None = None,
    ) -> None:
        super().__init__(capacity, when_full, clock)
        self._ledger = ledger
        self._callers = callers
        self._keys = keys
        self._poll = poll
        self._client: Redis | None = None
        self._outbox: list[_Offer] = []
        self._retry: list[_Offer] = []  # refused for want of room (``block``): submitted again after a poll
        self._wake = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
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
        self._room.set()

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
        """Offer the task to the stream without waiting for the answer: the flusher books it (accepted or refused
        in the ledger) when Redis answers. A producer waits here only while the window of offers not yet answered
        is full or, with ``block``, while an offer waits for room."""
        while len(self.submitting) >= _WINDOW or self.blocked:
            self._room.clear()
            await self._room.wait()
            if self.closed:
                return
        self.submit(task)

    def submit(self, task: Task, *, retry: bool = False) -> None:
        """Put the offer of ``task`` in the next batch, now (a caller's retry cannot wait for the window: its
        caller's clock is already running)."""
        now = self._clock.now()
        offset = self.offset
        stamp = repr(now + offset)
        measured = "1" if task.measured else "0"
        fields = f"i {task.id} r {self.run_id} o {task.offered_at + offset!r} a {stamp} m {measured} n 0"
        callers = self._callers
        if task.caller is not None and callers is not None and callers.drop_expired and callers.timeout > 0:
            # Deadline propagation: when its caller stops waiting, on Redis's clock, for the worker to compare.
            fields += f" x {task.offered_at + callers.timeout + offset!r}"
        patience = self.patience  # the pipeline's draw, as the in-memory queue makes it per waiting attempt
        if patience is not None and task.caller is not None:
            # When its caller hangs up if still queued, on Redis's clock: the worker that takes the entry later
            # skips it (abandoned), and only then does the daemon book the hang-up (Books.book).
            fields += f" p {task.offered_at + patience() + offset!r}"
        header = traceparent(task.trace) if task.trace is not None else None
        if header is not None:
            fields += f" t {header}"  # a sampled task: the worker process continues its trace
        self.submitting.add(task.id)
        self._outbox.append(_Offer(task, fields, now, retry=retry))
        self._wake.set()

    def _answer(self, offer: _Offer, status: int) -> None:
        """Book Redis's answer to one offer: accepted or refused in the ledger, or waiting for room (``block``).
        A caller counted its attempt accepted when it was submitted: a refusal is news to it."""
        task = offer.task
        ledger = self._ledger
        if not offer.counted:
            # Offered once it has an answer: a run cut short mid-call leaves no orphan.
            if offer.retry:
                ledger.retry(task)
            else:
                ledger.offer(task)
            offer.counted = True
        reason: RefuseReason
        if status == _ACCEPTED:
            task.accepted_at = offer.at
            ledger.accept(task)
            self.recent.add(task.id)
            self.submitting.discard(task.id)
            return
        if status == _UNAVAILABLE:
            self.unavailable += 1
            reason = "unavailable"
        elif self.throttles():
            reason = "shed"  # over admission control's limit, whatever when_full says
        elif self.when_full == "block" and not offer.retry:  # a retry never waits for room, as in memory
            self.blocked.append(task)
            self.max_blocked = max(self.max_blocked, len(self.blocked))
            self._retry.append(offer)
            return
        else:
            reason = "dropped" if self.when_full == "drop" else "queue_full"
        ledger.refuse(task, reason)
        self.submitting.discard(task.id)
        if task.caller is not None and self._callers is not None:
            self._callers.refused(task, reason)

    async def _wait(self) -> None:
        """Until a producer offers, or the offers waiting for room are due again (``backend.poll`` later)."""
        if not self._retry:
            await self._wake.wait()
            return
        try:
            async with asyncio.timeout(self._poll):
                await self._wake.wait()
        except TimeoutError:
            pass

    async def flush(self) -> None:
        """Send every offer made since the last batch in one pipeline (an admission script call per
        ``_CHUNK`` offers) and book the answers; runs for the life of the runtime."""
        while not self.closed:
            await self._wait()
            self._wake.clear()
            batch, self._outbox = self._outbox, []
            if self._retry and (not batch or self._clock.now() - self._retry[0].at >= self._poll):
                now = self._clock.now()
                for offer in self._retry:
                    offer.at = now
                self.blocked.clear()  # the tasks of the offers in _retry, and only those
                batch = [*self._retry, *batch]
                self._retry = []
            if not batch:
                continue
            for offer, status in zip(batch, await self._send(batch), strict=True):
                self._answer(offer, status)
            if len(self.submitting) < _WINDOW and not self.blocked:
                self._room.set()
        self._room.set()  # producers waiting for room see the queue closed

    async def _send(self, batch: list[_Offer]) -> list[int]:
        """One round trip (two when Redis lost the script): the admission script per chunk; each offer's status."""
        client = self._client
        if client is None:
            return [_UNAVAILABLE] * len(batch)
        keys = self._keys
        chunks = [batch[i : i + _CHUNK] for i in range(0, len(batch), _CHUNK)]
        bound = min(self.capacity, self.limit)
        replies: list[object] = [None] * len(chunks)
        for _ in range(2):  # once more after loading the script into a Redis that lost it
            pipe = client.pipeline(transaction=False)
            try:
                for chunk in chunks:
                    args: list[str | int] = [keys.group, bound]
                    args += [offer.fields for offer in chunk]
                    _ADMIT.call(pipe, [keys.stream], args)
                replies = await pipe.execute(raise_on_error=False)
                self.round_trips += 1
                if not Sha.missing(replies):
                    break
                await _ADMIT.load(client)  # refused before it ran: nothing was written
            except (RedisError, OSError):
                still_cancelled()
                replies = [None] * len(chunks)
                break
            finally:
                await pipe.reset()  # type: ignore[no-untyped-call]  # a pipeline cancelled before it ran, too
        statuses: list[int] = []
        for chunk, reply in zip(chunks, replies, strict=True):
            if isinstance(reply, list) and len(reply) == len(chunk):
                statuses += [_ACCEPTED if isinstance(r, str) else _FULL if r == 0 else _UNAVAILABLE for r in reply]
            else:
                statuses += [_UNAVAILABLE] * len(chunk)
        return statuses


class RedisProducer(Producer):
    """A producer whose every offer goes through ``RedisQueue.put`` (an await: the answer comes from Redis)."""

    def _emit(self, t: float) -> Task | None:
        task = self._new_task(t)
        callers = self._callers
        if callers is not None and not callers.on:
            callers = None
        if callers is not None:
            callers.arrived(task, self)
        reason = self._refused_here()
        if reason is None:
            if callers is not None:
                # Its caller's clock runs from the offer; a refusal from Redis reaches it later (RedisQueue._answer).
                callers.accepted(task)
            return task  # run() awaits queue.put(task), which offers it and accepts or refuses it
        self._ledger.offer(task)
        self._ledger.refuse(task, reason)
        if callers is not None:
            callers.refused(task, reason)
        return None

    def _refused_here(self) -> RefuseReason | None:
        """Why an offer is refused before it reaches the stream (a partitioned producer, the throttle), if it is."""
        if self.agent.partitioned:
            return "partitioned"
        factor = self._admission.factor
        if factor < 1.0 and self._throttled(factor):
            return "throttled"
        return None

    def offer_retry(self, task: Task, t: float) -> RefuseReason | None:
        """A caller's retry: refused at once when partitioned or throttled, else submitted without waiting for
        Redis, and None (accepted for now: the caller's clock runs from ``t``). Redis's answer is booked when it
        comes, as a retry; a refusal then reaches the caller through ``RedisQueue._answer``."""
        reason = self._refused_here()
        if reason is not None:
            self._ledger.retry(task)
            self._ledger.refuse(task, reason)
            return reason
        queue = self._queue
        assert isinstance(queue, RedisQueue)  # a RedisProducer offers only to the stream
        queue.submit(task, retry=True)
        return None

    def restart_clock(self, shift: float) -> None:
        """The runtime's time origin moved ``shift`` seconds later (its processes took that long to start)."""
        self._t0 += shift
        self._measure_from += shift
