"""The door's order, worked by hand: VTC's cost, bands a request may only lower, the virtual counters (in
memory and in Redis's scripts alike) and the queue's order between bands, tenants and a tenant's keys."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from gateway.fairness import FairQueue, Tags, VirtualCounters, band_of, cost
from gateway.limits import Flow, RequestLimiter
from gateway.validation import Invalid
from tests.gateway.test_limits import forget

REDIS_URL = "redis://127.0.0.1:6379/11"


def test_cost_is_the_prompt_plus_twice_the_output():
    assert cost(100, 50) == 200
    assert cost(7, 0) == 7
    assert cost(-3, 2) == 4  # nothing negative counts


def test_a_request_may_lower_its_band_never_raise_it():
    assert band_of(0, None) == 0
    assert band_of(5, "3") == 3
    assert band_of(5, " 5 ") == 5
    assert band_of(0, "batch") == -20
    assert band_of(0, "Best-Effort") == -20
    assert band_of(-20, "batch") == -20
    assert band_of(5, "-100") == -20  # nothing is below the lowest band
    for header, words in (("6", "above the key's band 5"), ("urgent", "batch, best-effort or an integer")):
        with pytest.raises(Invalid) as refused:
            band_of(5, header)
        assert refused.value.param == "x-priority" and words in refused.value.message


def test_counters_charge_by_weight_settle_with_the_usage_and_bank_no_credit():
    counters = VirtualCounters()
    # Tenant a (weight 1): 100 then 50 tokens of cost; counters in thousandths of a token.
    assert counters.charge("a", "a1", 100, 1) == Tags(0, 0)
    assert counters.charge("a", "a1", 50, 1) == Tags(100_000, 100_000)
    # Tenant b weighs 2: its 100 advance its counter by 50.
    assert counters.charge("b", "b1", 100, 2) == Tags(0, 0)
    assert counters.tenants == {"a": 150_000, "b": 50_000}
    # a's first request used 80, not 100: its counters go back by 20; the band's time moves to its tag (0).
    counters.settle("a", "a1", -20, 1, Tags(0, 0))
    assert counters.tenants["a"] == 130_000 and counters.keys["a1"] == 130_000
    # a's second request ends as estimated: the band's virtual time is now its tag.
    counters.settle("a", "a1", 0, 1, Tags(100_000, 100_000))
    assert counters.virtual == 100_000
    # A tenant idle until now starts at the band's time, not at 0: it cannot claim the past.
    assert counters.charge("c", "c1", 10, 1) == Tags(100_000, 0)
    # b's first request has not ended: b is busy, so its next one keeps b's own 50, not the band's 100. (Another
    # replica's queue may have moved the band's time on; a busy flow is never reset by it.)
    assert counters.charge("b", "b1", 10, 2) == Tags(50_000, 100_000)
    # Once both of b's requests have ended, b is idle: its next one is lifted from its 55 to the band's 100.
    counters.settle("b", "b1", 0, 2, Tags(0, 0))
    counters.settle("b", "b1", 0, 2, Tags(50_000, 100_000))
    assert counters.charge("b", "b1", 10, 2).tenant == 100_000
    # A second key of tenant a starts at a's keys' time (100 000), not at 0.
    assert counters.charge("a", "a2", 10, 1) == Tags(130_000, 100_000)


def test_the_scripts_in_redis_keep_the_same_counters():
    prefix = f"test:{uuid.uuid4().hex}:"
    limiter = RequestLimiter(REDIS_URL, prefix=prefix)

    async def run():
        flow = Flow("fair:1:0", "a", "a1", 1, 100)
        first = await limiter.check({}, 0, flow)
        second = await limiter.check({}, 0, Flow("fair:1:0", "a", "a1", 1, 50))
        heavy = await limiter.check({}, 0, Flow("fair:1:0", "b", "b1", 2, 100))
        await limiter.settle(first.reservation, 20, 30)  # cost 20 + 2 x 30 = 80 against 100 estimated
        await limiter.settle(second.reservation, 50, 0)
        late = await limiter.check({}, 0, Flow("fair:1:0", "c", "c1", 1, 10))
        other_key = await limiter.check({}, 0, Flow("fair:1:0", "a", "a2", 1, 10))
        busy = await limiter.check({}, 0, Flow("fair:1:0", "b", "b1", 2, 10))  # heavy has not ended
        await limiter.close()
        return first.tags, second.tags, heavy.tags, late.tags, other_key.tags, busy.tags, limiter.round_trips

    try:
        first, second, heavy, late, other_key, busy, trips = asyncio.run(run())
    finally:
        forget(prefix)
    assert (first, second, heavy) == (Tags(0, 0), Tags(100_000, 100_000), Tags(0, 0))
    assert late == Tags(100_000, 0)
    assert other_key == Tags(130_000, 100_000)
    # b is busy: it keeps its own 100 / 2 = 50 (not the band's 100), and its key its 100.
    assert busy == Tags(50_000, 100_000)
    assert trips == 8  # six checks, two settles: the counters ride on the limits' own round trips


def test_the_queue_serves_bands_first_then_tenants_then_keys_by_their_tags():
    queue = FairQueue()
    queue.push("a1", 0, "a", Tags(0, 0))
    queue.push("a2", 0, "a", Tags(100_000, 100_000))  # the key's second request
    queue.push("a3", 0, "a", Tags(150_000, 0))  # another key of a, first request of its own
    queue.push("b1", 0, "b", Tags(0, 0))
    queue.push("batch", -20, "b", Tags(0, 0))
    queue.push("vip", 10, "c", Tags(900_000, 900_000))
    assert queue.waiting(0) == 4 and len(queue) == 6
    # The highest band, whatever its tags; then a and b alternate by tenant tags (a first: it came first);
    # within a, key a3's first request goes before a2, the second of its key.
    assert [queue.pop() for _ in range(6)] == ["vip", "a1", "b1", "a3", "a2", "batch"]
    assert queue.pop() is None


def test_a_request_that_leaves_takes_its_tenants_last_place():
    queue = FairQueue()
    queue.push("a1", 0, "a", Tags(0, 0))
    queue.push("a2", 0, "a", Tags(300_000, 100_000))
    queue.push("b1", 0, "b", Tags(200_000, 0))
    assert queue.remove("a1") and not queue.remove("a1")
    # a keeps its first place in line (tag 0) for a2: it still goes before b.
    assert "a1" not in queue and queue.counts() == {(0, "a"): 1, (0, "b"): 1}
    assert [queue.pop(), queue.pop()] == ["a2", "b1"]


def test_the_bands_first_tenant_across_replicas_is_served_first_when_it_waits_here():
    queue = FairQueue()
    queue.push("a1", 0, "a", Tags(0, 0))
    queue.push("b1", 0, "b", Tags(200_000, 0))
    queue.push("batch", -20, "c", Tags(0, 0))
    # Here a's tag is the least, but across the replicas b is the band's first: b's head is served first, with
    # its tenant's tag here; a tenant that does not wait here, or waits only in a lower band, changes nothing.
    assert queue.peek("b")[:2] == ("b1", Tags(200_000, 0))
    assert queue.peek("c")[0] == "a1" and queue.peek("d")[0] == "a1"
    assert [queue.pop("b"), queue.pop("b"), queue.pop("c")] == ["b1", "a1", "batch"]
