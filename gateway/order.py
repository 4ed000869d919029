"""The shared order of a band across gateway replicas. Each replica holds its own queue (gateway/door.py), but
with more than one replica a queue's head may go on only when no other flow of its band waits anywhere before
it: the tenant tag it would carry, its tenant's least waiting one (a tenant's tags are its places in line, and a
request that goes on takes the least, wherever it waits: order_lua.LOOK), is the band's least, and its own key
tag is at most the least key tag of every other key of its tenant waiting anywhere (ties go). That is VTC's rule
(serve the least-served backlogged flow) across replicas.

What waits where is in Redis (gateway/order_lua.py): CHECK adds a charged request, and what a replica learns
comes back on round trips it makes anyway: the request's own CHECK, and the pipeline of settles, which also
carries the requests let go (`forget`), seats moved (`move`) and the looks (`look`) the door asks for. A replica
looks before each decision it takes from its queue (a view is `FRESH_S` old at most), so the request that ends
and the look at who goes next share one round trip. A head that may not go yet waits for a message: a replica
that lets a request go, or lends or gives back seats, publishes the band or the service on `<prefix>order`, and
a replica waiting on it looks again; at the latest after `POLL_S`. Those looks, and a pipeline that carries
nothing but the order, are this module's own round trips (`trips`), counted apart from the requests' two.

Work-conserving: a replica whose head may not go lends its free seats (its share of the service's bound) to a
pool in Redis, in the same look, and a replica whose head may go but has no seat borrows one; a seat moves only
to a head that may go, decided in the script. The borrower gives it back when its request ends, and the lender
takes its seats back once its own head may go. So the engines stay busy while the order is kept. Lost messages
are covered by `POLL_S`, a replica gone by the members' deadlines and the door's longest hold.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis

from gateway.fairness import Tags

log = logging.getLogger("gateway.order")
FRESH_S = 0.005  # a view older than this is looked at again before the door decides by it
POLL_S = 0.05  # a head that may not go yet is looked at again at least this often
DEADLINE_MARGIN_S = 5.0  # a member outlives its request's time-to-live by this much before anyone drops it


@dataclass(frozen=True)
class Place:
    """A charged request's member in its band's waiting sets."""

    counters: str  # "fair:<service>:<band>", the band's counters' name without the prefix
    tenant: str
    key: str
    member: str


@dataclass(frozen=True)
class View:
    """The two least tenants of a band and the two least keys of one tenant, each (flow, least tag); a flow of
    '' is "every other flow is at least here"; no entry, no such flow."""

    tenants: tuple
    keys: tuple
    seen: float


def view_of(values: list, seen: float) -> View:
    """A View from a TOP pair's 8 values (order_lua.TOP, twice)."""
    def pairs(four):
        flows = [(_text(four[i]), int(four[i + 1])) for i in (0, 2)]
        return tuple((flow, tag) for flow, tag in flows if tag >= 0)
    return View(pairs(values[:4]), pairs(values[4:8]), seen)


def least_other(pairs: tuple, me: str) -> int | None:
    """The least tag of a flow other than `me`, or None when no other flow waits."""
    return next((tag for flow, tag in pairs if flow != me), None)


def may_go(view: View, place: Place, tags: Tags) -> bool:
    """Whether a request may go on: its tenant's least waiting tag is the band's least (no other tenant waits
    with a smaller one), and no other key of its tenant waits with a key tag smaller than its own."""
    tenants = view.tenants
    first = not tenants or tenants[0][0] == place.tenant or any(
        flow == place.tenant and tag <= tenants[0][1] for flow, tag in tenants[1:])
    key = least_other(view.keys, place.key)
    return first and (key is None or tags.key <= key)


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass
class _Look:
    place: Place
    tags: Tags
    then: Callable  # called with a Verdict
    borrow: bool
    reclaim: int
    lend: int


@dataclass(frozen=True)
class Verdict:
    """A look's answer for a head: whether it may go, and seats moved to its replica (borrowed, taken back)."""

    go: bool
    borrowed: int = 0
    taken: int = 0
    lent: int = 0


