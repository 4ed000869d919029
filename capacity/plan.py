"""The capacity plan of one model on one GPU kind: weights, KV cache, blocks, concurrency, smallest TP.

`plan()` answers the questions vLLM answers at start-up (how many KV blocks, how many tokens, does one
request of `max_model_len` fit) before anything is deployed, with the arithmetic of `capacity.arch`.
SGLang's static token pool is planned with the same keys (its pool counted in 16-token units).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from capacity import arch as a
from capacity.gpus import GIB, GPUS, Gpu

LOW_HEADROOM = 4  # fewer concurrent sequences than this at max_model_len is worth a warning
JSON_KEYS = (
    "model", "gpu", "tp", "kv_bytes_per_token", "block_bytes", "weights_bytes", "kv_budget_bytes", "num_blocks",
    "max_tokens", "max_concurrent_at_context", "fits", "min_tp", "reason", "cpu_tier_tokens",
    "cpu_tier_block_load_us",
)  # fmt: skip


@dataclass(frozen=True)
class Knobs:
    """The engine settings that change the arithmetic; None means the engine's default."""

    kv_cache_dtype: str = "auto"
    gpu_memory_utilization: float = 0.9
    max_model_len: int | None = None
    quantization: str | None = None
    max_num_batched_tokens: int | None = None
    engine: str = "vllm"  # "vllm" | "sglang"
    pp: int = 1  # pipeline-parallel stages: each holds 1/pp of the layers (weights and KV)
    cpu_tier_gib: float | None = None  # the KV cache's CPU tier, GiB per GPU (engine_settings.kv_offload)
    draft: a.ModelArch | None = None  # speculative decoding's draft model, loaded beside the model


@dataclass
class Plan:
    """Per-GPU figures of one (model, GPU, TP, settings); `fits` says whether the engine would start."""

    model: str
    gpu: str
    tp: int
    max_model_len: int
    kv_bytes_per_token: int
    block_bytes: int
    weights_bytes: int
    kv_budget_bytes: int
    num_blocks: int
    max_tokens: int
    max_concurrent_at_context: float
    fits: bool
    reason: str = ""
    problem: str = ""  # "tp" | "weights" | "kv_budget" | "max_model_len" | ""
    min_tp: int | None = None
    engine_error: str = ""  # the line the engine prints when it refuses to start
    extra: dict = field(default_factory=dict)
    cpu_tier_tokens: int = 0  # tokens the CPU tier holds (every GPU of a replica holds its share of each)
    cpu_tier_block_load_us: float = 0.0  # one 16-token block's share of a GPU over its host link, microseconds

    @property
    def low_headroom(self) -> bool:
        return self.fits and self.max_concurrent_at_context < LOW_HEADROOM

    def as_dict(self) -> dict:
        """Exactly the keys of `manage.py capacity --json`."""
        return {key: getattr(self, key) for key in JSON_KEYS}


def plan(model: a.ModelArch, gpu: Gpu, tp: int = 1, knobs: Knobs | None = None, *, search: bool = True) -> Plan:
    """The plan at `tp`; with `search`, also the smallest TP on one node at which it fits (`min_tp`)."""
    knobs = knobs or Knobs()
    result = _size(model, gpu, tp, knobs)
    if search:
        result.min_tp = smallest_tp(model, gpu, knobs)
    return result


def smallest_tp(model: a.ModelArch, gpu: Gpu, knobs: Knobs, *, weights_only: bool = False) -> int | None:
    """The smallest TP (dividing the heads, at most the node's GPUs) that fits; None: multi-node needed.

    `weights_only` asks only that the engine starts (weights load and leave some KV cache)."""
    for tp in range(1, gpu.max_gpus_per_node + 1):
        if model.tp_error(tp):
            continue
        p = _size(model, gpu, tp, knobs)
        if p.fits or (weights_only and p.problem == "max_model_len"):
            return tp
    return None


