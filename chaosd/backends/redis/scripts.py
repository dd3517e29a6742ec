"""The Redis backend's keys and Lua scripts: each check-then-write runs atomically on the server.

Admission (bounded XADD), the idempotent sink (SET NX + XACK + result), the leader lease with its fencing
token, and the leader's fenced writes (reclaiming expired task leases, the checkpoint).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import NoScriptError

from chaosd.config.settings import BackendConfig

__all__ = ["ACQUIRE", "ADMIT", "CHECKPOINT", "COMPLETE", "RENEW", "SWEEP", "Keys", "Sha"]


@dataclass(frozen=True, slots=True)
class Keys:
    """Every key the backend touches, named from the ``[backend]`` section."""

    stream: str
    group: str
    results: str
    stats: str
    stage_stats: str
    lease: str
    fence: str
    checkpoint: str
    log: str
    run: str
    stage_control: str
    members: str
    prefix: str

    @classmethod
    def of(cls, cfg: BackendConfig) -> Keys:
        p = cfg.prefix
        return cls(
            stream=cfg.stream,
            group=cfg.group,
            results=f"{p}:results",
            stats=f"{p}:stats",
            stage_stats=f"{p}:stagestats",
            lease=f"{p}:lease",
            fence=f"{p}:fence",
            checkpoint=f"{p}:checkpoint",
            log=f"{p}:dispatch",
            run=f"{p}:run",
            stage_control=f"{p}:control:stages",
            members=f"{p}:workers",
            prefix=p,
        )

    def effect(self, run: str, task: str) -> str:
        return f"{self.prefix}:effect:{run}:{task}"

    def control(self, agent: str) -> str:
        return f"{self.prefix}:control:{agent}"

    def heartbeat(self, agent: str) -> str:
        return f"{self.prefix}:hb:{agent}"

    def wiped_at_start(self) -> tuple[str, ...]:
        """What a starting daemon clears: the previous run's tasks and books (the fencing counter stays)."""
        return (
            self.stream,
            self.results,
            self.stats,
            self.stage_stats,
            self.checkpoint,
            self.log,
            self.stage_control,
            self.members,
        )


class Sha:
    """A script sent by its SHA1 in a pipeline. redis-py's ``Script`` asks ``SCRIPT EXISTS`` before every pipeline
    that calls one, a second round trip per batch; this one is loaded when Redis answers ``NOSCRIPT`` (it
    restarted, or was flushed) and the call sent again."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()

    def call(self, pipe: Any, keys: list[str], args: list[Any]) -> None:
        """Queue the call in ``pipe`` (a pipeline: its reply comes with the others)."""
        pipe.evalsha(self.sha, len(keys), *keys, *args)

    @staticmethod
    def missing(replies: list[Any]) -> bool:
        return any(isinstance(r, NoScriptError) for r in replies)

    async def load(self, client: Redis) -> None:
        await client.script_load(self.source)


# KEYS: stream. ARGV: group, capacity, then one string per task: its fields and values separated by single
# spaces (no value is empty or holds a space) → per task its entry id, 0 when the queue is full, or -1 when
# Redis refused the write (out of memory, say: the tasks before it stay added, so each answer is the truth about
# its task). One argument per task, not one per field: the client encodes each argument at a cost per argument.
# Waiting = entries in the stream minus those delivered and not yet acknowledged (acknowledged ones are
# deleted), the same count the in-memory queue bounds. A stream or group lost with a Redis restart is recreated.
ADMIT = """
local stream, group = KEYS[1], ARGV[1]
local pending = redis.pcall('XPENDING', stream, group)
if type(pending) == 'table' and pending.err then
  redis.pcall('XGROUP', 'CREATE', stream, group, '0', 'MKSTREAM')
  pending = {0}
