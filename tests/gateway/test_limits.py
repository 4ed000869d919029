"""Request limits in Redis (db 11): exact under many replicas and parallel clients, all-or-nothing across
a key's and its tenant's limits, and per-replica shares while Redis is unreachable."""

from __future__ import annotations

import multiprocessing
import uuid
from concurrent.futures import ThreadPoolExecutor

import redis

from gateway.limits import RequestLimiter
from tests.ports import closed_port

REDIS_URL = "redis://127.0.0.1:6379/11"
REPLICAS, CLIENTS_PER_REPLICA, TRIES_PER_CLIENT = 10, 20, 3


def replica(prefix: str, limits: dict) -> int:
    """One gateway replica: its own connection pool, CLIENTS_PER_REPLICA threads taking at once."""
    limiter = RequestLimiter(REDIS_URL, prefix=prefix)

    def client(_):
        return sum(limiter.take(limits).allowed for _ in range(TRIES_PER_CLIENT))

    with ThreadPoolExecutor(CLIENTS_PER_REPLICA) as pool:
        return sum(pool.map(client, range(CLIENTS_PER_REPLICA)))


def run_replicas(limits: dict) -> int:
    prefix = f"test:{uuid.uuid4().hex}:"
    try:
        with multiprocessing.get_context("spawn").Pool(REPLICAS) as pool:
            return sum(pool.starmap(replica, [(prefix, limits)] * REPLICAS))
    finally:
        client = redis.Redis.from_url(REDIS_URL)
        for name in client.scan_iter(f"{prefix}*"):
            client.delete(name)


def test_many_replicas_never_let_more_than_the_limit_through():
    sent = REPLICAS * CLIENTS_PER_REPLICA * TRIES_PER_CLIENT
    assert sent == 600
    assert run_replicas({"key:1": 100}) == 100
    # The tenant's limit bounds the key's, and a refusal by either takes from neither.
    assert run_replicas({"key:1": 1000, "tenant:1": 37}) == 37


def test_a_refusal_takes_nothing_and_headers_count_down():
    limiter = RequestLimiter(REDIS_URL, prefix=f"test:{uuid.uuid4().hex}:")
    both = {"wide": 5, "narrow": 2}
    decisions = [limiter.take(both) for _ in range(4)]
    assert [d.allowed for d in decisions] == [True, True, False, False]
    assert [d.remaining for d in decisions[:2]] == [1, 0]
    assert decisions[0].limit == 2 and 0 < decisions[2].reset_ms <= 60_000
    # "wide" kept only the two requests that were let through: three more fit, not one.
    assert [limiter.take({"wide": 5}).allowed for _ in range(4)] == [True, True, True, False]
    assert limiter.take({"wide": None}) is None


def test_redis_down_means_a_share_per_replica_never_no_limit():
    with closed_port() as port:
        limiter = RequestLimiter(f"redis://127.0.0.1:{port}/11", replicas=4, prefix="unused:")
        results = [limiter.take({"key:1": 40}) for _ in range(12)]
    assert sum(d.allowed for d in results) == 10
    assert not limiter.redis_ok and not results[0].shared
