"""Limits in Redis (db 11): requests, tokens and concurrency exact under many replicas and parallel
clients, all-or-nothing across a key's and its tenant's limits, tokens settled from the real usage, the
month's budget, leases that lapse, and per-replica shares while Redis is unreachable."""

from __future__ import annotations

import asyncio
import multiprocessing
import socket
import time
import uuid

import pytest
import redis

from gateway.limits import REDIS_ANSWER_S, RequestLimiter, estimate_tokens
from gateway.validation import ENDPOINTS, checked_demand
from tests.polling import wait_for
from tests.ports import closed_port

REDIS_URL = "redis://127.0.0.1:6379/11"
CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"
REPLICAS, CLIENTS_PER_REPLICA, TRIES_PER_CLIENT = 10, 20, 3
SENT = REPLICAS * CLIENTS_PER_REPLICA * TRIES_PER_CLIENT


def replica(prefix: str, scopes: dict, tokens: int) -> int:
    """One gateway replica: its own event loop and connection pool, CLIENTS_PER_REPLICA clients checking at
    once. Nothing is settled, so every request stays in flight and keeps its reservation."""

    async def run() -> int:
        limiter = RequestLimiter(REDIS_URL, prefix=prefix)

        async def client() -> int:
            return sum([(await limiter.check(scopes, tokens)).allowed for _ in range(TRIES_PER_CLIENT)])

        try:
            return sum(await asyncio.gather(*(client() for _ in range(CLIENTS_PER_REPLICA))))
        finally:
            await limiter.close()

    return asyncio.run(run())


@pytest.fixture(scope="module")
def replicas():
    """REPLICAS spawned processes (nothing of the test process's state), started once for the module's runs: each
    run gives every process a replica of its own (its own limiter, event loop and connections) under a new key
    prefix. Spawning ten processes per run cost about 50 s of CPU a suite."""
    with multiprocessing.get_context("spawn").Pool(REPLICAS) as pool:
        yield pool


def run_replicas(pool, scopes: dict, tokens: int = 0) -> int:
    prefix = f"test:{uuid.uuid4().hex}:"
    try:
        return sum(pool.starmap(replica, [(prefix, scopes, tokens)] * REPLICAS, chunksize=1))
    finally:
        forget(prefix)


def forget(prefix: str) -> None:
    client = redis.Redis.from_url(REDIS_URL)
    for name in client.scan_iter(f"{prefix}*"):
        client.delete(name)


class Blocking:
    """A limiter whose coroutines run one at a time to their end, on one event loop of the test's own (its
    Redis connections belong to that loop)."""

    def __init__(self, limiter: RequestLimiter):
        self.inner, self.loop = limiter, asyncio.new_event_loop()

    def check(self, scopes: dict, tokens: int):
        return self.loop.run_until_complete(self.inner.check(scopes, tokens))

    def settle(self, reservation, prompt_tokens: int, completion_tokens: int) -> None:
        self.loop.run_until_complete(self.inner.settle(reservation, prompt_tokens, completion_tokens))

    def close(self) -> None:
        self.loop.run_until_complete(self.inner.close())
        self.loop.close()


@pytest.fixture
def limiter():
    prefix = f"test:{uuid.uuid4().hex}:"
    blocking = Blocking(RequestLimiter(REDIS_URL, prefix=prefix))
    yield blocking
    blocking.close()
    forget(prefix)


def test_many_replicas_never_let_more_requests_through_than_the_limit(replicas):
    assert SENT == 600
    assert run_replicas(replicas, {"key:1": {"rpm": 100}}) == 100
    # The tenant's limit bounds the key's, and a refusal by either takes from neither.
    assert run_replicas(replicas, {"key:1": {"rpm": 1000}, "tenant:1": {"rpm": 37}}) == 37


def test_many_replicas_never_reserve_more_tokens_or_slots_than_the_limit(replicas):
    # 7 tokens a request against 1,000 a minute: 142 fit (994 tokens), the 143rd would pass the limit.
    assert run_replicas(replicas, {"key:1": {"tpm": 1000}}, tokens=7) == 142
    assert run_replicas(replicas, {"key:1": {"tpm": 10**6}, "tenant:1": {"tpm": 300}}, tokens=7) == 42
    # Nothing is settled: 13 slots, 13 requests in flight.
    assert run_replicas(replicas, {"key:1": {"concurrency": 13}, "tenant:1": {"rpm": 1000}}) == 13
    assert run_replicas(replicas, {"key:1": {"monthly_token_budget": 500}}, tokens=9) == 55


