"""The door's queue: while a service is saturated its requests wait here, in band order and fairly within a
band (gateway/fairness.py), each for at most its band's time-to-live, each band holding at most `cap`.

A service is saturated when the requests this replica has sent it and not yet seen end reach this replica's
share of the service's bound: the snapshot's `max_outstanding` (its ready engines times the requests each
engine runs at once, `max_num_seqs`) over the gateway replicas. A service without a bound is never
saturated: its requests go straight on, as they always did. A request that ends hands its place to the
next in line, so the order of service is the queue's, not the order of arrival.

With more than one replica, a head charged in Redis goes on only when the band's shared order claims it
(gateway/order.py): its tenant is the least served of those waiting at any replica, and it has a seat. While a
request of the band waits at another replica, a request here is charged and waits its turn too, even with a seat
free. A head held so waits at most HOLD_MAX_S, then goes anyway: a replica gone without taking its requests out of
the order cannot stop the others.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field

from gateway.fairness import LOWEST_BAND, FairQueue, Tags
from gateway.order import HOLD_MAX_S, Seats

QUEUE_FULL, QUEUE_TIMEOUT = "queue_full", "queue_timeout"
UNCHARGED = Tags(2**62, 2**62)


# Spare capacity, which the lowest band (batch lines, best-effort) runs on: a quarter of a replica's share is kept
# for the higher bands, so an interactive request finds a place free rather than waiting for a batch line to end;
# and nothing starts in the lowest band while the snapshot shows the engines queueing or their KV cache this full.
HEADROOM_FRACTION = 4
KV_FULL = 0.9
# Nor while this replica's event loop runs late (its CPU taken): every request it carries would wait for it, the
# interactive ones included. Nor while a higher-band request let through here waits for its first token: a batch
# line started then would share the engine's next steps, and this replica's CPU, with that request's prefill.
# The loop's lateness is looked at every LOOK_S; a late look counts at once, and its memory fades by half each look.
LOOK_S = 0.01
LATE_S = 0.003


@dataclass
class _Service:
    bound: int | None = None
    outstanding: int = 0
    lowest: int = 0  # of those outstanding, the lowest band's
    busy_engines: bool = False  # the snapshot's engines queue or their KV cache is full
    busy_gateway: bool = False  # this replica's event loop runs late
    asleep: bool = False  # a service to wake, with no ready engine: its requests wait in the waiting room
    queue: FairQueue = field(default_factory=FairQueue)
    sid: int = 0
    looking: bool = False  # the shared order is being looked at for the head
    held_since: float | None = None  # when the shared order first held the present head back
    lent: int = 0  # seats of this replica's share lent to the other replicas (gateway/order.py)
    borrowed: int = 0  # of those outstanding, on seats borrowed from another replica
    offered: bool = False  # another replica lent or gave back seats since this one last tried to borrow
    prefilling: int = 0  # higher-band requests let through whose first token has not come back yet

    def room(self, band: int) -> bool:
        """Whether one more request of `band` may go on now."""
        if self.asleep:
            return False
        if self.bound is None:
            return True
        used = self.outstanding - self.borrowed + self.lent  # this replica's own seats in use or lent
        if band > LOWEST_BAND:
            return used < self.bound
        return (not self.busy_engines and not self.busy_gateway and not self.prefilling
                and used < self.bound - self.bound // HEADROOM_FRACTION)

    def free(self, band: int) -> int:
        """Seats of this replica's share a request of `band` could take now."""
        if not self.room(band):
            return 0
        top = self.bound if band > LOWEST_BAND else self.bound - self.bound // HEADROOM_FRACTION
        return top - (self.outstanding - self.borrowed + self.lent)


