"""What the simulated engine core (`core.EngineCore`) is configured with: the model, the GPU and the scheduler's
limits resolved from an engine's flags (`config`), and the physical constants of its step times."""

from __future__ import annotations

from dataclasses import dataclass, field

from capacity import roofline, startup
from capacity.arch import ModelArch
from capacity.gpus import HOST_LINK_FRACTION, Gpu
from kubesim.engines.cputier import TierConfig


@dataclass
class Physics:
    """Achieved fractions of the nominal GPU figures and the other physical constants of the model."""

    prefill_flops_fraction: float = roofline.PREFILL_FLOPS_FRACTION
    decode_bandwidth_fraction: float = roofline.DECODE_BANDWIDTH_FRACTION
    step_overhead_s: float = roofline.STEP_OVERHEAD_S  # scheduler, sampling and kernel launches per step
    kv_link_bandwidth: float = 50e9  # bytes/s between prefill and decode engines (400 Gb/s RDMA)
    kv_link_latency_s: float = 0.001
    storage_bandwidth: float = startup.CLUSTER_CACHE_BYTES_PER_S  # bytes/s reading weights from the cluster cache
    warmup_s: float = startup.ENGINE_INIT_S["vllm"]  # CUDA graphs, compilation, profiling run
    host_link_fraction: float = HOST_LINK_FRACTION  # achieved share of the GPU's host link in KV copies (cputier)
    lora_load_overhead_s: float = 0.02  # reading and checking an adapter's config, besides its weights


@dataclass
class CoreConfig:
    """What the step loop needs, already resolved from the engine's flags."""

    model: ModelArch
    gpu: Gpu
    tp: int
    num_blocks: int
    block_size: int
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    kv_bytes_per_token_rank: float
    weight_bytes_rank: float
    prefix_caching: bool = True
    chunked_prefill: bool = True
    kv_role: str | None = None  # "producer", "consumer", "both" or None
    reserve_null_block: bool = True
    physics: Physics = field(default_factory=Physics)
    seed: int = 0
    cpu_tier: TierConfig | None = None  # the KV cache's host-memory tier (kv offloading, HiCache)
    slowdown: float = 1.0  # a fault's factor on every step (kubesim.workload.EngineFault)
    spec_tokens: int = 0  # speculative tokens drafted per decode step (0: off)
    spec_acceptance: float = 0.0  # the chance each drafted token is accepted, each independently
    draft: ModelArch | None = None  # the draft model whose forward passes draft them (None: n-gram, no GPU time)
    draft_kv_bytes_per_token_rank: float = 0.0  # the draft's own KV, in the model's blocks
    max_loras: int = 0  # LoRA adapters one batch may use (--max-loras; 0: LoRA off)
    max_cpu_loras: int = 0  # adapters kept loaded in host memory (--max-cpu-loras, else --max-loras)
    lora_load_s: float = 0.0  # loading one adapter that host memory does not hold (`lora_load_seconds`)

    def spec_yield(self, k: int | None = None) -> float:
        """`spec_yield` of the configured drafts (or of k, where fewer fit the step) and acceptance."""
        return roofline.spec_yield(self.spec_tokens if k is None else k, self.spec_acceptance)


def lora_load_seconds(model: ModelArch, rank: int, physics: Physics) -> float:
    """Loading a rank-`rank` adapter on q_proj and v_proj (what `tiny-adapter` and most PEFT adapters target):
    per layer and module an A (rank x hidden) and a B (hidden x rank) in the model's dtype, read from storage."""
    weights = model.layers * 2 * 2 * rank * model.hidden * model.dtype_bytes
    return physics.lora_load_overhead_s + weights / physics.storage_bandwidth
