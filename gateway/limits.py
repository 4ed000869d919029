"""Limits shared by every gateway replica: requests and tokens per minute (sliding-window logs),
concurrent requests (leases that lapse) and a token budget per calendar month, for a key and its tenant
together. One Lua script checks every limit and takes from all of them or none, in one round trip
(`check`); a second settles the tokens from the real usage and releases the lease when the request ends
(`settle`). Both are coroutines on redis.asyncio, so a request waiting on Redis never holds up the others on
the event loop. When Redis cannot be reached, each replica keeps the same rules in memory with its share of
every limit (limit // replicas): never unlimited.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import uuid
from dataclasses import dataclass, field

import redis
import redis.asyncio

from gateway import limits_lua, order_lua
from gateway.fairness import SCALE, Tags, VirtualCounters
from gateway.fairness import cost as vtc_cost
from gateway.limits_local import LocalLimits
from gateway.order import Place, SharedOrder
from gateway.validation import Demand

log = logging.getLogger("gateway.limits")
WINDOW_MS = 60_000
LIMIT_NAMES = ("rpm", "tpm", "concurrency", "monthly_token_budget")
BUDGET_TTL_S = 40 * 86400  # a month's counter outlives its month, then goes
REDIS_CONNECTIONS = 32  # per gateway process
REDIS_ANSWER_S = 2.0  # the longest wait for Redis's answer (or a free connection) before it counts as gone
REDIS_RETRY_S = 1.0  # while Redis is down, try it again at most this often (a refused connect costs time)
CHARS_PER_TOKEN = 4  # the estimate before the engine counts: about 4 characters a token in English
FAIR_TTL_S = 86400  # a (service, band)'s fair-share counters go after a day without a request


@dataclass(frozen=True)
class Window:
    """One kind of limit as the x-ratelimit-* headers show it: the tightest scope's."""

    limit: int
    remaining: int
    reset_ms: int


@dataclass(frozen=True)
class Flow:
    """A request's fairness identity (its key and the key's tenant, never anything the client sends), the
    (service, band) whose counters it is charged to, its tenant's weight and its estimated VTC cost."""

    counters: str
    tenant: str
    key: str
    weight: int
    cost: int
    wait_ms: int = 0  # > 0: the request may wait that long, in its band's shared order (gateway/order.py)


@dataclass
class Reservation:
    id: str
    tokens: int
    month: str
    scopes: dict  # name → (rpm, tpm, concurrency, budget) as checked
    shared: bool
    settled: bool = False
    flow: Flow | None = None
    tags: Tags = field(default_factory=Tags)
    ordered: bool = False  # it went on through the band's shared order: its served counter is corrected at settle


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str | None  # requests, tokens, concurrency or budget when refused
    retry_after_ms: int
    requests: Window | None
    tokens: Window | None
    reservation: Reservation | None  # to settle when the request ends (None when no limit applies)
    shared: bool  # False when the answer came from this replica's own fallback
    budget_left: dict = field(default_factory=dict)  # scope → tokens left this month, for scopes with a budget
    tags: Tags = field(default_factory=Tags)  # the request's start tags in its flow's counters (zeros without a flow)
    place: Place | None = None  # its member in the band's shared order, when its flow has a wait_ms


def estimate_tokens(request: dict, demand: Demand, default_max_tokens: int) -> int:
    """Tokens to reserve before the engine has counted: every prompt's characters / 4 (token ids count
    exactly, a chat message 4 more), plus the completion length the endpoint's engine honours (else
    `default_max_tokens`) for each sequence it may generate (gateway/validation.py's `Demand`)."""
    chars, ids = 0, 0
    for part in _texts(request.get("messages")) + _texts(request.get("prompt")):
        if isinstance(part, str):
            chars += len(part)
        else:
            ids += 1
    messages = request.get("messages")
    overhead = 4 * len(messages) if isinstance(messages, list) else 0  # role and separators per message
    return math.ceil(chars / CHARS_PER_TOKEN) + ids + overhead + completion_tokens(demand, default_max_tokens)


def completion_tokens(demand: Demand, default_max_tokens: int) -> int:
    """The completion tokens a request may generate, over all its sequences."""
    return demand.sequences * (default_max_tokens if demand.completion is None else demand.completion)


