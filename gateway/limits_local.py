"""The fallback while Redis is unreachable: the same rules as the Lua scripts, kept in this process only.
The limiter hands it each replica's share of every limit, so a tenant is never left without limits."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque


class LocalLimits:
    def __init__(self, window_ms: int):
        self.window = window_ms
        self._lock = threading.Lock()
        self._requests: dict[str, deque] = {}
        self._tokens: dict[str, OrderedDict] = {}  # scope → id → [taken at, tokens]
        self._leases: dict[str, dict] = {}  # scope → id → lapses at
        self._budgets: dict[tuple[str, str], int] = {}  # (scope, month) → tokens used here

    def check(self, rid: str, cost: int, lease_ms: int, month: str, scopes: dict[str, tuple]) -> list:
        """`scopes`: name → (rpm, tpm, concurrency, budget), 0 for none (None for the budget); returns the
        CHECK script's answer."""
        now = time.monotonic() * 1000
        with self._lock:
            reason, retry, req, tok, left = 0, 0, [-1, -1, 0], [-1, -1, 0], []
            for name, (rpm, tpm, conc, budget) in scopes.items():
                if rpm:
                    hits = self._requests.setdefault(name, deque())
                    while hits and hits[0] <= now - self.window:
                        hits.popleft()
                    reset = int(hits[0] + self.window - now) if hits else self.window
                    if len(hits) >= rpm and not reason:
                        reason, retry = 1, reset
                    req = _tighter(req, rpm, rpm - len(hits), reset)
                if tpm:
                    entries = self._tokens.setdefault(name, OrderedDict())
                    while entries and next(iter(entries.values()))[0] <= now - self.window:
                        entries.popitem(last=False)
                    used = sum(tokens for _, tokens in entries.values())
                    first = next(iter(entries.values()), None)
                    reset = int(first[0] + self.window - now) if first else self.window
                    if used + cost > tpm and not reason:
                        reason, retry = 2, _tokens_wait(entries, used + cost - tpm, now, self.window, cost > tpm)
                    tok = _tighter(tok, tpm, tpm - used, reset)
                if conc:
                    leases = self._leases.setdefault(name, {})
                    for lid in [lid for lid, lapses in leases.items() if lapses <= now]:
                        del leases[lid]
                    if len(leases) >= conc and not reason:
                        reason, retry = 3, 1000
                spent = self._budgets.get((name, month), 0)
                if budget is not None and spent + cost > budget and not reason:
                    reason = 4
                left.append(budget - spent if budget is not None else -1)
            if not reason:
                self._take(rid, cost, now + lease_ms, month, scopes)
                left = [value - cost if value >= 0 else value for value in left]
                req[1] -= 1 if req[0] >= 0 else 0
                tok[1] -= cost if tok[0] >= 0 else 0
            return [int(not reason), reason, retry, req[0], max(0, req[1]), req[2], tok[0], max(0, tok[1]), tok[2],
                    *left]

    def _take(self, rid, cost, lapses, month, scopes):
        now = time.monotonic() * 1000
        for name, (rpm, tpm, conc, budget) in scopes.items():
            if rpm:
                self._requests[name].append(now)
            if tpm:
                self._tokens[name][rid] = [now, cost]
            if conc:
                self._leases[name][rid] = lapses
            if budget is not None:
                self._budgets[(name, month)] = self._budgets.get((name, month), 0) + cost

    def settle(self, rid: str, reserved: int, used: int, month: str, scopes: dict[str, tuple]) -> None:
        with self._lock:
            for name, (_, tpm, conc, budget) in scopes.items():
                entry = self._tokens.get(name, {}).get(rid)
                if tpm and entry is not None:
                    entry[1] = used
                if conc:
                    self._leases.get(name, {}).pop(rid, None)
                if budget is not None and (name, month) in self._budgets:
                    self._budgets[(name, month)] += used - reserved


def _tighter(current: list, limit: int, remaining: int, reset: int) -> list:
    return [limit, remaining, reset] if current[0] < 0 or remaining < current[1] else current


def _tokens_wait(entries: OrderedDict, need: int, now: float, window: int, never_fits: bool) -> int:
    if not never_fits:
        for taken, tokens in entries.values():
            need -= tokens
            if need <= 0:
                return int(taken + window - now)
    return window