def _size(model: a.ModelArch, gpu: Gpu, tp: int, knobs: Knobs) -> Plan:
    max_len = knobs.max_model_len or model.max_context
    kv_b = a.kv_dtype_bytes(knobs.kv_cache_dtype, model)
    per_token = model.kv_bytes_per_token(kv_b, max(tp, 1)) / knobs.pp
    weights = model.weights_bytes(a.weight_bytes_per_param(knobs.quantization, model.dtype_bytes), max(tp, 1),
                                  knobs.pp)
    if knobs.draft is not None:  # its weights (in its own dtype) and its KV for every token, as the engine holds them
        per_token += knobs.draft.kv_bytes_per_token(kv_b, max(tp, 1))
        weights += knobs.draft.weights_bytes(knobs.draft.dtype_bytes, max(tp, 1))
    block = a.BLOCK_SIZE * per_token
    if knobs.engine == "sglang":
        chunk = knobs.max_num_batched_tokens or a.sglang_default_chunked_prefill(gpu)
        fraction = a.sglang_default_mem_fraction(gpu, chunk)
        budget = int(gpu.memory_bytes * fraction - weights)
        tokens = max(0, int(budget // per_token))
        blocks = tokens // a.BLOCK_SIZE
    else:
        batched = knobs.max_num_batched_tokens or a.vllm_default_batched_tokens(gpu)
        budget = a.vllm_kv_budget(gpu, model, gpu_memory_utilization=knobs.gpu_memory_utilization,
                                  weights_rank=weights, max_num_batched_tokens=batched)
        blocks = max(0, int(budget // block))
        tokens = blocks * a.BLOCK_SIZE
    result = Plan(
        model=model.name, gpu=gpu.key, tp=tp, max_model_len=max_len, kv_bytes_per_token=round(per_token),
        block_bytes=round(block), weights_bytes=round(weights), kv_budget_bytes=max(budget, 0), num_blocks=blocks,
        max_tokens=tokens, max_concurrent_at_context=round(tokens / max_len, 2), fits=False,
    )
    result.cpu_tier_tokens = cpu_tier_tokens(per_token, knobs)
    if result.cpu_tier_tokens:
        result.cpu_tier_block_load_us = round(block / gpu.host_link * 1e6, 1)
    tp_problem = model.tp_error(tp)
    if tp_problem:
        result.problem, result.reason, result.engine_error = "tp", tp_problem, f"ValueError: {tp_problem}"
    elif not a.weights_fit(gpu, weights):
        result.problem = "weights"
        result.reason = (f"weights need {_gib(weights)} GiB per GPU at TP {tp}; one {gpu.short} has "
                         f"{gpu.memory_gb} GiB")
        result.engine_error = a.cuda_oom_message(gpu, model, weights)
    elif blocks <= 0:
        result.problem = "kv_budget"
        if knobs.engine == "sglang":
            result.reason = (f"no memory left for the KV cache: {gpu.memory_gb} GiB x mem_fraction_static "
                             f"{fraction} leaves nothing beyond {_gib(weights)} GiB of weights")
            result.engine_error = ("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
                                   f"Current value: mem_fraction_static={fraction}")
        else:
            result.reason = (
                f"no memory left for the KV cache: {gpu.memory_gb} GiB x gpu_memory_utilization "
                f"{knobs.gpu_memory_utilization} = {_gib(gpu.memory_bytes * knobs.gpu_memory_utilization)} GiB "
                f"holds {_gib(weights)} GiB of weights per GPU at TP {tp} plus activations and overhead"
            )
            result.engine_error = a.VLLM_NO_CACHE_MEMORY
    elif max_len > tokens:
        result.problem = "max_model_len"
        result.reason = (
            f"max_model_len {max_len} is above the KV cache's capacity of {tokens} tokens "
            f"({blocks} blocks x {a.BLOCK_SIZE}); vLLM refuses to start when one request of max_model_len "
            "does not fit the KV cache"
        )
        if knobs.engine == "vllm":
            result.engine_error = a.vllm_max_model_len_message(max_len, per_token, blocks)
    else:
        result.fits = True
    return result


def cpu_tier_tokens(per_token: float, knobs: Knobs) -> int:
    """Tokens a CPU tier of `knobs.cpu_tier_gib` per GPU holds, with the same KV bytes per token per GPU as the
    GPU tier. vLLM gives each rank size x TP x PP / (TP x PP) GiB and counts whole blocks of 16 tokens
    (`num_cpu_blocks`); SGLang's host pool is `--hicache-size` whole GB (10^9 bytes) / bytes per token."""
    return a.host_tier_tokens(knobs.engine, knobs.cpu_tier_gib or 0, per_token)


def describe_option(gpu: Gpu, tp: int) -> str:
    """'8 × L4 (TP 8)'."""
    return f"{tp} × {gpu.short} (TP {tp})"


def what_fits(model: a.ModelArch, gpu: Gpu, knobs: Knobs, gpus: dict[str, Gpu] | None = None) -> str:
    """Advice naming the smallest single-node option on this GPU and the best one on another GPU kind:
    'needs ≥ 8 × L4 (TP 8) or 2 × H100 80GB (TP 2)'; an empty string when nothing fits one node."""
    gpus = GPUS if gpus is None else gpus
    parts = []
    same = smallest_tp(model, gpu, knobs)
    if same is not None:
        parts.append(describe_option(gpu, same))
    else:
        started = smallest_tp(model, gpu, knobs, weights_only=True)
        if started is not None:
            cap = _size(model, gpu, started, knobs).max_tokens
            parts.append(f"{describe_option(gpu, started)[:-1]}, max_model_len ≤ {cap})")
    candidates = []
    for rank, other in enumerate(gpus.values()):
        tp = smallest_tp(model, other, knobs) if other.key != gpu.key else None
        if tp is not None:
            # Fewest GPUs first; the same vendor before another (a different device plugin and images).
            candidates.append((tp, other.vendor != gpu.vendor, rank, other))
    if candidates:
        tp, _, _, other = min(candidates, key=lambda c: c[:3])
        parts.append(describe_option(other, tp))
    return f"needs ≥ {' or '.join(parts)}" if parts else ""


def _gib(n: float) -> str:
    return f"{n / GIB:.1f}"
