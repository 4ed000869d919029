"""Who is served next while a service is saturated: priority bands (higher first), and within a band
token-weighted virtual counters (VTC, "Fairness in Serving LLMs", OSDI 2024) per tenant and per key within
its tenant. Pure: no I/O and no clock. gateway/limits_lua.py keeps the same counters in Redis for every
replica (CHECK charges, SETTLE corrects); `VirtualCounters` is their in-memory twin while Redis is away;
gateway/door.py holds the waiting requests in a `FairQueue`.

A request's cost is its prompt tokens plus twice its output tokens. At admission an idle flow's counter (one
with no request charged and unsettled) is lifted to the band's virtual time (an idle flow banks no credit: the
share is work-conserving; a busy flow keeps its own counter, as VTC lifts only a client that joins the
queue), the request takes the counter as its start tag, and the counter advances by cost / weight; when the
request ends, the counter is corrected by the difference between the engine's usage and the estimate. The
queue serves the smallest start tag first: between tenants by tenant tags, then within the chosen tenant by
key tags.
"""

from __future__ import annotations

import bisect
import itertools
from collections import Counter
from dataclasses import dataclass, field

from gateway.batch_vocab import BATCH_PRIORITY
from gateway.validation import Invalid

DEFAULT_BAND = 0
LOWEST_BAND = -20
HIGHEST_BAND = 1000
# Both names are the lowest band: spare capacity, shared fairly between whoever is there.
BAND_NAMES = {BATCH_PRIORITY.decode(): LOWEST_BAND, "best-effort": LOWEST_BAND}
SCALE = 1000  # counters in thousandths of a token: dividing by a weight stays integer (Redis answers integers)
DEFAULT_WEIGHT = 1


def cost(prompt_tokens: int, output_tokens: int) -> int:
    """VTC's cost of a request: output tokens weigh twice as much as prompt tokens."""
    return max(0, int(prompt_tokens)) + 2 * max(0, int(output_tokens))


def band_of(key_priority: int, header: str | None) -> int:
    """The band a request runs in: its key's, or lower when `x-priority` asks (a name or an integer); a
    request never raises its band."""
    if header is None or header == "":
        return key_priority
    value = header.strip().lower()
    if value in BAND_NAMES:
        return min(key_priority, BAND_NAMES[value])
    try:
        asked = int(value)
    except ValueError:
        raise Invalid(f"x-priority must be one of {', '.join(BAND_NAMES)} or an integer band.",
                      param="x-priority") from None
    if asked > key_priority:
        raise Invalid(f"x-priority {asked} is above the key's band {key_priority}: a request may only lower it.",
                      param="x-priority")
    return max(asked, LOWEST_BAND)


def advance(counter: int, floor: int, amount: int, weight: int) -> tuple[int, int]:
    """(start tag, counter after) of a request costing `amount`: the counter lifted to `floor`, then advanced
    by amount / weight in SCALE units."""
    start = max(counter, floor)
    return start, start + amount * SCALE // max(1, weight)


@dataclass(frozen=True)
class Tags:
    """A request's start tags: its tenant's among tenants, its key's among its tenant's keys."""

    tenant: int = 0
    key: int = 0


class VirtualCounters:
    """The counters of one (service, band) in memory: what SETTLE and CHECK do in Redis, for a replica that
    cannot reach it. `virtual` is the band's virtual time (the largest tenant tag served), `keys_virtual` each
    tenant's (the largest key tag served)."""

    def __init__(self):
        self.tenants: dict[str, int] = {}
        self.keys: dict[str, int] = {}
        self.virtual = 0
        self.keys_virtual: dict[str, int] = {}
        self.busy: Counter = Counter()  # requests charged and not settled, by ("t", tenant) and ("k", key)

    def charge(self, tenant: str, key: str, amount: int, weight: int) -> Tags:
        tenant_tag, self.tenants[tenant] = advance(self.tenants.get(tenant, 0), self._floor(("t", tenant),
                                                   self.virtual), amount, weight)
        key_tag, self.keys[key] = advance(self.keys.get(key, 0), self._floor(("k", key),
                                          self.keys_virtual.get(tenant, 0)), amount, 1)
        return Tags(tenant_tag, key_tag)

    def _floor(self, flow: tuple[str, str], virtual: int) -> int:
        """The floor of a flow's counter: the virtual time while it is idle, none (0) while it is busy. A busy
        flow keeps its own counter, so a virtual time moved on by another replica's queue never resets it."""
        self.busy[flow] += 1
        return virtual if self.busy[flow] == 1 else 0

    def settle(self, tenant: str, key: str, delta: int, weight: int, tags: Tags) -> None:
        """The request has ended: its counters corrected by `delta` (cost used less cost estimated), and the
        virtual times moved up to its tags."""
        self.tenants[tenant] = self.tenants.get(tenant, 0) + delta * SCALE // max(1, weight)
        self.keys[key] = self.keys.get(key, 0) + delta * SCALE
        for flow in (("t", tenant), ("k", key)):
            self.busy[flow] -= 1
            if self.busy[flow] <= 0:
                del self.busy[flow]
        self.virtual = max(self.virtual, tags.tenant)
        self.keys_virtual[tenant] = max(self.keys_virtual.get(tenant, 0), tags.key)


