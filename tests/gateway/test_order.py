"""The shared order across gateway replicas, worked by hand against real Redis: the waiting sets CHECK fills and
the pipeline's LOOK empties, which head may go (its tenant's served counter the band's least, its key tag at most
every other key's), the served counters (what goes on is charged its own cost, a tenant that joins is lifted),
members past their deadline dropped, the scan's bound, seats lent, borrowed and taken back with the head claimed,
and two doors (two replicas) where the one holding only a flooding key's requests waits and lends its seat to the
one holding the other key's."""

from __future__ import annotations

import asyncio
import uuid

import redis

from gateway.door import Door
from gateway.fairness import Tags
from gateway.limits import Flow, RequestLimiter
from gateway.order import Place, Seats, may_go
from gateway.order_lua import SCAN
from tests.gateway.test_limits import REDIS_URL, forget

WAIT_MS = 60_000


def flow(tenant: str, key: str, cost: int, wait_ms: int = WAIT_MS) -> Flow:
    return Flow("fair:1:0", tenant, key, 1, cost, wait_ms)


async def look(limiter: RequestLimiter, place: Place, tags: Tags, **seats):
    """One LOOK for the head at `place`, as the door asks it: its Verdict."""
    answers = []
    limiter.order.look(place, tags, answers.append, held=False, seats=lambda: Seats(**seats))
    while not answers:
        await asyncio.sleep(0.001)
    return answers[0]


def run(prefix: str, body):
    try:
        return asyncio.run(body())
    finally:
        forget(prefix)


def test_a_key_goes_only_when_no_other_key_of_its_tenant_waits_with_a_smaller_tag():
    prefix = f"test:{uuid.uuid4().hex}:"
    limiter = RequestLimiter(REDIS_URL, prefix=prefix)

    async def body():
        a1 = await limiter.check({}, 0, flow("t", "a", 100))
        b1 = await limiter.check({}, 0, flow("t", "b", 50))
        a2 = await limiter.check({}, 0, flow("t", "a", 100))
        # Key tags, in thousandths: a 0 then 100 000 (a's own counter); b 0 (new, at its tenant's keys' time 0).
        assert (a1.tags.key, b1.tags.key, a2.tags.key) == (0, 0, 100_000)
        view = limiter.order.views[("fair:1:0", "t")]  # from a2's CHECK: every request waits
        assert view.keys == (("a", 0), ("b", 0)) and view.tenants[0] == ("t", 0)
        # a2 may not go: b waits with 0 < 100 000. b1 and a1 may (ties go).
        assert not may_go(view, a2.place, a2.tags)
        assert may_go(view, b1.place, b1.tags) and may_go(view, a1.place, a1.tags)
        # a1 and b1 go on (taken out with the next pipeline): nothing else waits, a2 may go.
        limiter.order.forget(a1.place, went=True)
        limiter.order.forget(b1.place, went=True)
        verdict = await look(limiter, a2.place, a2.tags)
        view = limiter.order.views[("fair:1:0", "t")]
        await limiter.close()
        return verdict.go, view.keys, limiter.order.trips

    go, keys, trips = run(prefix, body)
    assert go and keys == (("a", 100_000),)
    assert trips == 1  # the forgets and the look: one round trip of the order's own


def test_between_tenants_a_tenant_goes_while_its_served_counter_is_the_bands_least():
    prefix = f"test:{uuid.uuid4().hex}:"
    limiter = RequestLimiter(REDIS_URL, prefix=prefix)

    async def body():
        t1 = [await limiter.check({}, 0, flow("t1", "k1", 100)) for _ in range(2)]
        t2 = await limiter.check({}, 0, flow("t2", "k2", 100))
        # Nothing served yet: both tenants' counters are 0, both may go.
        both = [(await look(limiter, d.place, d.tags)).go for d in (t1[1], t2)]
        limiter.order.forget(t1[0].place, went=True)  # t1's first goes on: t1 served 100 000, t2 still 0
        after = [(await look(limiter, d.place, d.tags)).go for d in (t1[1], t2)]
        await limiter.close()
        return both, after

    assert run(prefix, body) == ([True, True], [False, True])


