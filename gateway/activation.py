"""Activation from zero: a request for a service the autoscaler wakes (serverless, builtin autoscaler) while
none of its engines is ready waits in the door's queue (gateway/door.py: band order, fair share, 429
queue_full / queue_timeout) with the waiting room's own time-to-live and cap, until the snapshot shows a ready
engine and an upstream, then goes on in the queue's order.

While requests are held, this replica publishes their number in Redis (`gw:held:<service>:<replica>`,
expiring after `TTL_SECONDS` unless refreshed). The telemetry cycle's activation check
(workers/activation.py) adds these to what the services' routers hold, stores the sum as the service's
activation signal with the gateway's share, and has the autoscaler evaluate the service at once: one
mechanism, whoever holds the request, and the decision says the gateway held it.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable

import redis

from gateway.door import QUEUE_FULL

log = logging.getLogger("gateway.activation")
HELD_PREFIX = "gw:held:"
TTL_SECONDS = 15
REFRESH_SECONDS = 2.0


def ready(service: dict | None) -> bool:
    return service is not None and bool(service.get("ready_engines")) and bool(service.get("endpoints"))


class Activator:
    def __init__(self, redis_url: str | None, *, max_held: int = 100, max_wait: float = 120.0,
                 poll_seconds: float = 0.25):
        self.redis = redis.Redis.from_url(redis_url, socket_timeout=0.5, socket_connect_timeout=0.5) \
            if redis_url else None
        self.max_held, self.max_wait, self.poll_seconds = max_held, max_wait, poll_seconds
        self.replica = uuid.uuid4().hex[:12]
        self.held: dict[int, int] = {}

    def should_hold(self, service: dict) -> bool:
        """A service to wake that has no ready engine, unless this replica cannot signal it (no Redis) and
        the service's router can take the request (a router that holds requests, like kubesim's, wakes it
        through the same activation check)."""
        if not service.get("wakes") or service.get("ready_engines"):
            return False
        return self.redis is not None or not service.get("endpoints")

    async def hold(self, service_id: int, waiting: Awaitable[str | None], poke: Callable[[], None]) -> str | None:
        """Hold a request for a service to wake while `waiting` (its place in the door's queue, gateway/door.py,
        with the waiting room's time-to-live) runs: the number held published, `poke` called every
        `poll_seconds` (it lets the door see a new snapshot). Returns `waiting`'s answer: None once the service
        is ready and the request's turn has come, else why it was shed; QUEUE_FULL at once when this replica
        already holds `max_held` for the service. Cancelled (its client left), the request leaves the queue."""
        if self.held.get(service_id, 0) >= self.max_held:
            waiting.close()
            return QUEUE_FULL
        self.held[service_id] = self.held.get(service_id, 0) + 1
        turn = asyncio.ensure_future(waiting)
        try:
            published = 0.0
            while not turn.done():
                if time.monotonic() - published >= REFRESH_SECONDS:
                    await self._publish(service_id)
                    published = time.monotonic()
                poke()
                await asyncio.wait({turn}, timeout=self.poll_seconds)
            return turn.result()
        finally:
            if not turn.done():
                turn.cancel()
                await asyncio.gather(turn, return_exceptions=True)
            self.held[service_id] -= 1
            await self._publish(service_id)

    async def _publish(self, service_id: int) -> None:
        if self.redis is None:
            return
        count, name = self.held.get(service_id, 0), f"{HELD_PREFIX}{service_id}:{self.replica}"
        try:
            if count:
                await asyncio.to_thread(self.redis.set, name, count, ex=TTL_SECONDS)
            else:
                await asyncio.to_thread(self.redis.delete, name)
        except redis.RedisError as exc:
            log.warning("held requests of service %s not published: %s", service_id, exc)
