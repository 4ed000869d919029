"""The engine's KV cache: a block pool with a prefix cache of hashed full blocks (vLLM v1's design)."""

from __future__ import annotations

from array import array
from collections import OrderedDict


class BlockPool:
    """Fixed blocks with reference counts; free blocks keep their hash (evictable cache) in LRU order.

    As in vLLM's free queue, never-used blocks are handed out before freed ones, and freed blocks are
    reused least recently freed first. Blocks are plain integer ids with counts in an array, so a
    hundred pools of ~30k blocks give the garbage collector nothing to traverse.
    """

    def __init__(self, num_blocks: int, reserve_null: bool):
        usable = num_blocks - 1 if reserve_null and num_blocks > 0 else num_blocks
        self.capacity = max(usable, 0)
        self.fresh = self.capacity  # blocks never allocated yet (ids capacity - fresh ...)
        self.ref = array("i", [0]) * self.capacity
        # Freed block ids, least recently freed first. An OrderedDict, not a dict: taking the oldest of a
        # plain dict (`next(iter(d))`) scans past the slots of every key deleted before it, so a pool that
        # churns tens of thousands of blocks paid a scan per allocation (most of a replay's time at TP 2).
        self.free: OrderedDict[int, None] = OrderedDict()
        self.hash_of: dict[int, int] = {}  # block id -> hash while the block holds a cached prefix
        self.cached: dict[int, int] = {}  # hash -> block id

    @property
    def num_free(self) -> int:
        return self.fresh + len(self.free)

    def usage(self) -> float:
        return 1.0 - (self.fresh + len(self.free)) / self.capacity if self.capacity else 0.0

    def evictable(self) -> int:
        """Free blocks that still hold a cached prefix."""
        return sum(1 for bid in self.free if bid in self.hash_of)

    def allocate(self, n: int) -> list[int] | None:
        if n == 1 and self.fresh:  # a decode's next block, from the never-used ones (most calls)
            bid = self.capacity - self.fresh
            self.fresh -= 1
            self.ref[bid] = 1
            return [bid]
        if n > self.fresh + len(self.free):
            return None
        ref = self.ref
        take_fresh = min(n, self.fresh)
        first = self.capacity - self.fresh
        self.fresh -= take_fresh
        out = list(range(first, first + take_fresh))
        for bid in out:
            ref[bid] = 1
        free, cached, hash_of = self.free, self.cached, self.hash_of
        for _ in range(n - take_fresh):
            bid, _ = free.popitem(last=False)
            h = hash_of.pop(bid, None)
            if h is not None and cached.get(h) == bid:
                del cached[h]
            ref[bid] = 1
            out.append(bid)
        return out

    def touch(self, bid: int) -> None:
        if self.ref[bid] == 0:
            del self.free[bid]
        self.ref[bid] += 1

    def release(self, blocks: list[int]) -> None:
        ref, free = self.ref, self.free
        for bid in reversed(blocks):
            ref[bid] -= 1
            if ref[bid] == 0:
                free[bid] = None

    def lookup(self, hashes: list[int], limit: int) -> list[int]:
        hits = []
        cached = self.cached
        for h in hashes[:limit]:
            bid = cached.get(h)
            if bid is None:
                break
            hits.append(bid)
        return hits

    def register(self, bid: int, block_hash: int) -> None:
        if block_hash not in self.cached and bid not in self.hash_of:
            self.hash_of[bid] = block_hash
            self.cached[block_hash] = bid

    def reset_cache(self) -> None:
        self.hash_of.clear()
        self.cached.clear()


def block_hashes(tokens: list[int], block_size: int) -> list[int]:
    """Chained hashes of the full blocks: each depends on its parent, so equal hashes mean equal prefixes."""
    out = []
    parent = 0
    for i in range(0, len(tokens) - block_size + 1, block_size):
        parent = hash((parent, *tokens[i : i + block_size]))
        out.append(parent)
    return out