class Door:
    def __init__(self, *, replicas: int = 1, cap: int = 1000, ttl: float = 30.0, lowest_ttl: float = 600.0,
                 lowest_cap: int = 10_000, enabled: bool = True):
        self.replicas = max(1, replicas)
        self.cap, self.ttl, self.lowest_ttl, self.lowest_cap, self.enabled = cap, ttl, lowest_ttl, lowest_cap, enabled
        self.services: dict[int, _Service] = {}
        self.shed: dict[str, int] = {QUEUE_FULL: 0, QUEUE_TIMEOUT: 0}  # only grow
        self.order = None  # gateway.order.SharedOrder, with more than one replica and Redis (`share_order`)
        # The shared order's decisions here (only grow): heads looked at, held back, let go after HOLD_MAX_S; seats
        # lent and borrowed.
        self.held = {"looks": 0, "holds": 0, "overridden": 0, "lent": 0, "borrowed": 0}

    def share_order(self, order) -> None:
        """Hold the queues' heads to `order`, the band's order across the replicas."""
        self.order = order
        order.on_seats = self._offered

    def _offered(self, service_id: int) -> None:
        state = self.services.get(service_id)
        if state is not None and state.queue:
            state.offered = True
            self._fill(state)

    def share(self, service: dict) -> int | None:
        """This replica's share of the service's bound, or None when it has none (or the queue is off)."""
        bound = service.get("max_outstanding")
        if not self.enabled or bound is None:
            return None
        return math.ceil(bound / self.replicas)

    def saturated(self, service: dict, band: int = LOWEST_BAND + 1) -> bool:
        """Whether a request of `band` would wait: requests of its band or a higher one wait (here, or at another
        replica in the band's shared order), or it has no room. Lower bands waiting do not make it wait: it goes into
        the room they leave (and costs no fair-share charge)."""
        state = self.services.get(service["id"])
        if state is None or self.share(service) is None:
            return False
        self._observe(state, service)
        return state.queue.waits_from(band) or not state.room(band) or self._waits_elsewhere(state, band)

    def _waits_elsewhere(self, state: _Service, band: int) -> bool:
        """Whether a request of the band waits at another replica, as this one last saw the shared order: a request
        here then takes its turn in the order too, rather than a seat this replica happens to have free."""
        return self.order is not None and self.order.first(state.sid, band) is not None

    def spare(self, service: dict) -> bool:
        """Whether the service has spare capacity at this replica: room for a lowest-band request."""
        return not self.saturated(service, LOWEST_BAND)

    def _observe(self, state: _Service, service: dict) -> None:
        state.asleep = state.asleep and not (service.get("ready_engines") and service.get("endpoints"))
        state.bound = self.share(service)
        state.busy_engines = bool(service.get("engine_waiting")) or (service.get("kv_usage") or 0) >= KV_FULL

    def load(self, service_id: int) -> int:
        """Requests of the service at this replica: let through and not ended, and waiting."""
        state = self.services.get(service_id)
        return 0 if state is None else state.outstanding + len(state.queue)

    def band_ttl(self, band: int) -> float:
        return self.lowest_ttl if band <= LOWEST_BAND else self.ttl

    async def enter(self, service: dict, band: int, tenant: str, tags: Tags | None, meter: dict, *,
                    wake_ttl: float | None = None, place=None) -> str | None:
        """Wait for the service's turn: None once the request may go on (it then holds a place until `leave`),
        else why it was shed. Cancelled (its client left), it leaves the queue. With `wake_ttl` the service is
        asleep (gateway/activation.py): the request waits in the same queue until a snapshot shows it ready
        (`tick`), for at most `wake_ttl` seconds, the waiting room's time-to-live. `place`: the request's member in
        its band's shared order (gateway/order.py), which it leaves however it leaves the queue."""
        state = self.services.setdefault(service["id"], _Service(sid=service["id"]))
        state.asleep = state.asleep or wake_ttl is not None
        self._observe(state, service)
        self._fill(state)
        if self.order is None:
            place = None
        if not state.queue.waits_from(band) and state.room(band) and place is None:
            self._take(state, band)
            return None
        if state.queue.waiting(band) >= (self.lowest_cap if band <= LOWEST_BAND else self.cap):
            self.shed[QUEUE_FULL] += 1
            self._forget(place)
            return QUEUE_FULL
        turn = asyncio.get_running_loop().create_future()
        # A request checked before the service saturated carries no tags: it waits behind those that do.
        state.queue.push(turn, band, tenant, tags if tags is not None else UNCHARGED, place)
        self._fill(state)  # a higher band than the lowest waiting may go on into the headroom at once
        if place is not None and state.looking and state.queue.peek()[0] is turn:
            self.order.hurry(place.counters)  # a look held for the head before this one: this one may go
        if turn.done():
            meter["borrowed"] = turn.result()
            return None
        started = time.monotonic()
        try:
            meter["borrowed"] = await asyncio.wait_for(turn, wake_ttl if wake_ttl is not None else self.band_ttl(band))
        except TimeoutError:
            if state.queue.remove(turn):
                self._forget(place)
            self.shed[QUEUE_TIMEOUT] += 1
            return QUEUE_TIMEOUT
        except asyncio.CancelledError:
            if state.queue.remove(turn):
                self._forget(place)
            elif turn.done() and not turn.cancelled():
                self.leave(service["id"], band, turn.result())  # its place was handed over as it left: passed on
            raise
        finally:
            meter["queued_s"] = time.monotonic() - started
        return None

    def prefill(self, service_id: int) -> None:
        """A higher-band request let through is waiting for its first token: nothing starts in the lowest band
        until it comes (`prefilled`)."""
        if (state := self.services.get(service_id)) is not None:
            state.prefilling += 1

    def prefilled(self, service_id: int) -> None:
        """Its first token came (or it ended without one)."""
        if (state := self.services.get(service_id)) is not None:
            state.prefilling = max(0, state.prefilling - 1)
            self._fill(state)

    def leave(self, service_id: int, band: int, borrowed: bool = False) -> None:
        """A request of `band` let through has ended: its place goes to the next in line (a borrowed seat back to
        the replicas)."""
        state = self.services.get(service_id)
        if state is None:
            return
        state.outstanding = max(0, state.outstanding - 1)
        if borrowed and state.borrowed > 0:
            state.borrowed -= 1
            self.order.move(service_id, 1)
        if band <= LOWEST_BAND:
            state.lowest = max(0, state.lowest - 1)
        self._fill(state)

    @staticmethod
    def _take(state: _Service, band: int, borrowed: bool = False) -> None:
        state.outstanding += 1
        state.borrowed += borrowed
        if band <= LOWEST_BAND:
            state.lowest += 1

    def _forget(self, place, went: bool = False) -> None:
        if place is not None and self.order is not None:
            self.order.forget(place, went=went)

    def _fill(self, state: _Service) -> None:
        # The highest band waiting goes first; the lowest band only onto spare capacity; with more than one
        # replica, a charged head only when the band's shared order claims it (`_may_go`).
        while state.queue:
            band = state.queue.top_band()
            first = self.order.first(state.sid, band) if self.order is not None else None
            turn, tags, place = state.queue.peek(first)
            if place is not None and not turn.done():
                if not self._may_go(state, band, turn, place, tags):
                    return
            elif not state.room(band):
                return
            self._go(state, band, first=first)

    def _go(self, state: _Service, band: int, borrowed: bool = False, first: str | None = None) -> None:
        turn, _, place = state.queue.peek(first)
        state.queue.pop(first)
        state.held_since = None
        self._forget(place, went=not turn.done())
        if not turn.done():
            self._take(state, band, borrowed)
            turn.set_result(borrowed)
        elif borrowed:
            self.order.move(state.sid, 1)  # the head left as its seat came: the seat goes back

    def _claimed(self, state: _Service, band: int, turn, borrowed: bool, place=None) -> None:
        """The shared order claimed the request `turn` (gateway/order.py): it goes on, on a seat of this replica's or
        on one borrowed. Out of the order already, it is not forgotten (unless `place`: let go while Redis failed,
        it is taken out once Redis has it); one that left meanwhile gives the seat back."""
        if state.queue.take(turn):
            state.held_since = None
            self._forget(place, went=not turn.done())
            if not turn.done():
                self._take(state, band, borrowed)
                turn.set_result(borrowed)
                return
        if borrowed:
            self.order.move(state.sid, 1)

    def _may_go(self, state: _Service, band: int, turn, place, tags: Tags) -> bool:
        """Whether the head goes on now without the shared order: only once it has been held back HOLD_MAX_S.
        Otherwise it is looked at, and goes on when the look claims it (it may go and has a seat: this replica's,
        or one borrowed or taken back). A view that says wait holds it without a look: this replica lends its free
        seats and the head is looked at again once another replica moves (a message) or after POLL_S; with no
        free seat, the look borrows one lent by another replica, or takes back the seats this one lent."""
        if state.looking:
            return False
        if state.lent and state.held_since and time.monotonic() - state.held_since >= HOLD_MAX_S:
            self.order.move(state.sid, -state.lent)  # held too long: the seats lent come back, free or not
            state.lent = 0
        room = state.room(band)
        verdict = self.order.allows(place, tags) if room else None
        held = verdict is False or (not room and state.lent > 0)
        if verdict is False:
            now = time.monotonic()
            state.held_since = state.held_since or now
            if now - state.held_since >= HOLD_MAX_S:
                self.held["overridden"] += 1
                return True
            self.held["holds"] += 1
            if (free := state.free(band)) > 0 and band > LOWEST_BAND:
                state.lent += free
                self.held["lent"] += free
                self.order.move(state.sid, free)
        elif not room and not held:
            if not state.offered or band <= LOWEST_BAND or state.asleep or state.bound is None:
                return False
            state.offered = False
        self.held["looks"] += 1

        def seats() -> Seats:  # asked as the look is sent: the replica as it stands then
            room = state.room(band)
            return Seats(borrow=not room and state.lent == 0, reclaim=state.lent if not room else 0,
                         lend=state.free(band) if room and band > LOWEST_BAND else 0, room=room)

        def looked(answer) -> None:
            state.looking = False
            state.lent += answer.lent - answer.taken
            self.held["lent"] += answer.lent
            self.held["borrowed"] += answer.borrowed
            if answer.claimed:
                self._claimed(state, band, turn, bool(answer.borrowed), place if answer.unordered else None)
            elif answer.borrowed:
                self.order.move(state.sid, 1)
            self._fill(state)

        state.looking = True
        self.order.look(place, tags, looked, held=held, seats=seats)
        return False

    async def watch_loop(self) -> None:
        """Runs for the app's life: how late the event loop is, and the lowest band held while it is late."""
        late = 0.0
        while True:
            started = time.monotonic()
            await asyncio.sleep(LOOK_S)
            late = max(time.monotonic() - started - LOOK_S, late / 2)
            for state in self.services.values():
                state.busy_gateway = late > LATE_S
                if state.queue and not state.busy_gateway:
                    self._fill(state)

    def tick(self, lookup) -> None:
        """Each service's bound and engine signals from the snapshot `lookup(service id)` reads, and its waiting
        requests let on where there is room now (the engines may have stopped queueing): called by the app at
        each look at the snapshot."""
        for service_id, state in list(self.services.items()):
            service = lookup(service_id)
            if service is not None and state.queue:
                self._observe(state, service)
                self._fill(state)

    def waiting(self) -> dict[tuple[int, int, str], int]:
        """Requests waiting per (service, band, tenant)."""
        return {(sid, band, tenant): n for sid, state in self.services.items()
                for (band, tenant), n in state.queue.counts().items()}