end
local room = tonumber(ARGV[2]) - (redis.call('XLEN', stream) - pending[1])
local out = {}
for i = 3, #ARGV do
  local id = 0
  if room > 0 then
    local fields = {}
    for word in string.gmatch(ARGV[i], '%S+') do fields[#fields + 1] = word end
    id = redis.pcall('XADD', stream, '*', unpack(fields))
    if type(id) == 'table' then
      id = -1
    else
      room = room - 1
    end
  end
  out[#out + 1] = id
end
return out
"""

# KEYS: stream, results, stats, then each task's effect key. ARGV: group, idempotent (1/0), effect ttl ms, the
# worker's id, then per task its entry id and its result's fields and values separated by single spaces (an empty
# value is written "-"; the worker's id, which may hold anything, is its own argument) → how many effects were
# applied (their results appended); a duplicate the sink suppressed is counted. A worker settles a whole read in
# one call.
COMPLETE = """
local n = 0
for k = 4, #KEYS do
  local entry, result = ARGV[2 * k - 3], ARGV[2 * k - 2]
  redis.call('XACK', KEYS[1], ARGV[1], entry)
  redis.call('XDEL', KEYS[1], entry)
  local fresh = true
  if ARGV[2] == '1' then
    if not redis.call('SET', KEYS[k], '1', 'NX', 'PX', ARGV[3]) then
      redis.call('HINCRBY', KEYS[3], 'deduplicated', 1)
      fresh = false
    end
  else
    redis.call('SET', KEYS[k], '1', 'PX', ARGV[3])
  end
  if fresh then
    local fields = {'w', ARGV[4]}
    for word in string.gmatch(result, '%S+') do
      if word == '-' then word = '' end
      fields[#fields + 1] = word
    end
    redis.call('XADD', KEYS[2], '*', unpack(fields))
    n = n + 1
  end
end
return n
"""

# KEYS: lease, fence. ARGV: replica identity, ttl ms → the fencing token held (a new one when elected), or 0.
ACQUIRE = """
local holder = redis.call('GET', KEYS[1])
if holder then
  local who, token = string.match(holder, '^(.*):(%d+)$')
  if who == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return tonumber(token)
  end
  return 0
end
local token = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. token, 'PX', ARGV[2])
return token
"""

# KEYS: lease, stats. ARGV: identity, token, ttl ms → 1 renewed, 0 refused (a stale leader: counted).
RENEW = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] .. ':' .. ARGV[2] then
  redis.call('HINCRBY', KEYS[2], 'refused_writes', 1)
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
"""

# KEYS: stream, lease, log, stats. ARGV: group, identity, token, min idle ms, count, log maxlen
# → tasks re-delivered, or -1 when the caller no longer holds the lease (the write is refused and counted).
# An entry idle past the task lease is claimed, appended again (attempts + 1) and the old copy acknowledged and
# deleted, so it goes back to the queue for any worker; its old holder, if it finishes, meets the sink's NX.
SWEEP = """
if redis.call('GET', KEYS[2]) ~= ARGV[2] .. ':' .. ARGV[3] then
  redis.call('HINCRBY', KEYS[4], 'refused_writes', 1)
  return -1
end
local claimed = redis.pcall('XAUTOCLAIM', KEYS[1], ARGV[1], 'reclaim', ARGV[4], '0-0', 'COUNT', ARGV[5])
if type(claimed) ~= 'table' or claimed.err then
  return 0
end
local n = 0
for _, entry in ipairs(claimed[2]) do
  local id, fields = entry[1], entry[2]
  for i = 1, #fields, 2 do
    if fields[i] == 'n' then fields[i + 1] = tostring(tonumber(fields[i + 1]) + 1) end
  end
  redis.call('XADD', KEYS[1], '*', unpack(fields))
  redis.call('XACK', KEYS[1], ARGV[1], id)
  redis.call('XDEL', KEYS[1], id)
  redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[6], '*', 'op', 'redispatch', 'entry', id, 'token', ARGV[3])
  n = n + 1
end
for _, id in ipairs(claimed[3] or {}) do
  redis.call('XACK', KEYS[1], ARGV[1], id)
end
if n > 0 then
  redis.call('HINCRBY', KEYS[4], 'lease_expired', n)
  redis.call('HINCRBY', KEYS[4], 'redispatched', n)
end
return n
"""

# KEYS: lease, checkpoint, log, stats. ARGV: identity, token, log maxlen, field, value, … → 1 written, -1 refused.
CHECKPOINT = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] .. ':' .. ARGV[2] then
  redis.call('HINCRBY', KEYS[4], 'refused_writes', 1)
  return -1
end
redis.call('HSET', KEYS[2], unpack(ARGV, 4))
redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[3], '*', 'op', 'checkpoint', 'token', ARGV[2])
return 1
"""