def test_a_tenant_is_charged_the_cost_of_the_request_that_goes_not_of_the_one_charged_first():
    """Tenant A's requests: a1 costs 10 (tenant tag 0), a2 costs 100 (tag 10 000), on two keys (key tags 0, 0), as
    if waiting at two replicas. B's: b1 and b2 cost 50 each (tags 0 and 50 000). b1 goes: B has been served 50.
    a2 goes (its replica had a seat first): A has been served 100, so B's b2 goes next, not a1. By the tags A had
    been served only through a1's place (10), so a1 would have gone before b2 and A got 110 against B's 50: with
    three replicas that difference, request after request, took the served-cost gap past VTC's bound."""
    prefix = f"test:{uuid.uuid4().hex}:"
    limiter = RequestLimiter(REDIS_URL, prefix=prefix)
    client = redis.Redis.from_url(REDIS_URL)

    async def body():
        a1 = await limiter.check({}, 0, flow("A", "ka1", 10))
        a2 = await limiter.check({}, 0, flow("A", "ka2", 100))
        b1, b2 = [await limiter.check({}, 0, flow("B", "kb", 50)) for _ in range(2)]
        limiter.order.forget(b1.place, went=True)
        second = await look(limiter, a2.place, a2.tags)  # A 0 against B 50 000
        limiter.order.forget(a2.place, went=True)
        after = [(await look(limiter, d.place, d.tags)).go for d in (a1, b2)]
        served = [int(client.hget(f"{prefix}fair:1:0", f"s:{t}")) for t in ("A", "B")]
        await limiter.close()
        return [d.tags.tenant for d in (a1, a2, b1, b2)], second.go, after, served

    tags, second, after, served = run(prefix, body)
    assert tags == [0, 10_000, 0, 50_000]
    assert second and after == [False, True]  # a1 waits: A 100 000 against B 50 000
    assert served == [100_000, 50_000]


def test_a_request_dropped_is_not_charged_and_a_tenant_that_joins_is_lifted_to_the_least_waiting():
    prefix = f"test:{uuid.uuid4().hex}:"
    limiter = RequestLimiter(REDIS_URL, prefix=prefix)
    client = redis.Redis.from_url(REDIS_URL)
    waiting = f"{prefix}fair:1:0:q"

    async def body():
        t1 = [await limiter.check({}, 0, flow("t1", "k1", 100)) for _ in range(5)]
        t2 = await limiter.check({}, 0, flow("t2", "k2", 100))
        limiter.order.forget(t2.place, went=True)  # t2 served 100, and nothing of it waits: it leaves the band
        limiter.order.forget(t1[0].place, went=False)  # shed: t1 is charged nothing
        for d in t1[1:4]:  # t1 alone: three go on, served 300
            limiter.order.forget(d.place, went=True)
        await look(limiter, t1[4].place, t1[4].tags)
        counters = {name: client.zscore(waiting, name) for name in ("t1", "t2")}
        # t2 comes back at 100 000, behind t1's 300 000: it is lifted to 300 000, and both may go (ties go).
        back = await limiter.check({}, 0, flow("t2", "k2", 100))
        go = [(await look(limiter, d.place, d.tags)).go for d in (t1[4], back)]
        lifted = client.zscore(waiting, "t2")
        await limiter.close()
        return counters, lifted, go

    counters, lifted, go = run(prefix, body)
    assert counters == {"t1": 300_000, "t2": None}
    assert lifted == 300_000 and go == [True, True]


def test_a_member_past_its_deadline_is_dropped_and_the_scan_reads_at_most_scan_members():
    prefix = f"test:{uuid.uuid4().hex}:"
    limiter = RequestLimiter(REDIS_URL, prefix=prefix)
    client = redis.Redis.from_url(REDIS_URL)

    async def body():
        gone = await limiter.check({}, 0, flow("t", "x", 10, wait_ms=1))  # its replica never takes it out
        await asyncio.sleep(0.01)
        many = [await limiter.check({}, 0, flow("t", "a", 10)) for _ in range(SCAN + 6)]
        limiter.order.forget(many[-1].place, went=True)  # a's last goes on and ends: its tenant's keys' time is its tag
        await limiter.settle(many[-1].reservation, 10, 0)
        late = await limiter.check({}, 0, flow("t", "b", 10))
        view = limiter.order.views[("fair:1:0", "t")]
        await limiter.close()
        return gone, many, late, view

    gone, many, late, view = run(prefix, body)
    # x (key tag 0) passed its deadline: the first read dropped it. a's 70 requests have key tags 0, 10 000, ...,
    # 690 000; the last went on. b, idle, starts at the keys' time, 690 000. The scan reads a's first 64 (0 to
    # 630 000) and stops: every other key is at least at 630 000, which is all a replica is told.
    assert client.zscore(f"{prefix}fair:1:0:q:t", gone.place.member) is None
    assert [d.tags.key for d in many[:2]] == [0, 10_000] and many[-1].tags.key == 690_000
    assert late.tags.key == 690_000
    assert view.keys == (("a", 0), ("", 630_000))
    assert not may_go(view, late.place, late.tags)  # a waits with 0
    assert may_go(view, many[63].place, many[63].tags)  # 630 000: within what was read
    assert not may_go(view, many[64].place, many[64].tags)  # 640 000: maybe behind b, so it waits