@dataclass
class _Tenant:
    tags: list = field(default_factory=list)  # sorted (tenant tag, arrival)
    requests: list = field(default_factory=list)  # sorted (key tag, arrival, item)


class FairQueue:
    """Waiting requests of one service: the highest band first; within a band the tenant whose smallest
    pending tenant tag is smallest; within that tenant the request with the smallest key tag. Ties go by
    arrival."""

    def __init__(self):
        self._bands: dict[int, dict[str, _Tenant]] = {}
        self._where: dict[int, tuple[int, str, tuple]] = {}  # id(item) → (band, tenant, its request entry)
        self._arrival = itertools.count()

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, item) -> bool:
        return id(item) in self._where

    def waiting(self, band: int) -> int:
        return sum(len(t.requests) for t in self._bands.get(band, {}).values())

    def waits_from(self, band: int) -> bool:
        """Whether a request of `band` or a higher band waits."""
        return any(waiting >= band for waiting in self._bands)

    def counts(self) -> dict[tuple[int, str], int]:
        """Requests waiting per (band, tenant)."""
        return {(b, name): len(t.requests) for b, tenants in self._bands.items() for name, t in tenants.items()}

    def push(self, item, band: int, tenant: str, tags: Tags, place=None) -> None:
        """`place`: anything the caller wants back with the item from `peek` (its member in the shared order)."""
        arrival = next(self._arrival)
        flow = self._bands.setdefault(band, {}).setdefault(tenant, _Tenant())
        entry = (tags.key, arrival, id(item), item, place)
        bisect.insort(flow.tags, (tags.tenant, arrival))
        bisect.insort(flow.requests, entry)
        self._where[id(item)] = (band, tenant, entry)

    def top_band(self) -> int | None:
        """The band served next, or None when nothing waits."""
        return max(self._bands) if self._bands else None

    def _next(self, first: str | None) -> tuple[int, str]:
        band = max(self._bands)
        tenants = self._bands[band]
        if first in tenants:
            return band, first
        return band, min(tenants, key=lambda name: tenants[name].tags[0])

    def peek(self, first: str | None = None) -> tuple | None:
        """The next request to serve as (item, its tags, its place), or None: `first`'s if that tenant waits in the
        highest band (the band's first across replicas, gateway/order.py), else by the tags here. Its tenant tag is
        its tenant's least waiting one here: the tenant's place in line, which a request that leaves passes on."""
        if not self._bands:
            return None
        band, tenant = self._next(first)
        flow = self._bands[band][tenant]
        entry = flow.requests[0]
        return entry[3], Tags(flow.tags[0][0], entry[0]), entry[4]

    def pop(self, first: str | None = None):
        """The next request to serve (as `peek`), or None."""
        if not self._bands:
            return None
        band, tenant = self._next(first)
        flow = self._bands[band][tenant]
        flow.tags.pop(0)
        entry = flow.requests.pop(0)
        del self._where[id(entry[3])]
        self._prune(band, tenant)
        return entry[3]

    def remove(self, item) -> bool:
        """Take `item` out (timed out, or its client left); its tenant gives up its last place in line."""
        return self._out(item, -1)

    def take(self, item) -> bool:
        """Take `item` out as it goes on out of turn here (the shared order chose it, gateway/order.py); its tenant's
        first place in line goes with it, as with `pop`."""
        return self._out(item, 0)

    def _out(self, item, place: int) -> bool:
        where = self._where.pop(id(item), None)
        if where is None:
            return False
        band, tenant, entry = where
        flow = self._bands[band][tenant]
        flow.requests.remove(entry)
        flow.tags.pop(place)
        self._prune(band, tenant)
        return True

    def _prune(self, band: int, tenant: str) -> None:
        if not self._bands[band][tenant].requests:
            del self._bands[band][tenant]
            if not self._bands[band]:
                del self._bands[band]