def test_a_refusal_takes_nothing_and_headers_count_down(limiter):
    both = {"wide": {"rpm": 5, "tpm": 1000}, "narrow": {"rpm": 2}}
    decisions = [limiter.check(both, 100) for _ in range(4)]
    assert [d.allowed for d in decisions] == [True, True, False, False]
    assert [d.requests.remaining for d in decisions] == [1, 0, 0, 0]
    assert [d.tokens.remaining for d in decisions[:3]] == [900, 800, 800]
    assert decisions[2].reason == "requests" and 0 < decisions[2].retry_after_ms <= 60_000
    assert decisions[0].requests.limit == 2 and decisions[0].tokens.limit == 1000
    # "wide" kept only the two requests let through: three more fit, not one, and 800 tokens.
    assert [limiter.check({"wide": {"rpm": 5, "tpm": 1000}}, 100).allowed for _ in range(4)] == [
        True, True, True, False]
    unlimited = limiter.check({"wide": {"rpm": None}, "none": None}, 100)
    assert unlimited.allowed and unlimited.reservation is None and unlimited.requests is None


def test_tokens_are_settled_from_the_real_usage(limiter):
    scope = {"key:1": {"tpm": 1000}}
    first = limiter.check(scope, 600)
    assert first.allowed and first.tokens.remaining == 400
    refused = limiter.check(scope, 500)
    assert not refused.allowed and refused.reason == "tokens" and refused.tokens.remaining == 400
    # Only 600 were reserved: the wait is until that reservation leaves the window.
    assert 59_000 <= refused.retry_after_ms <= 60_000
    limiter.settle(first.reservation, 80, 20)
    limiter.settle(first.reservation, 1000, 1000)  # a second settle changes nothing
    second = limiter.check(scope, 900)
    assert second.allowed and second.tokens.remaining == 0
    # Used more than reserved (a prompt longer than estimated): the window counts what was used.
    limiter.settle(second.reservation, 850, 100)
    assert limiter.check(scope, 1).tokens.remaining == 0
    assert not limiter.check({"key:2": {"tpm": 10}}, 11).allowed  # larger than the limit: never fits
    assert limiter.inner.round_trips == 7


def test_a_spent_budget_refuses_with_its_own_reason_and_settling_gives_back(limiter):
    scope = {"key:1": {"monthly_token_budget": 1000}, "tenant:1": {"rpm": 100}}
    first = limiter.check(scope, 600)
    assert first.allowed and first.budget_left == {"key:1": 400}
    refused = limiter.check(scope, 600)
    assert not refused.allowed and refused.reason == "budget" and refused.budget_left == {"key:1": 400}
    limiter.settle(first.reservation, 40, 10)
    assert limiter.check(scope, 600).budget_left == {"key:1": 350}
    # The tenant's budget bounds all its keys: another key of the tenant is refused by it.
    tenant = {"tenant:1": {"monthly_token_budget": 50}}
    assert limiter.check({"key:3": {}, **tenant}, 50).allowed
    assert limiter.check({"key:4": {"rpm": 9}, **tenant}, 1).reason == "budget"


def test_concurrency_is_released_when_the_request_ends_and_lapses_when_it_never_does():
    prefix = f"test:{uuid.uuid4().hex}:"
    limiter = Blocking(RequestLimiter(REDIS_URL, prefix=prefix, lease_ms=1500))
    try:
        scope = {"key:1": {"concurrency": 2}}
        running = [limiter.check(scope, 10) for _ in range(3)]
        assert [d.allowed for d in running] == [True, True, False] and running[2].reason == "concurrency"
        limiter.settle(running[0].reservation, 5, 5)
        crashed = limiter.check(scope, 10)
        assert crashed.allowed and not limiter.check(scope, 10).allowed
        # Two requests whose replica never settles them: their leases lapse and the slots come back.
        wait_for(lambda: limiter.check(scope, 10).allowed, timeout=10)
    finally:
        limiter.close()
        forget(prefix)


def test_redis_down_means_a_share_per_replica_never_no_limit():
    with closed_port() as port:
        limiter = Blocking(RequestLimiter(f"redis://127.0.0.1:{port}/11", replicas=4, prefix="unused:"))
        requests = [limiter.check({"key:1": {"rpm": 40}}, 0) for _ in range(12)]
        assert sum(d.allowed for d in requests) == 10 and not requests[0].shared
        assert requests[0].requests.limit == 10 and requests[0].requests.remaining == 9
        tokens = [limiter.check({"key:2": {"tpm": 400}}, 30) for _ in range(5)]
        assert [d.allowed for d in tokens] == [True, True, True, False, False]
        assert tokens[3].reason == "tokens" and tokens[0].tokens.remaining == 70
        limiter.settle(tokens[0].reservation, 5, 5)
        assert limiter.check({"key:2": {"tpm": 400}}, 30).allowed
        slots = [limiter.check({"key:3": {"concurrency": 8}}, 0) for _ in range(3)]
        assert [d.allowed for d in slots] == [True, True, False]
        limiter.settle(slots[0].reservation, 0, 0)
        assert limiter.check({"key:3": {"concurrency": 8}}, 0).allowed
        assert limiter.check({"key:4": {"monthly_token_budget": 400}}, 101).reason == "budget"
    assert not limiter.inner.redis_ok
    limiter.close()