def test_seats_are_lent_by_a_head_that_may_not_go_and_move_only_to_a_head_that_may_which_is_claimed():
    prefix = f"test:{uuid.uuid4().hex}:"
    limiter = RequestLimiter(REDIS_URL, prefix=prefix)
    client = redis.Redis.from_url(REDIS_URL)

    async def body():
        a = [await limiter.check({}, 0, flow("t", "a", 100)) for _ in range(2)]  # key tags 0, 100 000
        b = await limiter.check({}, 0, flow("t", "b", 100))  # 0
        held = await look(limiter, a[1].place, a[1].tags, lend=2)  # behind b: its replica lends its 2 free seats
        pool = int(client.get(f"{prefix}seats:1"))
        refused = await look(limiter, a[1].place, a[1].tags, borrow=True)  # still behind b: no seat for it
        borrowed = await look(limiter, b.place, b.tags, borrow=True)  # b may go: it takes one, and is claimed
        b_out = client.zscore(f"{prefix}fair:1:0:q:t", b.place.member)
        limiter.order.forget(a[0].place, went=True)
        back = await look(limiter, a[1].place, a[1].tags, reclaim=2)  # nothing waits before a now: 1 seat is left
        room = await look(limiter, a[1].place, a[1].tags, room=True)  # a[1] was claimed: its place is gone
        served = int(client.hget(f"{prefix}fair:1:0", "s:t"))
        await limiter.close()
        return held, pool, refused, borrowed, b_out, back, int(client.get(f"{prefix}seats:1")), room, served

    held, pool, refused, borrowed, b_out, back, left, room, served = run(prefix, body)
    assert (held.go, held.lent, held.claimed, pool) == (False, 2, 0, 2)
    assert (refused.go, refused.borrowed, refused.claimed) == (False, 0, 0)
    assert (borrowed.go, borrowed.borrowed, borrowed.claimed, b_out) == (True, 1, 1, None)
    assert (back.go, back.taken, back.claimed, left) == (True, 1, 1, 0)
    assert served == 300_000  # b, a[0] and a[1], 100 each
    assert room.go and room.claimed  # a place already taken out: let go, and charged nothing more (served above)


