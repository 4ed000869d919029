"""The door's queue: while a service is saturated its requests wait here, in band order and fairly within a
band (gateway/fairness.py), each for at most its band's time-to-live, each band holding at most `cap`.

A service is saturated when the requests this replica has sent it and not yet seen end reach this replica's
share of the service's bound: the snapshot's `max_outstanding` (its ready engines times the requests each
engine runs at once, `max_num_seqs`) over the gateway replicas. A service without a bound is never
saturated: its requests go straight on, as they always did. A request that ends hands its place to the
next in line, so the order of service is the queue's, not the order of arrival.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field

from gateway.fairness import LOWEST_BAND, FairQueue, Tags

QUEUE_FULL, QUEUE_TIMEOUT = "queue_full", "queue_timeout"
UNCHARGED = Tags(2**62, 2**62)


# Spare capacity, which the lowest band (batch lines, best-effort) runs on: a quarter of a replica's share is kept
# for the higher bands, so an interactive request finds a place free rather than waiting for a batch line to end;
# and nothing starts in the lowest band while the snapshot shows the engines queueing or their KV cache this full.
HEADROOM_FRACTION = 4
KV_FULL = 0.9
# Nor while this replica's event loop runs late (its CPU taken): every request it carries would wait for it, the
# interactive ones included. The loop's lateness is looked at every LOOK_S; a late look counts at once, and its
# memory fades by half each look.
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

    def room(self, band: int) -> bool:
        """Whether one more request of `band` may go on now."""
        if self.asleep:
            return False
        if self.bound is None:
            return True
        if band > LOWEST_BAND:
            return self.outstanding < self.bound
        return (not self.busy_engines and not self.busy_gateway
                and self.outstanding < self.bound - self.bound // HEADROOM_FRACTION)


class Door:
    def __init__(self, *, replicas: int = 1, cap: int = 1000, ttl: float = 30.0, lowest_ttl: float = 600.0,
                 lowest_cap: int = 10_000, enabled: bool = True):
        self.replicas = max(1, replicas)
        self.cap, self.ttl, self.lowest_ttl, self.lowest_cap, self.enabled = cap, ttl, lowest_ttl, lowest_cap, enabled
        self.services: dict[int, _Service] = {}
        self.shed: dict[str, int] = {QUEUE_FULL: 0, QUEUE_TIMEOUT: 0}  # only grow

    def share(self, service: dict) -> int | None:
        """This replica's share of the service's bound, or None when it has none (or the queue is off)."""
        bound = service.get("max_outstanding")
        if not self.enabled or bound is None:
            return None
        return math.ceil(bound / self.replicas)

    def saturated(self, service: dict, band: int = LOWEST_BAND + 1) -> bool:
        """Whether a request of `band` would wait: the service has requests waiting, or no room for the band."""
        state = self.services.get(service["id"])
        if state is None or self.share(service) is None:
            return False
        self._observe(state, service)
        return bool(state.queue) or not state.room(band)

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
                    wake_ttl: float | None = None) -> str | None:
        """Wait for the service's turn: None once the request may go on (it then holds a place until `leave`),
        else why it was shed. Cancelled (its client left), it leaves the queue. With `wake_ttl` the service is
        asleep (gateway/activation.py): the request waits in the same queue until a snapshot shows it ready
        (`tick`), for at most `wake_ttl` seconds, the waiting room's time-to-live."""
        state = self.services.setdefault(service["id"], _Service())
        state.asleep = state.asleep or wake_ttl is not None
        self._observe(state, service)
        self._fill(state)
        if not state.queue and state.room(band):
            self._take(state, band)
            return None
        if state.queue.waiting(band) >= (self.lowest_cap if band <= LOWEST_BAND else self.cap):
            self.shed[QUEUE_FULL] += 1
            return QUEUE_FULL
        turn = asyncio.get_running_loop().create_future()
        # A request checked before the service saturated carries no tags: it waits behind those that do.
        state.queue.push(turn, band, tenant, tags if tags is not None else UNCHARGED)
        self._fill(state)  # a higher band than the lowest waiting may go on into the headroom at once
        if turn.done():
            return None
        started = time.monotonic()
        try:
            await asyncio.wait_for(turn, wake_ttl if wake_ttl is not None else self.band_ttl(band))
        except TimeoutError:
            state.queue.remove(turn)
            self.shed[QUEUE_TIMEOUT] += 1
            return QUEUE_TIMEOUT
        except asyncio.CancelledError:
            if not state.queue.remove(turn) and turn.done() and not turn.cancelled():
                self.leave(service["id"], band)  # its place was handed over as it left: passed on
            raise
        finally:
            meter["queued_s"] = time.monotonic() - started
        return None

    def leave(self, service_id: int, band: int) -> None:
        """A request of `band` let through has ended: its place goes to the next in line."""
        state = self.services.get(service_id)
        if state is None:
            return
        state.outstanding = max(0, state.outstanding - 1)
        if band <= LOWEST_BAND:
            state.lowest = max(0, state.lowest - 1)
        self._fill(state)

    @staticmethod
    def _take(state: _Service, band: int) -> None:
        state.outstanding += 1
        if band <= LOWEST_BAND:
            state.lowest += 1

    def _fill(self, state: _Service) -> None:
        # The highest band waiting goes first; the lowest band only onto spare capacity.
        while state.queue and state.room(state.queue.top_band()):
            band, turn = state.queue.top_band(), state.queue.pop()
            if not turn.done():
                self._take(state, band)
                turn.set_result(True)

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