class SharedOrder:
    def __init__(self, client, prefix: str, trip: Callable[[], None]):
        self.client, self.prefix = client, prefix
        self.channel = f"{prefix}order"
        self._trip = trip  # asks the limiter for a pipeline soon (gateway/limits.py)
        self.views: dict[tuple[str, str], View] = {}  # (counters, tenant) → what Redis last said
        self.firsts: dict[str, str] = {}  # counters → the band's first tenant (least waiting tag), as last seen
        self._forgets: list[tuple[Place, bool]] = []  # (place, went on)
        self._moves: list[tuple[int, int]] = []  # (service, seats lent or given back)
        self._looks: list[_Look] = []
        self._held: dict[str, _Look] = {}  # counters → the look held for a message or POLL_S
        self.on_seats: Callable[[int], None] | None = None  # told when a service's seats were lent or given back
        self.trips = 0  # round trips of the order's own (a look alone, a pipeline of forgets alone)

    def saw(self, place: Place, values: list) -> None:
        """CHECK's answer for a request it charged: the band as it stood then."""
        self._saw(place.counters, place.tenant, view_of(values, time.monotonic()))

    def _saw(self, counters: str, tenant: str, view: View) -> None:
        self.views[(counters, tenant)] = view
        if view.tenants:
            self.firsts[counters] = view.tenants[0][0]
        else:
            self.firsts.pop(counters, None)

    def first(self, service_id: int, band: int) -> str | None:
        """The band's first tenant across the replicas as last seen: the door serves it first if it waits here, so
        that a head the order holds does not keep the band's first tenant waiting behind it."""
        return self.firsts.get(f"fair:{service_id}:{band}")

    def allows(self, place: Place, tags: Tags) -> bool | None:
        """Whether the request at `place` may go on now; None when the view is too old to say."""
        view = self.views.get((place.counters, place.tenant))
        if view is None or time.monotonic() - view.seen > FRESH_S:
            return None
        return may_go(view, place, tags)

    def forget(self, place: Place, *, went: bool) -> None:
        """The request has gone on (`went`: it takes its tenant's least tag, order_lua.LOOK), been shed or lost its
        client (it gives up its tenant's greatest): out of the sets with the next pipeline. Once one has gone on,
        its tenant's view here is stale: the next head of that tenant is looked at, after this forget."""
        self._forgets.append((place, went))
        if went:
            self.views.pop((place.counters, place.tenant), None)
        self._trip()

    def move(self, service_id: int, seats: int) -> None:
        """Seats of the service lent (or given back, > 0) to the replicas, or taken (< 0), with the next pipeline."""
        self._moves.append((service_id, seats))
        self._trip()

    def look(self, place: Place, tags: Tags, then: Callable, *, held: bool, borrow: bool = False,
             reclaim: int = 0, lend: int = 0) -> None:
        """Call `then(Verdict)` once the head at `place` has been looked at: at once, or, `held` (it was told to
        wait), when another replica lets a request of the band go or gives seats back, or after POLL_S. With
        `borrow` the head takes a lent seat if it may go and one is free; with `reclaim` its replica takes back
        up to that many of the seats it lent; with `lend` it lends that many free seats if the head may not go."""
        look = _Look(place, tags, then, borrow, reclaim, lend)
        if not held:
            self._looks.append(look)
            self._trip()
            return
        self._held[place.counters] = look
        asyncio.get_running_loop().call_later(POLL_S, self._wake, place.counters, look)

    def hurry(self, counters: str) -> None:
        """The band's head here changed (a request came): a look held for it goes now."""
        if counters in self._held:
            self._wake(counters)

    def _wake(self, counters: str, look: _Look | None = None) -> None:
        if look is None or self._held.get(counters) is look:
            self._looks.append(self._held.pop(counters))
            self._trip()

    def pending(self) -> bool:
        return bool(self._forgets or self._moves or self._looks)

    def board(self) -> tuple[list, list, list] | None:
        """The LOOK script's keys and args for what is pending, and the looks it answers (taken off the list)."""
        if not self.pending():
            return None
        forgets, moves, looks = self._forgets, self._moves, self._looks
        self._forgets, self._moves, self._looks = [], [], []
        keys, args = [], [self.channel, len(forgets), len(moves)]
        for place, went in forgets:
            keys += self.sets(place.counters, place.tenant)
            args += [place.member, int(went)]
        for service_id, seats in moves:
            keys.append(self.seats(service_id))
            args.append(seats)
        for look in looks:
            keys += [*self.sets(look.place.counters, look.place.tenant), self.seats(service_of(look.place))]
            args += [look.place.tenant, look.place.key, look.tags.tenant, look.tags.key, int(look.borrow),
                     look.reclaim, look.lend]
        return keys, args, looks

    def landed(self, looks: list, answer: list | None) -> None:
        """The LOOK script's answer (None when Redis failed: the order is then not held, as with no Redis)."""
        seen = time.monotonic()
        verdicts = []
        for i, look in enumerate(looks):
            values = answer[12 * i:12 * i + 12] if answer is not None else None
            self._saw(look.place.counters, look.place.tenant,
                      view_of(values, seen) if values is not None else View((), (), seen))
            verdicts.append(Verdict(*(int(v) for v in values[8:12])) if values is not None else Verdict(True))
        for look, verdict in zip(looks, verdicts, strict=True):
            look.then(verdict)

    def sets(self, counters: str, tenant: str) -> list[str]:
        base = f"{self.prefix}{counters}:w"
        return [base, f"{base}:{tenant}"]

    def seats(self, service_id: int) -> str:
        return f"{self.prefix}seats:{service_id}"

    def _moved(self, name: str) -> None:
        """Another replica let a band's request go (`<counters>:w`) or lent or gave back a service's seats."""
        name = name[len(self.prefix):]
        if name.startswith("seats:"):
            service = name.removeprefix("seats:")
            for counters in [c for c in self._held if c.split(":")[1] == service]:
                self._wake(counters)
            if self.on_seats is not None:
                self.on_seats(int(service))
        elif name.removesuffix(":w") in self._held:
            self._wake(name.removesuffix(":w"))

    async def listen(self) -> None:
        """Runs for the app's life: what other replicas moved wakes the heads held here."""
        while True:
            pubsub = self.client.pubsub()
            try:
                await pubsub.subscribe(self.channel)
                async for message in pubsub.listen():
                    if message.get("type") == "message":
                        self._moved(_text(message["data"]))
            except redis.RedisError as exc:
                log.warning("the order's channel failed (%s): heads held are looked at every %s s", exc, POLL_S)
                await asyncio.sleep(1.0)
            finally:
                await pubsub.aclose()


def service_of(place: Place) -> int:
    return int(place.counters.split(":")[1])
