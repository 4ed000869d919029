"""Sleep and wake of an engine replica (vLLM's sleep mode): how long a wake takes, and what a day costs.

vLLM 0.32.0 (`vllm/v1/engine/core.py` `sleep`, `vllm/v1/worker/gpu_worker.py`):
- level 1 offloads the weights to host memory and discards the KV cache; `POST /wake_up` copies the weights
  back over each GPU's host link (every rank its own shard, in parallel) and re-allocates the KV cache;
- level 2 discards the weights too; after `/wake_up` the weights must be loaded again
  (`POST /collective_rpc {"method": "reload_weights"}`), so the wake reads the shard from the pod's storage
  and copies it over the host link.
The same arithmetic serves kubesim's simulated engine, the autoscaler's estimate and bench/sleep_wake.py.
Pure: no Django, no kubesim.
"""

from __future__ import annotations

from dataclasses import dataclass

from capacity import startup
from capacity.gpus import HOST_LINK_FRACTION, Gpu

LEVELS = (1, 2)
# Re-allocating the KV cache and resuming the scheduler after the weights are back (the CUDA graphs and the
# compiled kernels survive a sleep): a stated default, overridable per pod (`kubesim.io/wake-overhead-seconds`).
WAKE_OVERHEAD_S = 0.5
# Reading weights from the pod's model storage: the cluster cache's rate in the start-up phase model (kubesim's
# `kubesim.io/storage-gbps` default).
STORAGE_BYTES_PER_S = startup.CLUSTER_CACHE_BYTES_PER_S
# A GPU-hour is counted for every GPU a replica holds, asleep or awake (the pod keeps its GPUs).
SECONDS_PER_HOUR = 3600.0


@dataclass(frozen=True)
class WakeFacts:
    """What a wake depends on: one rank's share of the weights and the links it crosses."""

    rank_bytes: float
    host_link_bytes_per_s: float  # achieved, per GPU (nominal x HOST_LINK_FRACTION)
    storage_bytes_per_s: float = STORAGE_BYTES_PER_S
    overhead_s: float = WAKE_OVERHEAD_S

    @classmethod
    def for_gpu(cls, rank_bytes: float, gpu: Gpu, *, host_link_fraction: float = HOST_LINK_FRACTION,
                storage_bytes_per_s: float = STORAGE_BYTES_PER_S, overhead_s: float = WAKE_OVERHEAD_S) -> WakeFacts:
        return cls(rank_bytes, gpu.host_link * host_link_fraction, storage_bytes_per_s, overhead_s)


def wake_seconds(level: int, facts: WakeFacts) -> float:
    """Seconds from `/wake_up` to a replica that serves again, after a sleep at `level` (1 or 2)."""
    if level not in LEVELS:
        raise ValueError(f"sleep level must be 1 or 2, got {level!r}")
    return (reload_seconds(facts) if level == 2 else copy_seconds(facts)) + facts.overhead_s


def copy_seconds(facts: WakeFacts) -> float:
    """Copying one rank's weights from host memory back to its GPU (the wake from level 1)."""
    return facts.rank_bytes / facts.host_link_bytes_per_s


def reload_seconds(facts: WakeFacts) -> float:
    """Loading one rank's weights again after level 2: read from storage, then copied to the GPU."""
    return facts.rank_bytes / facts.storage_bytes_per_s + copy_seconds(facts)


def wake_words(level: int, facts: WakeFacts) -> str:
    """The wake's arithmetic in words, e.g. "copy 16.1 GB at 25.2 GB/s + 0.5 s"."""
    gb = facts.rank_bytes / 1e9
    parts = []
    if level == 2:
        parts.append(f"read {gb:.1f} GB at {facts.storage_bytes_per_s / 1e9:.1f} GB/s")
    parts.append(f"copy {gb:.1f} GB at {facts.host_link_bytes_per_s / 1e9:.1f} GB/s")
    return " + ".join(parts) + f" + {facts.overhead_s:g} s"
