"""What waits at this replica's door, published for the service page's queue card: every REPORT_SECONDS a hash
`gw:queue:<service>:<replica>` of "<band>|<tenant>" → requests waiting, expiring after TTL_SECONDS unless
refreshed, deleted once nothing waits. The control plane sums the replicas' hashes
(apps/gateway/queue_card.py). Off the request path: one pipeline per look, on a thread."""

from __future__ import annotations

import asyncio
import logging

import redis

log = logging.getLogger("gateway.door_report")
QUEUE_PREFIX = "gw:queue:"
REPORT_SECONDS = 2.0
TTL_SECONDS = 15


def by_service(waiting: dict[tuple[int, int, str], int]) -> dict[int, dict[str, int]]:
    """The door's waiting counts as each service's hash fields."""
    found: dict[int, dict[str, int]] = {}
    for (service_id, band, tenant), count in waiting.items():
        found.setdefault(service_id, {})[f"{band}|{tenant}"] = count
    return found


def publish(client: redis.Redis, replica: str, current: dict[int, dict[str, int]], before: set[int]) -> None:
    pipe = client.pipeline(transaction=False)
    for service_id, fields in current.items():
        name = f"{QUEUE_PREFIX}{service_id}:{replica}"
        pipe.delete(name)
        pipe.hset(name, mapping=fields)
        pipe.expire(name, TTL_SECONDS)
    for service_id in before - set(current):
        pipe.delete(f"{QUEUE_PREFIX}{service_id}:{replica}")
    pipe.execute()


async def report_loop(door, client: redis.Redis, replica: str) -> None:
    """Runs for the app's life."""
    published: set[int] = set()
    while True:
        await asyncio.sleep(REPORT_SECONDS)
        current = by_service(door.waiting())
        if not current and not published:
            continue
        try:
            await asyncio.to_thread(publish, client, replica, current, published)
            published = set(current)
        except redis.RedisError as exc:
            log.warning("the queue's waiting counts not published: %s", exc)