def test_a_replica_whose_loop_stalls_after_asking_still_counts_on_redis(limiter):
    # A loaded host or a throttled container can leave the replica's loop idle after Redis has answered;
    # reading the answer late is not Redis gone (the replica then let requests through twice: on Redis,
    # which had counted them, and on its own share).
    scope = {"key:1": {"concurrency": 5}}
    assert limiter.check(scope, 0).shared  # the connection is open: the next check sends at once

    async def stalled():
        # Redis holds writes for 0.3 s, so the check is sent and waiting when the loop stops for 1 s; the
        # answer (at 0.3 s) is read when the loop runs again.
        redis.Redis.from_url(REDIS_URL).client_pause(300, all=False)
        asyncio.get_running_loop().call_later(0.1, time.sleep, 1.0)
        return await limiter.inner.check(scope, 0)

    decision = limiter.loop.run_until_complete(stalled())
    assert decision.shared and decision.allowed and limiter.inner.redis_ok


def test_a_silent_redis_counts_as_gone_after_the_answer_timeout():
    # Something accepts the connection and never answers (a hung Redis, a half-open link): the replica waits
    # REDIS_ANSWER_S at most, then falls back to its share.
    with socket.create_server(("127.0.0.1", 0)) as silent:
        port = silent.getsockname()[1]
        limiter = Blocking(RequestLimiter(f"redis://127.0.0.1:{port}/11", replicas=4, prefix="unused:"))
        started = time.monotonic()
        decision = limiter.check({"key:1": {"rpm": 40}}, 0)
        waited = time.monotonic() - started
        limiter.close()
    assert decision.allowed and not decision.shared and decision.requests.limit == 10
    assert REDIS_ANSWER_S <= waited < REDIS_ANSWER_S + 5


def test_a_budget_share_is_of_what_was_left_when_redis_went_away(limiter):
    scope = {"key:1": {"monthly_token_budget": 1000}}
    assert limiter.check(scope, 800).allowed
    limiter.inner.replicas = 2
    limiter.inner._check = None  # as if Redis had gone: the replica falls back to its own count
    assert limiter.check(scope, 101).reason == "budget"
    assert limiter.check(scope, 100).allowed


def reserved(path: str, request: dict, default_max_tokens: int = 1024) -> int:
    """The reservation the gateway makes for `request` on `path`, once the door has checked it."""
    return estimate_tokens(request, checked_demand(request, ENDPOINTS[path]), default_max_tokens)


def test_the_estimate_counts_every_prompt_and_what_the_engine_will_generate():
    chat = {"messages": [{"role": "user", "content": "x" * 40},
                         {"role": "user", "content": [{"type": "text", "text": "y" * 8}]}], "max_tokens": 50}
    # 48 characters are 12 tokens, 4 a message, 50 to generate.
    assert reserved(CHAT, chat) == 12 + 2 * 4 + 50
    # Chat honours max_completion_tokens; three choices generate three times.
    assert reserved(CHAT, {**chat, "max_tokens": None, "max_completion_tokens": 50, "n": 3}) == 12 + 8 + 3 * 50
    assert reserved(CHAT, {**chat, "max_completion_tokens": 50}) == 12 + 8 + 50  # both set, agreeing
    assert reserved(COMPLETIONS, {"prompt": "abcd" * 3, "max_tokens": 7}) == 3 + 7
    # A list of token ids is one prompt; without max_tokens the default is reserved.
    assert reserved(COMPLETIONS, {"prompt": [1, 2, 3]}) == 3 + 1024
    # Two prompts (12 characters: 3 tokens), two choices each, 50 tokens a choice.
    assert reserved(COMPLETIONS, {"prompt": ["abcd" * 2, "abcd"], "n": 2, "max_tokens": 50}) == 3 + 2 * 2 * 50
    # best_of generates best_of sequences for each prompt and returns n of them: 5 ids, 2 prompts x 3 x 10.
    assert reserved(COMPLETIONS, {"prompt": [[1, 2, 3], [4, 5]], "n": 2, "best_of": 3, "max_tokens": 10}) == 5 + 60
    assert reserved(COMPLETIONS, {"prompt": "abcd", "n": 3, "max_tokens": 100}) == 1 + 300


def test_requests_that_end_together_are_settled_in_one_round_trip(limiter):
    scope = {"key:1": {"concurrency": 5, "tpm": 1000}}
    running = [limiter.check(scope, 100) for _ in range(5)]
    assert all(d.allowed for d in running) and not limiter.check(scope, 100).allowed
    before = limiter.inner.round_trips

    async def end_all():
        await asyncio.gather(*(limiter.inner.settle(d.reservation, 10, 10) for d in running))

    limiter.loop.run_until_complete(end_all())
    assert limiter.inner.round_trips == before + 1
    # Every lease is back and the window holds 20 tokens a request, not the 100 reserved: 900 left.
    after = limiter.check(scope, 0)
    assert after.allowed and after.tokens.remaining == 1000 - 5 * 20
