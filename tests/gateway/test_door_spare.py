"""The lowest band (batch lines, best-effort) runs only on spare capacity: below the headroom the door keeps for
the higher bands, and never while the snapshot shows the engines queueing or their KV cache nearly full."""

from __future__ import annotations

import asyncio

from gateway.door import Door
from gateway.fairness import LOWEST_BAND


async def settle_loop():
    for _ in range(3):
        await asyncio.sleep(0)


def test_the_lowest_band_leaves_a_quarter_of_the_share_to_the_higher_bands():
    door = Door()
    service = {"id": 1, "max_outstanding": 8}  # one replica: a share of 8, of which 8 // 4 = 2 kept free

    async def run():
        for _ in range(6):
            assert await door.enter(service, LOWEST_BAND, "t", None, {}) is None
        assert door.saturated(service, LOWEST_BAND) and not door.saturated(service, 0)
        seventh = asyncio.ensure_future(door.enter(service, LOWEST_BAND, "t", None, {}))
        await settle_loop()
        assert not seventh.done()  # waits: the last two places are the higher bands'
        # An interactive request arriving now does not wait behind it: it goes on at once, into the headroom. Only
        # the lowest band waits, so the service is not saturated for band 0: the request is not charged either.
        assert not door.saturated(service, 0)
        interactive = asyncio.ensure_future(door.enter(service, 0, "t", None, {}))
        await settle_loop()
        assert interactive.done() and interactive.result() is None
        door.leave(1, 0)  # the interactive one ends: 6 lowest outstanding, still no room below 6
        await settle_loop()
        assert not seventh.done()
        door.leave(1, LOWEST_BAND)  # a batch line ends: 5 outstanding, the waiting line goes on
        await settle_loop()
        assert seventh.done() and seventh.result() is None
        return door.services[1].outstanding, door.services[1].lowest

    assert asyncio.run(run()) == (6, 6)


def test_nothing_starts_in_the_lowest_band_while_the_engines_queue():
    door = Door()
    queueing = {"id": 1, "max_outstanding": 8, "engine_waiting": 3, "kv_usage": 0.4}
    calm = {**queueing, "engine_waiting": 0}
    full_kv = {**calm, "kv_usage": 0.95}

    async def run():
        line = asyncio.ensure_future(door.enter(queueing, LOWEST_BAND, "t", None, {}))
        await settle_loop()
        assert not line.done()
        # A band-0 request still goes: the engines' queue is the interactive load's to use.
        assert await door.enter(queueing, 0, "t", None, {}) is None
        door.tick(lambda service_id: full_kv)  # a new snapshot: no queue, but the KV cache 95% full
        await settle_loop()
        assert not line.done()
        door.tick(lambda service_id: calm)  # the next: room again, the line goes on
        await settle_loop()
        return line.done() and line.result() is None

    assert asyncio.run(run())


def test_nothing_starts_in_the_lowest_band_while_a_higher_band_request_waits_for_its_first_token():
    door = Door()
    service = {"id": 1, "max_outstanding": 8}

    async def run():
        assert await door.enter(service, 0, "t", None, {}) is None
        door.prefill(1)  # the interactive request is sent: its first token has not come back
        assert door.saturated(service, LOWEST_BAND) and not door.saturated(service, 0)
        line = asyncio.ensure_future(door.enter(service, LOWEST_BAND, "t", None, {}))
        await settle_loop()
        assert not line.done()  # 1 of 8 places taken, 6 free below the headroom: held only by the prefill
        door.prefilled(1)
        await settle_loop()
        return line.done() and line.result() is None, door.services[1].outstanding

    assert asyncio.run(run()) == (True, 2)
