"""The KV-cache CPU tier (`engine_settings.kv_offload`): parsing, the engines' refusals, the flags, the memory.

`{"backend": "native" | "lmcache" | "hicache", "size_gib": N}`: N GiB of host memory per GPU of a replica.
How each engine takes it (checked against the engines' sources):

- vLLM (`--kv-offloading-backend native|lmcache --kv-offloading-size <GiB>`, vllm/config/kv_offload.py):
  the size is the *total* over the engine's KV ranks (tensor × pipeline parallel); vLLM divides it by
  TP × PP and gives each worker its share (`native`: the OffloadingConnector's `kv_bytes_per_rank`;
  `lmcache`: LMCacheConnectorV1 with `local_cpu` and `max_local_cpu_size` per rank). So the renderer writes
  size × TP × PP. The LMCache backend is rendered through these two flags rather than a hand-written
  `--kv-transfer-config` with `LMCACHE_*` variables: vLLM 0.33 has them, it computes the per-rank split
  itself, and `--kv-transfer-config` stays the control plane's for disaggregated prefill/decode. (The
  runtime image must have the `lmcache` package; vLLM's own image is not guaranteed to.) Both backends
  set vLLM's KV connector, so they cannot be combined with the NIXL connector of a P/D pair.
- SGLang HiCache (`--enable-hierarchical-cache --hicache-size <GB> --hicache-write-policy write_through`,
  sglang/srt/server_args.py): `--hicache-size` is an integer in gigabytes (10^9 bytes) per rank and
  overrides `--hicache-ratio`; the renderer writes the GiB as whole GB rounded down, so the tier never
  exceeds what the pod was given. Write-through is SGLang's default, rendered explicitly so the command
  line says how blocks reach the host (as vLLM's offloading does). HiCache extends the radix cache, so it
  needs prefix caching.

vLLM's offloading connectors handle one uniform KV layout, so MLA models (DeepSeek-V3 family) and
hybrid-attention models (sliding-window + full, or Mamba + attention groups) are refused by vLLM or silently
lose the hybrid KV manager: `model_error` refuses them by the catalog's one record of it, `Model.kv_layout`
(read from config.json's `kv_lora_rank`, `layer_types` / `sliding_window`, Mamba layers by hfconfig).
SGLang's HiCache has host pools for MLA and hybrid models, so it is not refused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

GIB = 1024**3
BACKENDS = {"vllm": ("native", "lmcache"), "sglang": ("hicache",)}
# No server gives a GPU more than 1 TiB of host memory; anything above is a typo (MiB or bytes for GiB).
MAX_SIZE_GIB = 1024
HICACHE_WRITE_POLICY = "write_through"
# Memory beyond the tier itself, per GPU: CUDA's pinned allocator rounds every buffer up to pages and keeps
# its own pool, LMCache stages chunks in extra pinned buffers and both keep an index of the blocks. 10 % of
# the tier, and at least 1 GiB per GPU, covers these with room (vLLM's native tier is one pinned tensor per
# layer group; LMCache's staging is a few chunks of 256 tokens).
OVERHEAD_FRACTION = 0.10
MIN_OVERHEAD_GIB_PER_GPU = 1.0
# What the engine container requests per GPU without a tier (the process: Python, CUDA context, tokenizer).
ENGINE_MEMORY_GIB_PER_GPU = 16


@dataclass(frozen=True)
class KvOffload:
    backend: str
    size_gib: float

    def to_dict(self) -> dict[str, Any]:
        size = int(self.size_gib) if float(self.size_gib).is_integer() else self.size_gib
        return {"backend": self.backend, "size_gib": size}


def parse(value: Any) -> KvOffload:
    """`KvOffload` from stored JSON; ValueError with the reason when the shape is wrong."""
    if not isinstance(value, dict):
        raise ValueError('must be an object {"backend": "native" | "lmcache" | "hicache", "size_gib": N}')
    unknown = sorted(set(value) - {"backend", "size_gib"})
    if unknown:
        raise ValueError(f"unknown key {unknown[0]!r}; expected backend and size_gib")
    backend, size = value.get("backend"), value.get("size_gib")
    if not isinstance(backend, str) or backend not in {b for bs in BACKENDS.values() for b in bs}:
        raise ValueError("backend must be one of native, lmcache (vLLM) or hicache (SGLang)")
    if isinstance(size, bool) or not isinstance(size, (int, float)):
        raise ValueError("size_gib must be a number of GiB of host memory per GPU")
    return KvOffload(backend, float(size))


def engine_error(kv: KvOffload, engine: str, *, prefix_caching: bool | None) -> str | None:
    """Why `engine` refuses this tier, or None."""
    if kv.backend not in BACKENDS[engine]:
        other = "SGLang's HiCache" if kv.backend == "hicache" else f"vLLM's {kv.backend} offloading"
        return f"backend {kv.backend!r} is {other}; {engine} takes {' or '.join(BACKENDS[engine])}"
    if math.isnan(kv.size_gib) or kv.size_gib <= 0:
        return "size_gib must be greater than 0"
    if kv.size_gib > MAX_SIZE_GIB:
        return f"size_gib must be at most {MAX_SIZE_GIB} GiB per GPU"
    if kv.backend == "hicache" and hicache_gb(kv) < 1:
        return "size_gib must be at least 1: SGLang's --hicache-size counts whole gigabytes"
    if prefix_caching is False:
        return "the CPU tier holds prefix-cache blocks; it needs enable_prefix_caching"
    return None


# Why vLLM's offloading refuses a model, by its KV layout (apps.catalog.choices.KvLayout).
VLLM_LAYOUT_REFUSALS = {
    "mla": "vLLM's KV offloading moves one uniform layout of K and V blocks; this model uses multi-head latent "
           "attention (an MLA latent per token), which it does not support",
    "hybrid": "vLLM's KV offloading moves one uniform layout of K and V blocks; this model mixes attention kinds "
              "(sliding-window or Mamba layers beside full attention), whose KV cache groups it does not support",
}


def model_error(kv: KvOffload, engine: str, kv_layout: str) -> str | None:
    """Why `engine` cannot offload the KV cache of a model with this layout (SGLang's HiCache can), or None."""
    return VLLM_LAYOUT_REFUSALS.get(kv_layout) if engine == "vllm" else None


def host_error(kv: KvOffload, *, gpus: int, gpu_short: str, allocatable_gib: float) -> str | None:
    """Why a node with `gpus` GPUs (`allocatable_gib` of memory for pods) cannot hold the engine container
    of a `gpus`-GPU replica with this tier, naming the largest size that fits; or None."""
    needed = pod_request_gib(kv.size_gib, gpus)
    if needed <= allocatable_gib:
        return None
    fits = [n / 2 for n in range(int(2 * allocatable_gib), 0, -1) if pod_request_gib(n / 2, gpus) <= allocatable_gib]
    would = f"at most {fits[0]:g} GiB per GPU fits" if fits else "no CPU tier fits"
    return (f"the engine container would request {needed} GiB ({ENGINE_MEMORY_GIB_PER_GPU} per GPU for the engine, "
            f"plus {kv.size_gib:g} GiB per GPU and {overhead_gib(kv):g} of pinned-buffer overhead, for {gpus} GPU"
            f"{'s' if gpus != 1 else ''}), more than the {allocatable_gib:.1f} GiB a {gpu_short} node of {gpus} "
            f"GPU{'s' if gpus != 1 else ''} can allocate; {would}")


def pod_request_gib(size_gib: float, gpus: int) -> int:
    """The engine container's memory request with a tier of `size_gib` per GPU, in GiB."""
    return ENGINE_MEMORY_GIB_PER_GPU * gpus + pod_memory_gib(KvOffload("native", size_gib), gpus)


def hicache_gb(kv: KvOffload) -> int:
    """SGLang's `--hicache-size`: the GiB as whole gigabytes (10^9 bytes), rounded down."""
    return math.floor(kv.size_gib * GIB / 1e9)


def vllm_args(kv: KvOffload, *, tp: int, pp: int) -> list[str]:
    total = kv.size_gib * tp * pp
    return ["--kv-offloading-backend", kv.backend, "--kv-offloading-size", _num(total)]


def sglang_args(kv: KvOffload) -> list[str]:
    return ["--enable-hierarchical-cache", "--hicache-size", str(hicache_gb(kv)),
            "--hicache-write-policy", HICACHE_WRITE_POLICY]


def overhead_gib(kv: KvOffload) -> float:
    """Pinned-buffer overhead per GPU (see OVERHEAD_FRACTION)."""
    return max(MIN_OVERHEAD_GIB_PER_GPU, OVERHEAD_FRACTION * kv.size_gib)


def pod_memory_gib(kv: KvOffload, gpus: int) -> int:
    """Host memory one replica's engine container adds for the tier: (size + overhead) × GPUs, whole GiB."""
    return math.ceil((kv.size_gib + overhead_gib(kv)) * gpus)


def _num(value: float) -> str:
    return repr(float(value)) if value != int(value) else f"{value:.1f}"
