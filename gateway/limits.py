"""Request limits shared by every gateway replica: a sliding-window log per limit in Redis, checked and
taken by one Lua script in one round trip, so concurrent replicas can never let more than the limit
through in any window. When Redis cannot be reached, each replica keeps the same rule in memory with
its share of the limit (limit // replicas): never unlimited.

Only requests per minute are enforced yet; tokens per minute, concurrency and budgets are not (README).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass

import redis

log = logging.getLogger("gateway.limits")
WINDOW_MS = 60_000

# KEYS: one sorted set per limit (e.g. the key's, the tenant's). ARGV: window ms, a unique member, then
# one limit per key. Every limit is checked before any is taken, so a refusal by one takes nothing.
# The server's clock is the only clock, so replicas with skewed clocks still agree.
_SCRIPT = """
local now_parts = redis.call('TIME')
local now = tonumber(now_parts[1]) * 1000 + math.floor(tonumber(now_parts[2]) / 1000)
local window = tonumber(ARGV[1])
local remaining = -1
local reset = 0
for i, key in ipairs(KEYS) do
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
  local limit = tonumber(ARGV[2 + i])
  local used = redis.call('ZCARD', key)
  local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  local key_reset = 0
  if oldest[2] then key_reset = tonumber(oldest[2]) + window - now end
  if used >= limit then return {0, 0, key_reset} end
  local left = limit - used - 1
  if remaining < 0 or left < remaining then remaining = left; reset = key_reset end
end
for i, key in ipairs(KEYS) do
  redis.call('ZADD', key, now, ARGV[2])
  redis.call('PEXPIRE', key, window)
end
if reset <= 0 then reset = window end
return {1, remaining, reset}
"""


@dataclass(frozen=True)
class Decision:
    allowed: bool
    limit: int
    remaining: int
    reset_ms: int
    shared: bool  # False when the answer came from this replica's own fallback window


class LocalWindow:
    """The fallback: the same sliding-window log, in this process only."""

    def __init__(self):
        self._lock = threading.Lock()
        self._hits: dict[str, deque] = {}

    def take(self, limits: dict[str, int]) -> tuple[bool, int, int]:
        now = time.monotonic() * 1000
        with self._lock:
            for name, limit in limits.items():
                hits = self._hits.setdefault(name, deque())
                while hits and hits[0] <= now - WINDOW_MS:
                    hits.popleft()
                if len(hits) >= limit:
                    return False, 0, int(hits[0] + WINDOW_MS - now)
            for name in limits:
                self._hits[name].append(now)
            remaining = min(limit - len(self._hits[name]) for name, limit in limits.items())
            return True, remaining, WINDOW_MS


class RequestLimiter:
    def __init__(self, url: str | None, *, replicas: int = 1, prefix: str = "gw:rpm:"):
        self.replicas = max(1, replicas)
        self.prefix = prefix
        self.client = redis.Redis.from_url(url, socket_timeout=0.25, socket_connect_timeout=0.25) if url else None
        self.script = self.client.register_script(_SCRIPT) if self.client else None
        self.local = LocalWindow()
        self.redis_ok = self.client is not None

    def take(self, limits: dict[str, int | None]) -> Decision | None:
        """Take one request from every non-empty limit (name → requests per minute); None when no limit
        applies."""
        limits = {name: value for name, value in limits.items() if value}
        if not limits:
            return None
        tightest = min(limits.values())
        if self.script is not None:
            try:
                allowed, remaining, reset = self.script(
                    keys=[self.prefix + name for name in limits], args=[WINDOW_MS, uuid.uuid4().hex, *limits.values()])
                if not self.redis_ok:
                    log.warning("redis is back: limits are shared again")
                self.redis_ok = True
                return Decision(bool(allowed), tightest, int(remaining), int(reset), shared=True)
            except redis.RedisError as exc:
                if self.redis_ok:
                    log.warning("redis unreachable (%s): per-replica limits (1/%d of each)", exc, self.replicas)
                self.redis_ok = False
        share = {name: max(1, value // self.replicas) for name, value in limits.items()}
        allowed, remaining, reset = self.local.take(share)
        return Decision(allowed, min(share.values()), remaining, reset, shared=False)
