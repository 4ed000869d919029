"""The KV cache's second tier: host memory behind the GPU's block pool, as vLLM's offloading and SGLang's HiCache.

Write-through (vLLM's OffloadingConnector stores every newly computed full block to the CPU; SGLang's
`--hicache-write-policy write_through` backs each up as it is inserted in the radix tree): a block in the GPU
pool is also in the tier until the tier's LRU drops it, so a block the GPU pool evicts is still on the host.
A lookup continues where the GPU prefix ends, through consecutive blocks the tier holds; those blocks are
copied back over the GPU's host link (PCIe or NVLink-C2C, `capacity.gpus.Gpu.host_link`) and the copy takes
its time in the step that admits the request, instead of the prefill that would recompute them. Every block of
a lookup that the tier holds is touched (it becomes the most recently used), as the engines' LRU managers do.

Stores are asynchronous copies overlapped with compute: they are counted (bytes, seconds) but add no time.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass


@dataclass(frozen=True)
class TierConfig:
    """A resolved CPU tier: its size in blocks, the engine's backend name and the copy physics of one block."""

    blocks: int
    backend: str  # "native" | "lmcache" (vLLM) | "hicache" (SGLang)
    block_bytes: float  # bytes of one block on one rank
    ranks: int  # ranks that each copy their share of a block at the same time over their own link
    link_bytes_per_s: float  # achieved host-link rate of one GPU

    def seconds(self, blocks: int) -> float:
        """Time to copy `blocks` blocks between GPU and host (the ranks copy their shares in parallel)."""
        return blocks * self.block_bytes / self.link_bytes_per_s

    def bytes(self, blocks: int) -> float:
        """Bytes `blocks` blocks move over all ranks' links."""
        return blocks * self.block_bytes * self.ranks


class CpuTier:
    """An LRU of block hashes of `cfg.blocks` blocks, with counters of what it stored, loaded and evicted."""

    def __init__(self, cfg: TierConfig):
        self.cfg = cfg
        self.lru: OrderedDict[int, None] = OrderedDict()  # least recently used first
        self.stored_blocks = 0
        self.loaded_blocks = 0
        self.evicted_blocks = 0
        self.pending_load_blocks = 0  # loads of the step being scheduled

    @property
    def capacity(self) -> int:
        return self.cfg.blocks

    def usage(self) -> float:
        return len(self.lru) / self.cfg.blocks if self.cfg.blocks else 0.0

    def store(self, hashes: list[int]) -> tuple[int, int]:
        """Write `hashes` through to the tier: (blocks newly written, blocks the LRU evicted for them)."""
        lru, cap = self.lru, self.cfg.blocks
        written = evicted = 0
        for h in hashes:
            if h in lru:
                lru.move_to_end(h)
                continue
            if cap <= 0:
                break
            lru[h] = None
            written += 1
            if len(lru) > cap:
                lru.popitem(last=False)
                evicted += 1
        self.stored_blocks += written
        self.evicted_blocks += evicted
        return written, evicted

    def lookup(self, hashes: list[int], start: int, limit: int) -> int:
        """Blocks `hashes[start:]` (up to `limit`) that the tier holds consecutively: the ones to load. Touches
        every block of `hashes[:limit]` it holds, the GPU-resident prefix included."""
        lru = self.lru
        for h in hashes[:start]:
            if h in lru:
                lru.move_to_end(h)
        found = 0
        for h in hashes[start:limit]:
            if h not in lru:
                break
            lru.move_to_end(h)
            found += 1
        return found

    def load(self, blocks: int) -> None:
        """Count `blocks` blocks copied back to the GPU in the step being scheduled."""
        self.loaded_blocks += blocks
        self.pending_load_blocks += blocks

    def take_step_load(self) -> int:
        """The blocks loaded for the step just scheduled (and forget them)."""
        n, self.pending_load_blocks = self.pending_load_blocks, 0
        return n
