"""Activation from zero: a request for a service the autoscaler wakes (serverless, builtin autoscaler) while
none of its engines is ready is held here, in a bounded queue per service for a bounded time, until the
snapshot shows a ready engine and an upstream, then forwarded.

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
from collections.abc import Callable

import redis

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

    async def hold(self, service_id: int, lookup: Callable[[int], dict | None]) -> dict | None:
        """The service's entry once it is ready; None when its queue is full or the wait ran out."""
        if self.held.get(service_id, 0) >= self.max_held:
            return None
        self.held[service_id] = self.held.get(service_id, 0) + 1
        try:
            deadline = time.monotonic() + self.max_wait
            published = 0.0
            while time.monotonic() < deadline:
                service = lookup(service_id)
                if ready(service):
                    return service
                if time.monotonic() - published >= REFRESH_SECONDS:
                    await self._publish(service_id)
                    published = time.monotonic()
                await asyncio.sleep(self.poll_seconds)
            return None
        finally:
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
