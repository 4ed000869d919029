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


@dataclass
class _Service:
    bound: int | None = None
    outstanding: int = 0
    queue: FairQueue = field(default_factory=FairQueue)


class Door:
    def __init__(self, *, replicas: int = 1, cap: int = 1000, ttl: float = 30.0, lowest_ttl: float = 600.0,
                 enabled: bool = True):
        self.replicas = max(1, replicas)
        self.cap, self.ttl, self.lowest_ttl, self.enabled = cap, ttl, lowest_ttl, enabled
        self.services: dict[int, _Service] = {}
        self.shed: dict[str, int] = {QUEUE_FULL: 0, QUEUE_TIMEOUT: 0}  # only grow

    def share(self, service: dict) -> int | None:
        """This replica's share of the service's bound, or None when it has none (or the queue is off)."""
        bound = service.get("max_outstanding")
        if not self.enabled or bound is None:
            return None
        return math.ceil(bound / self.replicas)

    def saturated(self, service: dict) -> bool:
        """Whether the service is at this replica's share of its bound, or has requests waiting."""
        state = self.services.get(service["id"])
        bound = self.share(service)
        return bound is not None and state is not None and (state.outstanding >= bound or bool(state.queue))

    def band_ttl(self, band: int) -> float:
        return self.lowest_ttl if band <= LOWEST_BAND else self.ttl

    async def enter(self, service: dict, band: int, tenant: str, tags: Tags | None, meter: dict) -> str | None:
        """Wait for the service's turn: None once the request may go on (it then holds a place until `leave`),
        else why it was shed. Cancelled (its client left), it leaves the queue."""
        state = self.services.setdefault(service["id"], _Service())
        state.bound = self.share(service)
        self._fill(state)
        if state.bound is None or (state.outstanding < state.bound and not state.queue):
            state.outstanding += 1
            return None
        if state.queue.waiting(band) >= self.cap:
            self.shed[QUEUE_FULL] += 1
            return QUEUE_FULL
        turn = asyncio.get_running_loop().create_future()
        # A request checked before the service saturated carries no tags: it waits behind those that do.
        state.queue.push(turn, band, tenant, tags if tags is not None else UNCHARGED)
        started = time.monotonic()
        try:
            await asyncio.wait_for(turn, self.band_ttl(band))
        except TimeoutError:
            state.queue.remove(turn)
            self.shed[QUEUE_TIMEOUT] += 1
            return QUEUE_TIMEOUT
        except asyncio.CancelledError:
            if not state.queue.remove(turn) and turn.done() and not turn.cancelled():
                self.leave(service["id"])  # its place was handed over as it left: passed on
            raise
        finally:
            meter["queued_s"] = time.monotonic() - started
        return None

    def leave(self, service_id: int) -> None:
        """A request let through has ended: its place goes to the next in line."""
        state = self.services.get(service_id)
        if state is None:
            return
        state.outstanding = max(0, state.outstanding - 1)
        self._fill(state)

    def _fill(self, state: _Service) -> None:
        while state.queue and (state.bound is None or state.outstanding < state.bound):
            turn = state.queue.pop()
            if not turn.done():
                state.outstanding += 1
                turn.set_result(True)

    def waiting(self) -> dict[tuple[int, int, str], int]:
        """Requests waiting per (service, band, tenant)."""
        return {(sid, band, tenant): n for sid, state in self.services.items()
                for (band, tenant), n in state.queue.counts().items()}