def test_two_replicas_the_one_holding_only_the_flood_waits_and_lends_its_seat():
    """A service bound of 2 over 2 replicas: a seat each. Replica A holds only key f's requests, replica B key s's.
    f has been charged ahead of s: when A's seat frees, f's next may not go while s waits at B with a smaller
    tag, so A lends its seat and B's s goes on it; once s ends and gives the seat back, f goes."""
    prefix = f"test:{uuid.uuid4().hex}:"
    service = {"id": 1, "max_outstanding": 2}

    async def body():
        limiters = [RequestLimiter(REDIS_URL, prefix=prefix, replicas=2) for _ in range(2)]
        doors = [Door(replicas=2) for _ in range(2)]
        for door, limiter in zip(doors, limiters, strict=True):
            door.share_order(limiter.order)
        listening = [asyncio.ensure_future(limiter.order.listen()) for limiter in limiters]
        try:
            return await two_replicas(doors, limiters)
        finally:
            for task in listening:
                task.cancel()
            await asyncio.gather(*listening, return_exceptions=True)
            for limiter in limiters:
                await limiter.close()

    async def two_replicas(doors, limiters):
        await asyncio.sleep(0.05)  # subscribed
        a, b = doors
        f = [await limiters[0].check({}, 0, flow("t", "f", 100)) for _ in range(3)]  # f: 0, 100 000, 200 000
        assert await a.enter(service, 0, "t", f[0].tags, {}, place=f[0].place) is None  # A's seat
        assert await b.enter(service, 0, "t", None, {}) is None  # B's seat, taken before B saturated
        s = await limiters[1].check({}, 0, flow("t", "s", 100))  # s: 0, waits at B (no seat)
        f_next = asyncio.ensure_future(a.enter(service, 0, "t", f[1].tags, {}, place=f[1].place))
        s_meter: dict = {}
        s_next = asyncio.ensure_future(b.enter(service, 0, "t", s.tags, s_meter, place=s.place))
        await asyncio.sleep(0.05)
        assert not f_next.done() and not s_next.done()  # both replicas full
        a.leave(1, 0)  # f's first ends at A: its head f 100 000 is behind s 0 at B
        await asyncio.wait({s_next}, timeout=2)
        lent_then, f_waited, borrowed = a.services[1].lent, not f_next.done(), s_meter.get("borrowed")
        if s_next.done():
            b.leave(1, 0, borrowed)  # s ends on the borrowed seat, which goes back
        await asyncio.wait({f_next}, timeout=2)
        f_went = f_next.done()
        for waiting in (s_next, f_next):
            waiting.cancel()
        return lent_then, f_waited, borrowed, a.services[1].lent if f_went else None, a.services[1].outstanding

    lent_then, f_waited, borrowed, lent_after, outstanding = run(prefix, body)
    assert (lent_then, f_waited, borrowed) == (1, True, True)
    assert (lent_after, outstanding) == (0, 1)  # f's next went, on A's seat taken back


def test_a_replica_with_a_seat_free_charges_its_requests_while_another_replicas_wait():
    """A service bound of 2 over 2 replicas: a seat each. t2's request waits at replica B (its seat taken). Replica A
    has its seat free and nothing waiting, so a request there went straight on, out of the order, ahead of t2's.
    Once A has seen t2 waiting (the answer to a CHECK of its own), its next request is charged and waits its turn
    in the order instead; with nothing seen waiting, A's requests go straight on, as with one replica."""
    prefix = f"test:{uuid.uuid4().hex}:"
    service = {"id": 1, "max_outstanding": 2}

    async def body():
        limiters = [RequestLimiter(REDIS_URL, prefix=prefix, replicas=2) for _ in range(2)]
        a = Door(replicas=2)
        a.share_order(limiters[0].order)
        try:
            assert await a.enter(service, 0, "t1", None, {}) is None  # A's seat, nothing seen waiting
            a.leave(1, 0)
            before = a.saturated(service, 0)
            await limiters[1].check({}, 0, flow("t2", "k2", 100))  # t2 waits at B
            seen = await limiters[0].check({}, 0, flow("t1", "k1", 100))  # A's CHECK answers the band as it stands
            view = limiters[0].order.views[("fair:1:0", "t1")]
            return before, view.tenants, a.saturated(service, 0), seen.place is not None
        finally:
            for limiter in limiters:
                await limiter.close()

    before, tenants, after, placed = run(prefix, body)
    assert (before, tenants, after, placed) == (False, (("t1", 0), ("t2", 0)), True, True)  # served 0 each: a tie


def test_a_look_redis_fails_is_tried_again_and_only_after_the_longest_hold_goes_without_the_order():
    """Nothing listens where this limiter's Redis would be: every pipeline fails. A look with a seat free is not
    answered "go" at the first failure (its head would go out of turn, charged nothing): it is sent again, with
    the request taken out before it, until it has failed for HOLD_MAX_S; then its head goes without the order,
    marked so that the door takes it out of the order once Redis answers."""
    limiter = RequestLimiter("redis://127.0.0.1:9/0", prefix="test:down:")
    place = Place("fair:1:0", "t", "k", "t k 0 r1", 100_000)
    gone = Place("fair:1:0", "t", "k", "t k 0 r0", 100_000)

    async def body():
        limiter.order.forget(gone, went=True)
        verdict = await look(limiter, place, Tags(), room=True)
        trips, pending = limiter.order.trips, limiter.order.pending()
        await limiter.close()
        return verdict, trips, pending

    verdict, trips, pending = asyncio.run(body())
    assert (verdict.go, verdict.claimed, verdict.unordered) == (True, 1, 1)
    assert trips > 1  # sent again after the first failure
    assert pending  # the forget is kept for when Redis answers
