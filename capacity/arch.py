"""Model architecture arithmetic: weights bytes, KV bytes per token (MLA included), vLLM's block budget
and SGLang's static token pool, and the engines' own refusal messages when memory runs out.

Everything is plain arithmetic on the published config facts so tests can recompute it by hand
(reference/gpus-and-models.md §Formulas, engines.md §5).
"""

from __future__ import annotations

from dataclasses import dataclass

from capacity.gpus import GIB, Gpu
from enginevocab.vllm import DEFAULT_GPU_MEMORY_UTILIZATION as VLLM_DEFAULT_GPU_MEMORY_UTILIZATION  # noqa: F401 (re-exported)

BLOCK_SIZE = 16  # vLLM's default block size (tokens per KV block)

# Memory that is neither weights nor KV cache, in vLLM's profiling run. The activation peak grows with
# the tokens of one batch: 32 bytes per batched token per unit of hidden size covers the fp32 logits
# slice, the MLP intermediate and the attention workspace of a llama-shaped layer. The non-torch part
# (CUDA context, NCCL buffers, CUDA graphs) is a fixed half GiB.
ACTIVATION_BYTES_PER_TOKEN_HIDDEN = 32
NON_TORCH_BYTES = GIB // 2


@dataclass(frozen=True)
class ModelArch:
    """Architecture facts of a model; `active_params_b` differs from `params_b` for mixture-of-experts,
    and `kv_lora_rank` > 0 marks multi-head latent attention (DeepSeek-V3 family)."""

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
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0

    @property
    def active(self) -> float:
        """Parameters used per token."""
        return (self.active_params_b or self.params_b) * 1e9

    def kv_bytes_per_token(self, kv_dtype_bytes: float, tp: int = 1) -> float:
        """K and V of every layer for one token on one tensor-parallel rank.

        KV heads split across ranks (replicated when there are more ranks than KV heads, as vLLM and
        SGLang do); the MLA latent (`kv_lora_rank + qk_rope_head_dim` values per layer) is not split.
        """
        if self.kv_lora_rank:
            return self.layers * (self.kv_lora_rank + self.qk_rope_head_dim) * kv_dtype_bytes
        return 2 * self.layers * max(1, self.kv_heads // tp) * self.head_dim * kv_dtype_bytes

    def weights_bytes(self, bytes_per_param: float, tp: int = 1, pp: int = 1) -> float:
        """Weights held by one GPU at tensor parallelism `tp` and pipeline parallelism `pp`."""
        return self.params_b * 1e9 * bytes_per_param / (tp * pp)

    def tp_error(self, tp: int) -> str | None:
        """Why vLLM refuses this tensor-parallel size for the model (None when it accepts it)."""
        if tp < 1:
            return "tensor_parallel_size must be >= 1"
        if self.heads % tp:
            return (f"Total number of attention heads ({self.heads}) must be divisible by tensor parallel "
                    f"size ({tp}).")
        if not self.kv_lora_rank and (self.kv_heads % tp if tp < self.kv_heads else tp % self.kv_heads):
            return (f"Total number of KV heads ({self.kv_heads}) and tensor parallel size ({tp}) must "
                    "divide one another.")
        return None


def weight_bytes_per_param(quantization: str | None, dtype_bytes: int = 2) -> float:
    """The model dtype's bytes (BF16/FP16 2), FP8 formats 1, 4-bit formats about 0.5 plus scales."""
    q = (quantization or "").lower()
    if q in ("fp8", "fp8_e4m3", "fp8_e5m2", "modelopt", "compressed-tensors", "w8a8_fp8", "w8a8_int8"):
        return 1.0
    if q in ("awq", "gptq", "awq_marlin", "gptq_marlin", "bitsandbytes", "modelopt_fp4", "gguf", "mxfp4"):
        return 0.5625
    return float(dtype_bytes)


def kv_dtype_bytes(kv_cache_dtype: str | None, model: ModelArch) -> float:
    """`auto` is the model dtype; any fp8 variant is one byte; nvfp4 half a byte."""
    d = (kv_cache_dtype or "auto").lower()
    if d.startswith("fp8"):
        return 1.0
    if d == "nvfp4":
        return 0.5
    if d in ("bf16", "bfloat16", "fp16", "float16", "half"):
        return 2.0
    if d in ("fp32", "float32", "float"):
        return 4.0
    return float(model.dtype_bytes)


def vllm_default_batched_tokens(gpu: Gpu) -> int:
    """vLLM's API-server `--max-num-batched-tokens`: 2048; 8192 on GPUs >= 70 GiB except A100; 16384 >= 160."""
    if gpu.memory_gb >= 160:
        return 16384
    return 8192 if _big(gpu) else 2048


def vllm_default_max_num_seqs(gpu: Gpu) -> int:
    """vLLM's `--max-num-seqs`: 256; 1024 on GPUs >= 70 GiB other than A100."""
    return 1024 if _big(gpu) else 256


def _big(gpu: Gpu) -> bool:
    return gpu.memory_gb >= 70 and not gpu.key.startswith("a100")


def activation_bytes(model: ModelArch, max_num_batched_tokens: int) -> int:
    """Peak activation memory of a profiling batch of `max_num_batched_tokens` tokens."""
    return max_num_batched_tokens * model.hidden * ACTIVATION_BYTES_PER_TOKEN_HIDDEN


def vllm_kv_budget(gpu: Gpu, model: ModelArch, *, gpu_memory_utilization: float, weights_rank: float,
                   max_num_batched_tokens: int) -> int:
    """vLLM's KV budget per GPU: memory x utilisation - weights - activations - non-torch overhead."""
    return int(gpu.memory_bytes * gpu_memory_utilization - weights_rank
               - activation_bytes(model, max_num_batched_tokens) - NON_TORCH_BYTES)


def vllm_num_gpu_blocks(
    gpu: Gpu,
    model: ModelArch,
    *,
    gpu_memory_utilization: float,
    tp: int,
    pp: int = 1,
    block_size: int = BLOCK_SIZE,
    kv_bytes: float,
    weight_bytes: float,
    max_num_batched_tokens: int,
    kv_cache_memory_bytes: int | None = None,
    draft: ModelArch | None = None,
) -> tuple[int, int]:
    """(num_gpu_blocks, budget bytes) as vLLM sizes them; `kv_cache_memory_bytes` replaces the budget. A
    speculative `draft` model loads beside the model (in its own dtype) and keeps its own KV for every token, in
    the same blocks: it takes weights off the budget and adds its KV to each block."""
    block_bytes = block_size * model.kv_bytes_per_token(kv_bytes, tp) / pp
    weights_rank = model.weights_bytes(weight_bytes, tp, pp)
    if draft is not None:
        block_bytes += block_size * draft.kv_bytes_per_token(kv_bytes, tp)
        weights_rank += draft.weights_bytes(draft.dtype_bytes, tp)
    if kv_cache_memory_bytes is not None:
        budget = kv_cache_memory_bytes
    else:
        budget = vllm_kv_budget(gpu, model, gpu_memory_utilization=gpu_memory_utilization,
                                weights_rank=weights_rank, max_num_batched_tokens=max_num_batched_tokens)
    return max(0, int(budget // block_bytes)), budget


def weights_fit(gpu: Gpu, weights_rank: float) -> bool:
    """Whether one rank's weights load at all: they and the CUDA context must fit the whole GPU."""
    return weights_rank + NON_TORCH_BYTES <= gpu.memory_bytes


def sglang_default_mem_fraction(gpu: Gpu, chunked_prefill_size: int) -> float:
    """SGLang's automatic `--mem-fraction-static`: (GPU - reserved) / GPU, for activations and graphs."""
    reserved = 1.0 * GIB + max(chunked_prefill_size, 0) * 256 * 1024
    return round((gpu.memory_bytes - reserved) / gpu.memory_bytes, 3)


def sglang_default_chunked_prefill(gpu: Gpu) -> int:
    """SGLang's `--chunked-prefill-size` chosen by GPU memory."""
    g = gpu.memory_gb
    return 2048 if g < 35 else 4096 if g < 60 else 8192 if g < 90 else 16384


def sglang_max_total_tokens(gpu: Gpu, model: ModelArch, *, mem_fraction_static: float, tp: int, page_size: int,
                            kv_bytes: float, weight_bytes: float) -> int:
    """Static pool (fraction x GPU) minus weights, over the per-token cell, floored to whole pages."""
    budget = gpu.memory_bytes * mem_fraction_static - model.weights_bytes(weight_bytes, tp)
    tokens = max(0, int(budget // model.kv_bytes_per_token(kv_bytes, tp)))
    return tokens - tokens % page_size


def host_tier_tokens(engine: str, gib_per_gpu: float, per_token: float, block_size: int = BLOCK_SIZE) -> int:
    """Tokens a KV-cache CPU tier of `gib_per_gpu` GiB holds for one GPU whose KV takes `per_token` bytes a token.

    vLLM's offloading counts whole blocks of `block_size` tokens in the GiB it gives each rank; SGLang's
    `--hicache-size` is whole gigabytes (10^9 bytes) of host pool, divided by the per-token cell."""
    if gib_per_gpu <= 0 or per_token <= 0:
        return 0
    if engine == "sglang":
        return int(int(gib_per_gpu * GIB / 1e9) * 1e9 // per_token)
    return int(gib_per_gpu * GIB // (block_size * per_token)) * block_size


# -- what the engines say when memory runs out ---------------------------------------------------------

def cuda_oom_message(gpu: Gpu, model: ModelArch, weights_rank: float) -> str:
    """PyTorch's out-of-memory error at the layer whose weights no longer fit (vLLM and SGLang load alike)."""
    layer = weights_rank / model.layers
    total = gpu.memory_bytes
    loaded = min(weights_rank, (total - NON_TORCH_BYTES) // layer * layer)
    in_use = loaded + NON_TORCH_BYTES
    return (
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {_gib(layer)} GiB. GPU 0 has a total "
        f"capacity of {_gib(total)} GiB of which {_mib(total - in_use)} MiB is free. Including non-PyTorch "
        f"memory, this process has {_gib(in_use)} GiB memory in use. Of the allocated memory {_gib(loaded)} GiB "
        "is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated. If reserved but "
        "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
        "fragmentation.  See documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )


VLLM_NO_CACHE_MEMORY = (
    "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
    "initializing the engine."
)


def vllm_max_model_len_message(max_model_len: int, kv_bytes_per_token: float, num_blocks: int,
                               block_size: int = BLOCK_SIZE) -> str:
    """vLLM's refusal when one request of `max_model_len` tokens does not fit the KV cache."""
    capacity = num_blocks * block_size
    return (
        f"ValueError: To serve at least one request with the models's max seq len ({max_model_len}), "
        f"({max_model_len * kv_bytes_per_token / GIB:.2f} GiB KV cache is needed, which is larger than the "
        f"available KV cache memory ({capacity * kv_bytes_per_token / GIB:.2f} GiB). Based on the available "
        f"memory, the estimated maximum model length is {capacity}. Try increasing `gpu_memory_utilization` "
        "or decreasing `max_model_len` when initializing the engine."
    )


def _gib(n: float) -> str:
    return f"{n / GIB:.2f}"


def _mib(n: float) -> str:
    return f"{max(n, 0) / 1024**2:.2f}"