def _texts(value) -> list:
    """Every string (and every token id, as an int) inside a prompt or a messages list."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, int) and not isinstance(value, bool):
        return [value]
    if isinstance(value, list):
        return [item for element in value for item in _texts(element)]
    if isinstance(value, dict):
        return _texts(value.get("content")) + _texts(value.get("text"))
    return []


class RequestLimiter:
    def __init__(self, url: str | None, *, replicas: int = 1, prefix: str = "gw:", lease_ms: int = 600_000,
                 default_max_tokens: int = 1024):
        self.replicas = max(1, replicas)
        self.prefix = prefix
        self.lease_ms = lease_ms
        self.default_max_tokens = default_max_tokens
        # A bounded pool: a burst of requests shares REDIS_CONNECTIONS connections (waiting its turn for
        # one) instead of opening a connection each. The timeouts tell a Redis that is gone from a process
        # that is merely busy: a refused connection fails at once, a silent one after REDIS_ANSWER_S. A
        # replica whose loop did not run for a while (a loaded host, a throttled container) reads its answer
        # late; with a shorter wait it took that for Redis gone and let requests through on its own share
        # besides what Redis had counted (26 through a concurrency limit of 13 on a loaded test run).
        self.client = redis.asyncio.Redis.from_pool(redis.asyncio.BlockingConnectionPool.from_url(
            url, max_connections=REDIS_CONNECTIONS, timeout=REDIS_ANSWER_S, socket_timeout=REDIS_ANSWER_S,
            socket_connect_timeout=1.0)) if url else None
        self._check = self.client.register_script(limits_lua.CHECK) if self.client else None
        self._settle = self.client.register_script(limits_lua.SETTLE) if self.client else None
        self._look = self.client.register_script(order_lua.LOOK) if self.client else None
        self.local = LocalLimits(WINDOW_MS)
        self.redis_ok = self.client is not None
        self.round_trips = 0
        self._retry_at = 0.0
        self._last_budget_left: dict[str, int] = {}
        self._settles: list = []  # (keys, args, future) waiting for the next pipeline
        self._unsettled: set[asyncio.Future] = set()  # settles queued or sent, not yet answered
        self._counters: dict[str, VirtualCounters] = {}  # fair-share counters while Redis is away
        self._sending = False  # a pipeline is scheduled and has not taken what is queued yet
        # Who goes next across replicas (gateway/order.py), riding on the pipeline of settles.
        self.order = SharedOrder(self.client, prefix, self.trip) if self.client else None

    async def check(self, scopes: dict[str, dict | None], tokens: int, flow: Flow | None = None) -> Decision:
        """Take one request, `tokens` reserved tokens and one lease from every limit of every scope (name →
        a mapping with rpm, tpm, concurrency, monthly_token_budget), or from none; when let through, charge
        `flow`'s estimated cost to its fair-share counters in the same round trip."""
        limits = {name: tuple(int((values or {}).get(n) or 0) for n in LIMIT_NAMES) for name, values in scopes.items()}
        limits = {name: values for name, values in limits.items() if any(values)}
        if not limits and flow is None:
            return Decision(True, None, 0, None, None, None, shared=self.redis_ok)
        rid, month = uuid.uuid4().hex, time.strftime("%Y-%m", time.gmtime())
        await self.drain()  # what ended on this replica is given back before anything new is taken
        answer = await self._shared_check(rid, tokens, month, limits, flow)
        shared = answer is not None
        if not shared:
            limits = self._shares(limits)
            answer = self.local.check(rid, tokens, self.lease_ms, month, limits)
        allowed, reason, retry, *windows = (int(value) for value in answer[:9])
        budget_left = {name: left for name, left in zip(limits, answer[9:9 + len(limits)], strict=True) if left >= 0}
        if shared:
            self._last_budget_left.update(budget_left)
        tags, place, at = Tags(), None, 9 + len(limits)
        if allowed and flow is not None:
            tags = Tags(*(int(tag) for tag in answer[at:at + 2])) if shared else self._local_counters(flow).charge(
                flow.tenant, flow.key, flow.cost, flow.weight)
            if shared and flow.wait_ms > 0 and self.order is not None:
                member = answer[at + 2]
                place = Place(flow.counters, flow.tenant, flow.key,
                              member.decode() if isinstance(member, bytes) else str(member),
                              flow.cost * SCALE // max(1, flow.weight))
                self.order.saw(place, answer[at + 3:at + 11])
        reservation = Reservation(rid, tokens, month, limits, shared, flow=flow, tags=tags) if allowed else None
        return Decision(bool(allowed), limits_lua.REASONS[reason], retry, _window(*windows[:3]),
                        _window(*windows[3:]), reservation, shared, budget_left, tags, place)

    def _local_counters(self, flow: Flow) -> VirtualCounters:
        return self._counters.setdefault(flow.counters, VirtualCounters())

    async def settle(self, reservation: Reservation | None, prompt_tokens: int, completion_tokens: int) -> None:
        """`settle_soon`, waiting until Redis has it."""
        done = self.settle_soon(reservation, prompt_tokens, completion_tokens)
        if done is not None:
            await done

    def settle_soon(self, reservation: Reservation | None, prompt_tokens: int,
                    completion_tokens: int) -> asyncio.Future | None:
        """The request has ended: count its real tokens instead of the reservation, in the minute's window
        and the month's budget, and release its concurrency lease. Once per reservation; zeros for a
        request that reached no engine. Called from the event loop; queued for the next pipeline, whose
        completion the returned future marks (None when there is nothing to send). A check made on this
        replica after this call waits for it, so a client's next request always finds its lease back."""
        if reservation is None or reservation.settled:
            return None
        reservation.settled = True
        used = max(0, int(prompt_tokens or 0)) + max(0, int(completion_tokens or 0))
        flow = reservation.flow
        delta = vtc_cost(prompt_tokens or 0, completion_tokens or 0) - flow.cost if flow else 0
        if not reservation.shared:
            self.local.settle(reservation.id, reservation.tokens, used, reservation.month, reservation.scopes)
            if flow is not None:
                self._local_counters(flow).settle(flow.tenant, flow.key, delta, flow.weight, reservation.tags)
            return None
        keys, args = [], [reservation.id, reservation.tokens, used]
        for name, (_, tpm, conc, budget) in reservation.scopes.items():
            base = self.prefix + name
            keys += [f"{base}:t", f"{base}:th", f"{base}:c", f"{base}:b:{reservation.month}"]
            args += [int(bool(tpm)), int(bool(conc)), int(bool(budget))]
        if flow is not None:
            keys.append(self.prefix + flow.counters)
            args += [flow.tenant, flow.key, delta * SCALE, flow.weight, reservation.tags.tenant, reservation.tags.key]
            if reservation.ordered and self.order is not None:
                keys.append(self.order.sets(flow.counters, flow.tenant)[1])  # its served counter is corrected too
        done = asyncio.get_running_loop().create_future()
        self._settles.append((keys, args, done))
        self._unsettled.add(done)
        done.add_done_callback(self._unsettled.discard)
        self.trip()
        return done

    def trip(self) -> None:
        """A pipeline soon, for what is queued by the end of this turn of the event loop."""
        if not self._sending:
            self._sending = True
            asyncio.get_running_loop().create_task(self._send_settles())

    async def drain(self) -> None:
        """Wait for every settle queued so far."""
        if self._unsettled:
            await asyncio.wait(set(self._unsettled))

    async def _send_settles(self) -> None:
        """Every settle queued by the time this runs, in one pipeline: one round trip for all the requests
        that ended in the same turn of the event loop."""
        await asyncio.sleep(0)
        self._sending = False
        batch, self._settles = self._settles, []
        boarding = self.order.board() if self.order is not None else None
        if not batch and boarding is None:
            return
        answers = None
        try:
            async with self.client.pipeline(transaction=False) as pipe:
                for keys, args, _ in batch:
                    await self._settle(keys=keys, args=args, client=pipe)
                if boarding is not None:
                    await self._look(keys=boarding[0], args=boarding[1], client=pipe)
                if batch:
                    self.round_trips += 1
                else:
                    self.order.trips += 1
                answers = await pipe.execute()
        except redis.RedisError as exc:
            # The leases lapse by themselves; the reservations stay counted in their windows and budgets.
            log.warning("redis unreachable at settle (%s): %d reservations kept as reserved", exc, len(batch))
        finally:
            for *_, done in batch:
                if not done.done():
                    done.set_result(None)
            if boarding is not None:
                self.order.landed(boarding[2], answers[-1] if answers else None, boarding[3])

    async def close(self) -> None:
        if self.client is not None:
            await self.client.aclose()

    async def _shared_check(self, rid, tokens, month, limits, flow: Flow | None) -> list | None:
        if self._check is None or time.monotonic() < self._retry_at:
            return None
        keys, args = [], [WINDOW_MS, rid, tokens, self.lease_ms, BUDGET_TTL_S]
        for name, values in limits.items():
            base = self.prefix + name
            keys += [f"{base}:r", f"{base}:t", f"{base}:th", f"{base}:c", f"{base}:b:{month}"]
            args += list(values)
        if flow is not None:
            keys.append(self.prefix + flow.counters)
            args += [flow.tenant, flow.key, flow.cost * SCALE, flow.weight, FAIR_TTL_S]
            if flow.wait_ms > 0 and self.order is not None:
                keys += self.order.sets(flow.counters, flow.tenant)[1:]
                args.append(flow.wait_ms)
        try:
            self.round_trips += 1
            answer = await self._check(keys=keys, args=args)
        except redis.RedisError as exc:
            if self.redis_ok:
                log.warning("redis unreachable (%s): per-replica limits (1/%d of each)", exc, self.replicas)
            self.redis_ok = False
            self._retry_at = time.monotonic() + REDIS_RETRY_S
            return None
        if not self.redis_ok:
            log.warning("redis is back: limits are shared again")
        self.redis_ok = True
        return answer

    def _shares(self, limits: dict) -> dict:
        """This replica's share of every limit; a budget's share is of what was left when last seen."""
        shares = {}
        for name, (rpm, tpm, conc, budget) in limits.items():
            share = [max(1, value // self.replicas) if value else 0 for value in (rpm, tpm, conc)]
            left = self._last_budget_left.get(name, budget) if budget else None
            shares[name] = (*share, None if left is None else max(0, left) // self.replicas)
        return shares


def _window(limit: int, remaining: int, reset_ms: int) -> Window | None:
    return Window(limit, remaining, reset_ms) if limit >= 0 else None
