"""The shared order of a band across gateway replicas. Each replica holds its own queue (gateway/door.py), but
with more than one replica a queue's head goes on only when the band's order in Redis lets it: its tenant's served
counter (VTC's: the cost served to the tenant, at every replica, over its weight) is the least of the tenants
waiting anywhere, and its own key tag is at most the least key tag of every other key of its tenant waiting
anywhere (ties go). That is VTC's rule (serve the least-served backlogged flow) across replicas. The decision and
its charge are one script (order_lua.LOOK): a head that may go and has a seat is claimed there, out of the order
with its tenant's counter advanced, before any other replica looks.

What waits where is in Redis (gateway/order_lua.py): CHECK adds a charged request, and what a replica learns
comes back on round trips it makes anyway: the request's own CHECK, and the pipeline of settles, which also
carries the requests let go without a claim or dropped (`forget`), seats moved (`move`) and the looks (`look`)
the door asks for. A replica looks before each head it lets go, so the request that ends and the claim of the
next share one round trip. A head that may not go yet waits for a message: a replica that lets a request go, or
lends or gives back seats, publishes the band or the service on `<prefix>order`, and a replica waiting on it looks
again; at the latest after `POLL_S`. A view at most `FRESH_S` old that says wait holds a head without a look.
Those looks, and a pipeline that carries nothing but the order, are this module's own round trips (`trips`),
counted apart from the requests' two.

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
HOLD_MAX_S = 2.0  # the longest a head waits for the order (gateway/door.py); a look Redis fails is retried that long


@dataclass(frozen=True)
class Place:
    """A charged request's member in its band's waiting sets."""

    counters: str  # "fair:<service>:<band>", the band's counters' name without the prefix
    tenant: str
    key: str
    member: str
    amount: int = 0  # its estimated cost over its tenant's weight (SCALE units): what its tenant is served going on


@dataclass(frozen=True)
class View:
    """The two least tenants of a band, each (tenant, served counter), and the two least keys of one tenant, each
    (key, least key tag); a flow of '' is "every other flow is at least here"; no entry, no such flow."""

    tenants: tuple
    keys: tuple
    seen: float


def view_of(values: list, seen: float) -> View:
    """A View from 8 values: the band's FIRSTS and the tenant's TOP (order_lua)."""
    def pairs(four):
        flows = [(_text(four[i]), int(four[i + 1])) for i in (0, 2)]
        return tuple((flow, tag) for flow, tag in flows if tag >= 0)
    return View(pairs(values[:4]), pairs(values[4:8]), seen)


def least_other(pairs: tuple, me: str) -> int | None:
    """The least tag of a flow other than `me`, or None when no other flow waits."""
    return next((tag for flow, tag in pairs if flow != me), None)


def may_go(view: View, place: Place, tags: Tags) -> bool:
    """Whether a request may go on: its tenant's served counter is the band's least (no other tenant waits with a
    smaller one), and no other key of its tenant waits with a key tag smaller than its own."""
    tenants = view.tenants
    first = not tenants or tenants[0][0] == place.tenant or any(
        flow == place.tenant and tag <= tenants[0][1] for flow, tag in tenants[1:])
    key = least_other(view.keys, place.key)
    return first and (key is None or tags.key <= key)


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(frozen=True)
class Seats:
    """What a look asks of the service's seats, as its replica stands when the look is sent: borrow a lent seat if
    the head may go, take back up to `reclaim` seats it lent, lend `lend` free seats if the head may not go;
    `room`: the replica has a seat of its own free for the head."""

    borrow: bool = False
    reclaim: int = 0
    lend: int = 0
    room: bool = False


@dataclass
class _Look:
    place: Place
    tags: Tags
    then: Callable  # called with a Verdict
    seats: Callable[[], Seats]  # asked when the look is sent
    failed: float | None = None  # when Redis first failed to answer it


@dataclass(frozen=True)
class Verdict:
    """A look's answer for a head: whether it may go, seats moved to its replica (borrowed, taken back, lent), and
    whether it was claimed (it may go and has a seat: it is out of the order, its tenant charged; it goes on)."""

    go: bool
    borrowed: int = 0
    taken: int = 0
    lent: int = 0
    claimed: int = 0
    unordered: int = 0  # Redis failed the look for HOLD_MAX_S: the head goes without the order, forgotten after


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
        """The request has gone on without a claim (`went`: let go after the door's longest hold; its tenant's
        served counter advances), been shed or lost its client: out of the sets with the next pipeline. Once one
        has gone on, its tenant's view here is stale: the next head of that tenant is looked at, after this
        forget."""
        self._forgets.append((place, went))
        if went:
            self.views.pop((place.counters, place.tenant), None)
        self._trip()

    def move(self, service_id: int, seats: int) -> None:
        """Seats of the service lent (or given back, > 0) to the replicas, or taken (< 0), with the next pipeline."""
        self._moves.append((service_id, seats))
        self._trip()

    def look(self, place: Place, tags: Tags, then: Callable, *, held: bool,
             seats: Callable[[], Seats] = Seats) -> None:
        """Call `then(Verdict)` once the head at `place` has been looked at: at once, or, `held` (it was told to
        wait), when another replica lets a request of the band go or gives seats back, or after POLL_S. `seats()`,
        asked when the look is sent, says what it asks of the seats (`Seats`); a head that may go and has a seat
        then is claimed."""
        look = _Look(place, tags, then, seats)
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

    def board(self) -> tuple[list, list, list, list] | None:
        """The LOOK script's keys and args for what is pending, the looks it answers and the forgets it carries (taken
        off the lists)."""
        if not self.pending():
            return None
        forgets, moves, looks = self._forgets, self._moves, self._looks
        self._forgets, self._moves, self._looks = [], [], []
        keys, args = [], [self.channel, len(forgets), len(moves)]
        for place, went in forgets:
            keys += self.sets(place.counters, place.tenant)
            args += [place.member, int(went), place.amount]
        for service_id, seats in moves:
            keys.append(self.seats(service_id))
            args.append(seats)
        for look in looks:
            place, seats = look.place, look.seats()
            keys += [*self.sets(place.counters, place.tenant), self.seats(service_of(place))]
            args += [place.tenant, place.key, look.tags.key, place.member, place.amount, int(seats.borrow),
                     seats.reclaim, seats.lend, int(seats.room)]
        return keys, args, looks, forgets

    def landed(self, looks: list, answer: list | None, forgets: tuple | list = ()) -> None:
        """The LOOK script's answer. None: Redis failed. Its `forgets` are sent again (a member already out is charged
        nothing twice), and each look is tried again after POLL_S; once Redis has failed a look for HOLD_MAX_S the
        order is not held for it, as with no Redis (its head goes on its replica's seat, if it has one). A head let
        go unordered at a passing failure would be served out of turn, and its tenant charged nothing for it."""
        seen = time.monotonic()
        if answer is None:
            if forgets:
                self._forgets[:0] = forgets
                asyncio.get_running_loop().call_later(POLL_S, self._trip)
            for look in looks:
                look.failed = look.failed or seen
                if seen - look.failed < HOLD_MAX_S:
                    self._held[look.place.counters] = look
                    asyncio.get_running_loop().call_later(POLL_S, self._wake, look.place.counters, look)
                else:
                    self._saw(look.place.counters, look.place.tenant, View((), (), seen))
                    look.then(Verdict(True, claimed=int(look.seats().room), unordered=1))
            return
        verdicts = []
        for i, look in enumerate(looks):
            values = answer[13 * i:13 * i + 13]
            self._saw(look.place.counters, look.place.tenant, view_of(values, seen))
            verdicts.append(Verdict(*(int(v) for v in values[8:13])))
        for look, verdict in zip(looks, verdicts, strict=True):
            look.then(verdict)

    def sets(self, counters: str, tenant: str) -> list[str]:
        """The band's counters' hash, its waiting tenants and the tenant's waiting set (order_lua)."""
        base = f"{self.prefix}{counters}"
        return [base, f"{base}:q", f"{base}:q:{tenant}"]

    def seats(self, service_id: int) -> str:
        return f"{self.prefix}seats:{service_id}"

    def _moved(self, name: str) -> None:
        """Another replica let a band's request go (`<counters>:q`) or lent or gave back a service's seats."""
        name = name[len(self.prefix):]
        if name.startswith("seats:"):
            service = name.removeprefix("seats:")
            for counters in [c for c in self._held if c.split(":")[1] == service]:
                self._wake(counters)
            if self.on_seats is not None:
                self.on_seats(int(service))
        elif name.removesuffix(":q") in self._held:
            self._wake(name.removesuffix(":q"))

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
