"""The reuse curve of a prefix cache: hit rate as a function of cache size, from the service's own lookups.

Caching papers measure an LRU cache of every size at once from one pass over the accesses (Mattson's stack
algorithm): an access hits an LRU cache of C blocks exactly when fewer than C distinct other blocks were used
since its previous access (its *reuse distance*). A prefix cache adds one rule: a request's block j is only
used when blocks 0..j-1 were hits too, so block j hits at size C when the largest distance among blocks 0..j
is below C. And, as the engines do, the last block of a prompt is always computed: of a prompt of n tokens,
only the first (n - 1) // block_size full blocks can hit.

The hit rate is counted as the engines count it, in tokens over every prompt token looked up (vLLM's
`prefix_cache_hits / prefix_cache_queries`), so the curve's figure at a size is comparable to what a cache
of that size measures. With a write-through CPU tier at least as large as the GPU pool, the GPU's blocks are
also in the tier, so the two tiers together hit about as an LRU of the tier's size: the curve at the tier's
size estimates both tiers' hit rate.

Bounded: the stack keeps at most `max_tracked_blocks` blocks (an older one counts as never seen, a distance
beyond any size the curve is asked about) and the requests are a reservoir sample of `max_requests`.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_left
from dataclasses import dataclass

MULTIPLES = (0.5, 1.0, 2.0, 4.0)
KNEE_GAIN = 0.01  # "more memory buys under 1 % more hits"


class _Recency:
    """Stack distances in O(log n) an access (a Fenwick tree over access times marking each block's latest
    access: the distance is the number of marks after the block's previous one), instead of searching a list.
    Keeps at most `limit` blocks once it compacts; a block dropped then counts as never seen."""

    def __init__(self, limit: int):
        self.limit = limit
        self.last: dict[int, int] = {}
        self.now = 0
        self.tree = [0] * 1025

    def distances(self, hashes: list[int]) -> list[float]:
        """Access `hashes` in order; the distance of each (math.inf: never seen, or beyond `limit`)."""
        out = []
        for h in hashes:
            if self.now + 1 >= len(self.tree):
                self._compact()
            tree, n, now, last = self.tree, len(self.tree), self.now, self.last
            t = last.get(h)
            if t is None:
                out.append(math.inf)
            else:
                count, i = 0, now  # marks at times t+1 .. now-1: prefix(now) - prefix(t + 1)
                while i > 0:
                    count += tree[i]
                    i &= i - 1
                i = t + 1
                while i > 0:
                    count -= tree[i]
                    i &= i - 1
                i = t + 1  # the block's old mark goes
                while i < n:
                    tree[i] -= 1
                    i += i & -i
                out.append(count if count < self.limit else math.inf)
            i = now + 1
            while i < n:
                tree[i] += 1
                i += i & -i
            last[h] = now
            self.now = now + 1
        return out

    def _compact(self) -> None:
        newest = sorted(self.last, key=self.last.__getitem__)[-self.limit:]
        self.last = {h: i for i, h in enumerate(newest)}
        self.now = len(newest)
        self.tree = [0] * (max(1024, 2 * self.now) + 1)
        for i in range(1, len(self.tree)):  # every time below `now` is marked: build the sums directly
            self.tree[i] = max(0, min(i, self.now) - (i - (i & -i)))


class ReuseSample:
    """Reuse distances of the prefix blocks of looked-up requests (see the module docstring)."""

    def __init__(self, block_size: int = 16, max_requests: int = 5000, max_tracked_blocks: int = 1 << 17,
                 seed: int = 0):
        self.block_size = block_size
        self.max_requests = max_requests
        self.max_tracked_blocks = max_tracked_blocks
        self._recency = _Recency(max_tracked_blocks)
        self._rng = random.Random(seed)
        self.requests: list[tuple[int, tuple[float, ...]]] = []  # (prompt tokens, prefix-max distance a block)
        self.seen = 0
        self._sorted: list[float] | None = None  # every kept prefix-max distance, sorted (for reading the curve)

    def observe(self, hashes: list[int], tokens: int) -> int:
        """One request's lookup: the hashes of its full blocks in order and its prompt's token count. Returns
        where its entry is kept in `requests` (-1: not kept by the reservoir)."""
        limit = (tokens - 1) // self.block_size
        prefix_max, worst = [], 0.0
        for distance in self._recency.distances(hashes)[:limit]:
            worst = max(worst, distance)
            prefix_max.append(worst)
        self.seen += 1
        self._sorted = None
        entry = (tokens, tuple(prefix_max))
        if len(self.requests) < self.max_requests:
            self.requests.append(entry)
            return len(self.requests) - 1
        k = self._rng.randrange(self.seen)
        if k < self.max_requests:
            self.requests[k] = entry
            return k
        return -1

    def hits(self, index: int, capacity_blocks: float) -> int:
        """Tokens of the kept request `index` that an LRU prefix cache of `capacity_blocks` blocks would hit."""
        return bisect_left(self.requests[index][1], capacity_blocks) * self.block_size  # maxima never decrease

    def _distances(self) -> list[float]:
        if self._sorted is None:
            self._sorted = sorted(d for _, maxima in self.requests for d in maxima)
        return self._sorted

    def hit_rate(self, capacity_blocks: float) -> float:
        """Hit tokens over prompt tokens of an LRU prefix cache of `capacity_blocks` blocks."""
        tokens = sum(t for t, _ in self.requests)
        if not tokens:
            return 0.0
        return bisect_left(self._distances(), capacity_blocks) * self.block_size / tokens

    def sizes(self) -> list[int]:
        """The sizes (blocks) at which the curve steps up: one more than each finite distance seen."""
        return sorted({int(d) + 1 for d in self._distances() if d != math.inf})

    def knee(self) -> int:
        """The smallest size beyond which all further memory buys under KNEE_GAIN more hits (0: none helps)."""
        steps = self.sizes()
        if not steps:
            return 0
        best = self.hit_rate(steps[-1])
        lo, hi = 0, len(steps) - 1  # the hit rate never falls as the size grows: the first size close enough
        while lo < hi:
            mid = (lo + hi) // 2
            if best - self.hit_rate(steps[mid]) < KNEE_GAIN:
                hi = mid
            else:
                lo = mid + 1
        return steps[lo]


@dataclass(frozen=True)
class Estimate:
    """The curve read at multiples of the current size, and its knee, in blocks and tokens."""

    current_blocks: int
    hit_rates: dict[float, float]  # multiple of the current size -> hit rate
    knee_blocks: int
    block_size: int

    def to_dict(self) -> dict:
        return {
            "current_tokens": self.current_blocks * self.block_size,
            "hit_rate": {f"{m:g}x": round(r, 4) for m, r in self.hit_rates.items()},
            "knee_tokens": self.knee_blocks * self.block_size,
        }


def estimate(sample: ReuseSample, current_blocks: int, multiples: tuple[float, ...] = MULTIPLES) -> Estimate:
    """The hit rate at each multiple of `current_blocks` and the knee (under 1 % more hits beyond it)."""
    return Estimate(current_blocks, {m: sample.hit_rate(m * current_blocks) for m in multiples}, sample.knee(),
                    sample.block_size)
