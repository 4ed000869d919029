"""GPU and model facts (reference/gpus-and-models.md) and the KV-cache arithmetic engines size pools by.

Everything here is plain arithmetic so tests can recompute it by hand: weights bytes, KV bytes per token,
vLLM's block budget and SGLang's static token pool.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

GIB = 1024**3


@dataclass(frozen=True)
class GPU:
    """One GPU kind: memory (GiB as the engines see it), bandwidth (bytes/s), dense BF16 FLOP/s."""

    key: str
    memory_gib: float
    bandwidth: float
    flops: float
    interconnect: float = 64e9  # bytes/s between GPUs of a node (NVLink where the card has it, else PCIe 5)

    @property
    def memory_bytes(self) -> int:
        return int(self.memory_gib * GIB)


GPUS: dict[str, GPU] = {
    g.key: g
    for g in [
        GPU("h100-sxm-80gb", 80, 3.35e12, 989e12, 900e9),
        GPU("h100-pcie-80gb", 80, 2.0e12, 756e12),
        GPU("h200-141gb", 141, 4.8e12, 989e12, 900e9),
        GPU("a100-sxm-80gb", 80, 2.04e12, 312e12, 600e9),
        GPU("a100-40gb", 40, 1.56e12, 312e12),
        GPU("l40s-48gb", 48, 0.864e12, 362e12),
        GPU("l4-24gb", 24, 0.30e12, 121e12),
        GPU("rtx4090-24gb", 24, 1.01e12, 165e12),
        GPU("b200-180gb", 180, 8.0e12, 2250e12, 1800e9),
        GPU("mi300x-192gb", 192, 5.3e12, 1307e12, 896e9),
    ]
}
DEFAULT_GPU = "h100-sxm-80gb"


@dataclass(frozen=True)
class ModelArch:
    """Architecture facts of a model; `active_params_b` differs from `params_b` for mixture-of-experts."""

    name: str
    params_b: float
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    max_context: int
    active_params_b: float | None = None
    dtype_bytes: int = 2

    @property
    def active(self) -> float:
        return (self.active_params_b or self.params_b) * 1e9

    def kv_bytes_per_token(self, kv_dtype_bytes: float, tp: int = 1) -> float:
        """K and V for every layer of one token on one tensor-parallel rank (KV heads are replicated
        when there are more ranks than KV heads, as vLLM and SGLang do)."""
        return 2 * self.layers * max(1, self.kv_heads // tp) * self.head_dim * kv_dtype_bytes


MODELS: dict[str, ModelArch] = {
    m.name: m
    for m in [
        ModelArch("meta-llama/Llama-3.1-8B-Instruct", 8.03, 32, 4096, 32, 8, 128, 131072),
        ModelArch("meta-llama/Llama-3.1-70B-Instruct", 70.6, 80, 8192, 64, 8, 128, 131072),
        ModelArch("Qwen/Qwen2.5-7B-Instruct", 7.62, 28, 3584, 28, 4, 128, 32768),
        ModelArch("Qwen/Qwen2.5-32B-Instruct", 32.8, 64, 5120, 40, 8, 128, 32768),
        ModelArch("Qwen/Qwen2.5-72B-Instruct", 72.7, 80, 8192, 64, 8, 128, 32768),
        ModelArch("Qwen/Qwen3-8B", 8.19, 36, 4096, 32, 8, 128, 32768),
        ModelArch("mistralai/Mistral-7B-Instruct-v0.3", 7.25, 32, 4096, 32, 8, 128, 32768),
        ModelArch("mistralai/Mixtral-8x7B-Instruct-v0.1", 46.7, 32, 4096, 32, 8, 128, 32768, 12.9),
    ]
}
# Unknown models get this shape (an 8B Llama) unless the pod passes an architecture.
FALLBACK_ARCH = MODELS["meta-llama/Llama-3.1-8B-Instruct"]
ARCH_ANNOTATION = "kubesim.io/model-arch"


def resolve_model(model: str, override: str | None = None, aliases: list[str] | None = None) -> ModelArch:
    """The architecture for a model path: an explicit JSON override, the known table, else the fallback.

    Paths such as `/models/Llama-3.1-8B-Instruct` or `hf://meta-llama/...` match the table by their tail;
    `aliases` (served model names) are tried next.
    """
    if override:
        try:
            fields = json.loads(override)
            fields.setdefault("name", model)
            return ModelArch(**fields)
        except (ValueError, TypeError) as e:
            raise ValueError(f"invalid {ARCH_ANNOTATION} annotation: {e}") from None
    for candidate in [model, *(aliases or [])]:
        if candidate in MODELS:
            return MODELS[candidate]
        tail = candidate.rstrip("/").split("/")[-1].lower()
        for name, arch in MODELS.items():
            if name.split("/")[-1].lower() == tail:
                return arch
    return ModelArch(**{**FALLBACK_ARCH.__dict__, "name": model})


def weight_bytes_per_param(quantization: str | None) -> float:
    """BF16/FP16 2 bytes, FP8 1, 4-bit formats about 0.5 plus scales."""
    q = (quantization or "").lower()
    if q in ("fp8", "fp8_e4m3", "fp8_e5m2", "modelopt", "compressed-tensors", "w8a8_fp8", "w8a8_int8"):
        return 1.0
    if q in ("awq", "gptq", "awq_marlin", "gptq_marlin", "bitsandbytes", "modelopt_fp4", "gguf", "mxfp4"):
        return 0.5625
    return 2.0


def kv_dtype_bytes(kv_cache_dtype: str, model: ModelArch) -> float:
    """`auto` is the model dtype; any fp8 variant is one byte; nvfp4 half a byte."""
    d = kv_cache_dtype.lower()
    if d.startswith("fp8"):
        return 1.0
    if d == "nvfp4":
        return 0.5
    if d in ("bf16", "bfloat16", "fp16", "float16", "half"):
        return 2.0
    if d in ("fp32", "float32", "float"):
        return 4.0
    return float(model.dtype_bytes)


# Memory that is neither weights nor KV: activation peak per batched token (bytes per token per unit of
# hidden size) and the non-torch overhead (CUDA context, NCCL buffers, CUDA graphs).
ACTIVATION_BYTES_PER_TOKEN_HIDDEN = 32
NON_TORCH_BYTES = GIB // 2


def vllm_num_gpu_blocks(
    gpu: GPU,
    model: ModelArch,
    *,
    gpu_memory_utilization: float,
    tp: int,
    pp: int,
    block_size: int,
    kv_bytes: float,
    weight_bytes: float,
    max_num_batched_tokens: int,
    kv_cache_memory_bytes: int | None = None,
) -> tuple[int, int]:
    """(num_gpu_blocks, budget bytes) per vLLM: util x memory - weights - activations - non-torch."""
    per_token = model.kv_bytes_per_token(kv_bytes, tp) / pp
    block_bytes = block_size * per_token
    if kv_cache_memory_bytes is not None:
        budget = kv_cache_memory_bytes
    else:
        weights = model.params_b * 1e9 * weight_bytes / (tp * pp)
        activations = max_num_batched_tokens * model.hidden * ACTIVATION_BYTES_PER_TOKEN_HIDDEN
        budget = int(gpu.memory_bytes * gpu_memory_utilization - weights - activations - NON_TORCH_BYTES)
    return max(0, int(budget // block_bytes)), budget


def sglang_default_mem_fraction(gpu: GPU, chunked_prefill_size: int) -> float:
    """SGLang's automatic `--mem-fraction-static`: (GPU - reserved) / GPU, for activations and graphs."""
    reserved = 1.0 * GIB + max(chunked_prefill_size, 0) * 256 * 1024
    return round((gpu.memory_bytes - reserved) / gpu.memory_bytes, 3)


def sglang_max_total_tokens(
    gpu: GPU,
    model: ModelArch,
    *,
    mem_fraction_static: float,
    tp: int,
    page_size: int,
    kv_bytes: float,
    weight_bytes: float,
) -> int:
    """Static pool (fraction x GPU) minus weights, over the per-token cell, floored to whole pages."""
    weights = model.params_b * 1e9 * weight_bytes / tp
    budget = gpu.memory_bytes * mem_fraction_static - weights
    cell = model.kv_bytes_per_token(kv_bytes, tp)
    tokens = max(0, int(budget // cell))
    return tokens - tokens % page_size
