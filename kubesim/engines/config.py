"""Resolve an engine's parsed flags plus the pod (GPU kind and count) into the core's configuration.

The defaults and failure messages are the engines' own: vLLM picks its batch budget and sequence cap
by GPU memory, sizes the block pool from `--gpu-memory-utilization`, and refuses to start when the
longest request does not fit; SGLang sizes a static token pool from `--mem-fraction-static`.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from capacity import arch as cap
from capacity import startup
from capacity.gpus import GIB, Gpu
from capacity.sleep import WAKE_OVERHEAD_S, WakeFacts
from enginevocab import sglang as sglang_vocab
from enginevocab import vllm as vllm_vocab
from kubesim.engines import hardware as hw
from kubesim.engines.coreconfig import CoreConfig, Physics, lora_load_seconds
from kubesim.engines.cputier import TierConfig
from kubesim.engines.sleep import SleepConfig, sleep_config
from kubesim.engines.speculative import DRAFT_ARCH_ANNOTATION, DRAFT_MODEL_ACCEPTANCE, NGRAM_ACCEPTANCE, Speculative
from kubesim.workload import PodContext, WorkloadExit

VLLM_VERSION = vllm_vocab.VERSION
SGLANG_VERSION = sglang_vocab.VERSION

TIME_SCALE_ANNOTATION = "kubesim.io/time-scale"


@dataclass
class EngineSpec:
    """Everything the HTTP layer and the metrics need beside the core config."""

    kind: str  # "vllm" | "sglang"
    served_names: list[str]
    model: str
    port: int
    core: CoreConfig
    startup_s: float
    time_scale: float
    phases: startup.Phases | None = None  # the start-up's phases, startup_s being their total over time_scale
    enable_lora: bool = False
    runtime_lora: bool = False
    lora_modules: dict[str, str] = field(default_factory=dict)
    max_loras: int = 1
    enable_metrics: bool = True
    log_stats: bool = True
    pd_role: str | None = None  # "prefill" | "decode" | None
    kv_cache_dtype: str = "auto"
    max_total_tokens: int = 0  # SGLang
    page_size: int = 1  # SGLang page size as reported
    mem_fraction: float = 0.0
    custom_buckets: dict | None = None
    sglang_buckets: dict | None = None
    cache_info: dict[str, str] = field(default_factory=dict)
    logs: list[str] = field(default_factory=list)
    data_parallel: int = 1  # engine cores in this server (vLLM -dp / -dpl), each on its own GPUs
    max_queued_requests: int | None = None  # vLLM --max-num-queued-reqs, SGLang --max-queued-requests
    max_queued_tokens: int | None = None  # vLLM --max-num-queued-tokens
    sleep: SleepConfig | None = None  # vLLM's sleep mode (kubesim/engines/sleep.py)


def _vllm_speculative(ns: argparse.Namespace, ctx: PodContext, logs: list[str]) -> Speculative:
    """The speculative decoding of `--speculative-config` (none without one). The n-gram and draft-model methods
    are modelled; the others (EAGLE, MTP) need heads that are not a model of their own, so they decode plainly."""
    spec = ns.speculative_config
    if spec is None:
        return Speculative()
    if not isinstance(spec, dict):
        raise WorkloadExit(f"ValueError: --speculative-config must be a JSON object, got {spec!r}")
    method, k = spec.get("method"), spec.get("num_speculative_tokens")
    if method not in ("ngram", "draft_model"):
        logs.append(f"WARNING kubesim: speculative method {method!r} is not modelled; decoding without it")
        return Speculative()
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise WorkloadExit(f"ValueError: num_speculative_tokens must be a positive integer, got {k!r}")
    draft = None
    if method == "draft_model":
        if not isinstance(spec.get("model"), str) or not spec["model"]:
            raise WorkloadExit("ValueError: the draft_model method needs the draft's `model` path")
        try:
            draft = hw.resolve_model(spec["model"], ctx.annotations.get(DRAFT_ARCH_ANNOTATION))
        except ValueError as e:
            raise WorkloadExit(f"kubesim: {e}") from None
    acceptance = hw.float_setting(ctx, "spec-acceptance", NGRAM_ACCEPTANCE if draft is None else DRAFT_MODEL_ACCEPTANCE)
    if acceptance > 1:
        raise WorkloadExit(f"kubesim: spec-acceptance must be at most 1, got {acceptance!r}")
    drafting = "ngram" if draft is None else f"draft model {draft.name}"
    logs.append(f"INFO [speculative.py] {drafting} speculative decoding: {k} tokens a step, acceptance {acceptance:g}")
    return Speculative(k, acceptance, draft)


def _tier(tokens: int, backend: str, block_size: int, per_token: float, ranks: int, gpu: Gpu,
          phys: Physics) -> TierConfig | None:
    """The CPU tier of `tokens` tokens per rank, in whole blocks (None when it holds none)."""
    blocks = tokens // block_size
    if blocks <= 0:
        return None
    return TierConfig(blocks=blocks, backend=backend, block_bytes=block_size * per_token, ranks=ranks,
                      link_bytes_per_s=gpu.host_link * phys.host_link_fraction)


def _vllm_tier(ns: argparse.Namespace, gpu: Gpu, per_token: float, block_size: int, phys: Physics,
               logs: list[str]) -> TierConfig | None:
    """vLLM's `--kv-offloading-size` GiB, summed over the TP x PP ranks, each rank holding its share."""
    if ns.kv_offloading_size is None:
        return None
    if ns.kv_offloading_size <= 0:
        raise WorkloadExit(f"ValueError: kv_offloading_size must be positive, got {ns.kv_offloading_size}")
    ranks = ns.tensor_parallel_size * ns.pipeline_parallel_size
    backend = ns.kv_offloading_backend or "native"
    tokens = cap.host_tier_tokens("vllm", ns.kv_offloading_size / ranks, per_token, block_size)
    logs.append(f"INFO [kv_offload] CPU KV offloading ({backend}): {tokens // block_size:,} blocks of "
                f"{block_size} tokens per rank ({ns.kv_offloading_size} GiB over {ranks} rank(s))")
    return _tier(tokens, backend, block_size, per_token, ranks, gpu, phys)


def _arch(model: str, ctx: PodContext, aliases: list[str]) -> cap.ModelArch:
    try:
        return hw.resolve_model(model, ctx.annotations.get(hw.ARCH_ANNOTATION), aliases)
    except ValueError as e:
        raise WorkloadExit(f"kubesim: {e}") from None


def _core(
    ctx: PodContext, arch: cap.ModelArch, wbytes: float, ranks: int, engine: str, **resolved
) -> tuple[CoreConfig, startup.Phases, float, float]:
    """The core config with the pod's physics and the weights split over `ranks` GPUs, its start-up phases and
    time (0.5 s under `--fast-start`) and the pod's time scale: the part both engines resolve alike."""
    phys = hw.physics_for(ctx, startup.ENGINE_INIT_S[engine])
    scale = hw.float_setting(ctx, "time-scale", 1.0)
    rank_bytes = arch.weights_bytes(wbytes) / ranks
    core = CoreConfig(model=arch, weight_bytes_rank=rank_bytes, physics=phys, **resolved)
    phases = hw.startup_phases(ctx, resolved["gpu"], rank_bytes, ranks, phys)
    return core, phases, 0.5 if ctx.fast_start else phases.total_s / scale, scale


def _vllm_cache_info(ns: argparse.Namespace, prefix_caching: bool, blocks: int, block_size: int,
                     max_len: int) -> dict[str, str]:
    """vLLM's `cache_config_info` labels, as the engine exports them."""
    capacity = blocks * block_size
    # vLLM 0.32.0's CacheConfig fields, as the real CPU build exports them (bench/real_engine.py compares them).
    return {
        "_block_size_resolved": "True",
        "block_size": str(block_size),
        "cache_dtype": ns.kv_cache_dtype,
        "cache_hit_alignment_tokens": "None",
        "effective_attention_block_size": str(block_size),
        "enable_mamba_shared_prefix_checkpoint": "False",
        "enable_prefix_caching": str(prefix_caching),
        "gpu_memory_utilization": str(ns.gpu_memory_utilization),
        "hash_block_size": "None",
        "is_attention_free": "False",
        "kv_cache_dtype_skip_layers": "[]",
        "kv_cache_layout": "None",
        "kv_cache_max_concurrency": f"{capacity / max_len:.2f}",
        "kv_cache_memory_bytes": str(ns.kv_cache_memory_bytes),
        "kv_cache_size_tokens": str(capacity),
        "kv_offloading_backend": str(ns.kv_offloading_backend),
        "kv_offloading_size": str(ns.kv_offloading_size),
        "kv_sharing_fast_prefill": str(bool(ns.kv_sharing_fast_prefill)),
        "mamba_block_size": "None",
        "mamba_cache_dtype": ns.mamba_cache_dtype,
        "mamba_cache_mode": "none",
        "mamba_page_size_padded": "None",
        "mamba_ssm_cache_dtype": ns.mamba_ssm_cache_dtype,
        "num_cpu_blocks": "None",
        "num_gpu_blocks": str(blocks),
        "num_gpu_blocks_override": str(ns.num_gpu_blocks_override),
        "prefix_cache_retention_interval": "0",
        "prefix_caching_hash_algo": ns.prefix_caching_hash_algo,
        "prefix_match_unit": "None",
        "replayssm_buffer_len": "16",
        "skip_page_size_padded": "None",
        "sliding_window": "None",
        "swa_bounded_replay": "True",
        "use_kda_recoverssm": "False",
        "use_replayssm": "False",
        "user_specified_block_size": str(ns.block_size is not None),
    }


def _vllm_kv_role(ns: argparse.Namespace) -> str | None:
    """The KV-transfer role of --kv-transfer-config (None without one), refused as vLLM refuses it."""
    kv_cfg = ns.kv_transfer_config if isinstance(ns.kv_transfer_config, dict) else None
    if ns.kv_transfer_config is not None and kv_cfg is None:
        raise WorkloadExit("argument --kv-transfer-config: expected a JSON object")
    role = {"kv_producer": "producer", "kv_consumer": "consumer", "kv_both": "both"}.get(
        (kv_cfg or {}).get("kv_role", "")
    )
    if kv_cfg is not None and role is None:
        raise WorkloadExit(
            f"ValueError: Unsupported kv_role: {kv_cfg.get('kv_role')}. Supported roles are "
            "['kv_producer', 'kv_consumer', 'kv_both']"
        )
    return role


# Each engine's refusals of its own arguments, in the order the engine checks them: (refused, message).
_VLLM_PARALLEL_CHECKS = (
    (lambda ns, arch: ns.tensor_parallel_size < 1 or ns.pipeline_parallel_size < 1,
     lambda ns, arch: "ValueError: tensor_parallel_size and pipeline_parallel_size must be >= 1"),
    (lambda ns, arch: arch.heads % ns.tensor_parallel_size,
     lambda ns, arch: f"ValueError: Total number of attention heads ({arch.heads}) must be divisible by "
                      f"tensor parallel size ({ns.tensor_parallel_size})."),
)
_VLLM_CACHE_CHECKS = (
    (lambda ns, arch: not 0 < ns.gpu_memory_utilization <= 1,
     lambda ns, arch: f"ValueError: GPU memory utilization must be within (0, 1]. Got {ns.gpu_memory_utilization}."),
    (lambda ns, arch: (ns.block_size or 16) not in (1, 8, 16, 32, 64, 128, 256),
     lambda ns, arch: f"argument --block-size: invalid choice: {ns.block_size or 16}"),
)
_SGLANG_PARALLEL_CHECKS = (
    (lambda ns, arch: ns.tp_size < 1 or arch.heads % ns.tp_size,
     lambda ns, arch: f"AssertionError: Number of attention heads ({arch.heads}) must be divisible by tp "
                      f"({ns.tp_size})"),
)

# EngineSpec fields that are a flag's value as parsed: (field, the flag's argparse dest).
_VLLM_FIELDS = (("model", "model"), ("port", "port"), ("max_loras", "max_loras"),
                ("kv_cache_dtype", "kv_cache_dtype"), ("max_queued_requests", "max_num_queued_reqs"),
                ("max_queued_tokens", "max_num_queued_tokens"), ("custom_buckets", "custom_histogram_buckets"))
_SGLANG_FIELDS = (("model", "model_path"), ("port", "port"), ("max_loras", "max_loras_per_batch"),
                  ("enable_metrics", "enable_metrics"), ("kv_cache_dtype", "kv_cache_dtype"),
                  ("max_queued_requests", "max_queued_requests"))
# SGLang's latency-bucket flags, by the histogram they set.
_SGLANG_BUCKETS = (("ttft", "bucket_time_to_first_token"), ("itl", "bucket_inter_token_latency"),
                   ("e2e", "bucket_e2e_request_latency"))


def _refuse(checks, ns: argparse.Namespace, arch: cap.ModelArch) -> None:
    for refused, message in checks:
        if refused(ns, arch):
            raise WorkloadExit(message(ns, arch))


def _fields(ns: argparse.Namespace, table) -> dict:
    return {name: getattr(ns, dest) for name, dest in table}


def _vllm_max_len(ns: argparse.Namespace, arch: cap.ModelArch, blocks: int, block_size: int,
                  per_token: float) -> int:
    """--max-model-len resolved (-1: what the cache holds), refused when the model or the cache is shorter."""
    capacity = blocks * block_size
    max_len = ns.max_model_len if ns.max_model_len not in (None, -1) else arch.max_context
    if ns.max_model_len == -1:
        max_len = min(arch.max_context, capacity)
    if max_len > arch.max_context:
        raise WorkloadExit(
            f"ValueError: User-specified max_model_len ({max_len}) is greater than the derived max_model_len "
            f"(max_position_embeddings={arch.max_context} in model's config.json). To allow overriding this "
            "maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1."
        )
    if max_len > capacity:
        raise WorkloadExit(cap.vllm_max_model_len_message(max_len, per_token, blocks, block_size))
    return max_len


def _vllm_blocks(ns: argparse.Namespace, gpu: Gpu, arch: cap.ModelArch, kv_bytes: float, wbytes: float,
                 batched: int, draft: cap.ModelArch | None) -> int:
    """The KV block pool vLLM profiles on one GPU (or --num-gpu-blocks-override); none left is refused."""
    blocks, _budget = cap.vllm_num_gpu_blocks(
        gpu, arch, gpu_memory_utilization=ns.gpu_memory_utilization, tp=ns.tensor_parallel_size,
        pp=ns.pipeline_parallel_size, block_size=ns.block_size or 16, kv_bytes=kv_bytes, weight_bytes=wbytes,
        max_num_batched_tokens=batched, kv_cache_memory_bytes=ns.kv_cache_memory_bytes, draft=draft,
    )
    blocks = ns.num_gpu_blocks_override or blocks
    if blocks <= 0:
        raise WorkloadExit(cap.VLLM_NO_CACHE_MEMORY)
    return blocks


def vllm_spec(ns: argparse.Namespace, ctx: PodContext) -> EngineSpec:
    """The simulated vLLM instance a `vllm serve` command line describes on this pod's GPUs."""
    logs: list[str] = []
    gpu = hw.pod_gpu(ctx, logs)
    arch = _arch(ns.model, ctx, ns.served_model_name or [])
    tp, pp = ns.tensor_parallel_size, ns.pipeline_parallel_size
    _refuse(_VLLM_PARALLEL_CHECKS, ns, arch)
    dp = ns.data_parallel_size_local or ns.data_parallel_size
    hw.check_gpus(ctx, -(-tp * pp * dp // hw.node_count(ns.nnodes)))
    _refuse(_VLLM_CACHE_CHECKS, ns, arch)
    batched = ns.max_num_batched_tokens or cap.vllm_default_batched_tokens(gpu)
    block_size = ns.block_size or 16
    kv_bytes = cap.kv_dtype_bytes(ns.kv_cache_dtype, arch)
    wbytes = cap.weight_bytes_per_param(ns.quantization, arch.dtype_bytes)
    speculative = _vllm_speculative(ns, ctx, logs)
    draft = speculative.draft
    draft_rank = draft.weights_bytes(draft.dtype_bytes, tp) if draft is not None else 0.0
    hw.load_weights(gpu, arch, arch.weights_bytes(wbytes, tp, pp) + draft_rank, logs, sglang=False)
    blocks = _vllm_blocks(ns, gpu, arch, kv_bytes, wbytes, batched, draft)
    per_token = arch.kv_bytes_per_token(kv_bytes, tp) / pp
    max_len = _vllm_max_len(ns, arch, blocks, block_size, per_token)
    chunked = ns.enable_chunked_prefill is not False
    if not chunked and ns.max_num_batched_tokens is None:
        batched = max(max_len, 2048)
    role = _vllm_kv_role(ns)
    core, phases, startup_s, scale = _core(
        ctx, arch, wbytes, tp * pp, "vllm", gpu=gpu, tp=tp, num_blocks=blocks, block_size=block_size,
        max_num_seqs=ns.max_num_seqs or cap.vllm_default_max_num_seqs(gpu), max_num_batched_tokens=batched,
        max_model_len=max_len, kv_bytes_per_token_rank=per_token, prefix_caching=ns.enable_prefix_caching is not False,
        chunked_prefill=chunked, kv_role=role, reserve_null_block=True, seed=ns.seed or ctx.seed,
    )
    core.cpu_tier = _vllm_tier(ns, gpu, per_token, block_size, core.physics, logs)
    core.spec_tokens, core.spec_acceptance, core.draft = speculative.tokens, speculative.acceptance, draft
    if draft is not None:  # its KV in the model's KV dtype, in the same blocks (`capacity.arch.vllm_num_gpu_blocks`)
        core.draft_kv_bytes_per_token_rank = draft.kv_bytes_per_token(kv_bytes, tp)
    enable_lora = bool(ns.enable_lora)
    if enable_lora:
        core.max_loras, core.max_cpu_loras = ns.max_loras, ns.max_cpu_loras or ns.max_loras
        core.lora_load_s = lora_load_seconds(arch, ns.max_lora_rank, core.physics)
    runtime = ctx.env.get("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "").lower() in ("1", "true")
    names = ns.served_model_name or [ns.model]
    capacity = blocks * block_size
    logs += [
        f"INFO [api_server.py] vLLM API server version {VLLM_VERSION}",
        f"INFO [api_server.py] args: model={ns.model} served_model_name={names} tensor_parallel_size={tp}",
        f"INFO [gpu_model_runner.py] Model loading took {core.weight_bytes_rank / GIB:.4f} GiB",
        f"INFO [kv_cache_utils.py] GPU KV cache size: {capacity:,} tokens",
        f"INFO [kv_cache_utils.py] Maximum concurrency for {max_len:,} tokens per request: {capacity / max_len:.2f}x",
        f"INFO [api_server.py] Starting vLLM API server 0 on http://0.0.0.0:{ns.port}",
    ]
    return EngineSpec(
        kind="vllm", served_names=names, core=core, startup_s=startup_s, phases=phases, time_scale=scale,
        enable_lora=enable_lora,
        runtime_lora=runtime and enable_lora, lora_modules=_lora_modules(ns.lora_modules or []),
        log_stats=not ns.disable_log_stats, pd_role=_pd(role), data_parallel=max(1, dp),
        cache_info=_vllm_cache_info(ns, core.prefix_caching, blocks, block_size, max_len), logs=logs,
        sleep=sleep_config(ns.enable_sleep_mode, ctx.env, _wake_facts(ctx, core, gpu)),
        **_fields(ns, _VLLM_FIELDS),
    )


def _wake_facts(ctx: PodContext, core, gpu: Gpu) -> WakeFacts:
    """What a wake from sleep (vLLM) or a resume (SGLang) takes on this pod: its weights per GPU over its host link."""
    return WakeFacts.for_gpu(core.weight_bytes_rank, gpu, host_link_fraction=core.physics.host_link_fraction,
                             storage_bytes_per_s=core.physics.storage_bandwidth,
                             overhead_s=hw.float_setting(ctx, "wake-overhead-seconds", WAKE_OVERHEAD_S))


def _pd(role: str | None) -> str | None:
    return {"producer": "prefill", "consumer": "decode"}.get(role or "")


def _lora_modules(items: list[str]) -> dict[str, str]:
    import json

    out = {}
    for item in items:
        if item.startswith("{"):
            d = json.loads(item)
            out[d["name"]] = d["path"]
        elif "=" in item:
            name, path = item.split("=", 1)
            out[name] = path
        else:
            out[item] = item
    return out


def _sglang_tokens(ns: argparse.Namespace, gpu: Gpu, arch: cap.ModelArch, mem_fraction: float, kv_bytes: float,
                   wbytes: float) -> int:
    """SGLang's static token pool (at most --max-total-tokens); none left is refused."""
    tokens = cap.sglang_max_total_tokens(gpu, arch, mem_fraction_static=mem_fraction, tp=ns.tp_size,
                                         page_size=ns.page_size or 1, kv_bytes=kv_bytes, weight_bytes=wbytes)
    if ns.max_total_tokens:
        tokens = min(tokens, ns.max_total_tokens)
    if tokens <= 0:
        raise WorkloadExit(
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
            f"Current value: mem_fraction_static={mem_fraction}"
        )
    return tokens


def sglang_spec(ns: argparse.Namespace, ctx: PodContext) -> EngineSpec:
    """The simulated SGLang server a `sglang.launch_server` command line describes on this pod's GPUs."""
    logs: list[str] = []
    gpu = hw.pod_gpu(ctx, logs)
    arch = _arch(ns.model_path, ctx, [ns.served_model_name] if ns.served_model_name else [])
    tp = ns.tp_size
    _refuse(_SGLANG_PARALLEL_CHECKS, ns, arch)
    hw.check_gpus(ctx, -(-tp * ns.pp_size * ns.dp_size // hw.node_count(ns.nnodes)))
    chunk = ns.chunked_prefill_size
    if chunk is None:
        chunk = cap.sglang_default_chunked_prefill(gpu)
    mem_fraction = ns.mem_fraction_static or cap.sglang_default_mem_fraction(gpu, chunk)
    kv_bytes = cap.kv_dtype_bytes(ns.kv_cache_dtype, arch)
    wbytes = cap.weight_bytes_per_param(ns.quantization, arch.dtype_bytes)
    hw.load_weights(gpu, arch, arch.weights_bytes(wbytes, tp), logs, sglang=True)
    tokens = _sglang_tokens(ns, gpu, arch, mem_fraction, kv_bytes, wbytes)
    ctx_len = ns.context_length or arch.max_context
    max_running = ns.max_running_requests or min(min(max(int(tokens / ctx_len * 512), 2048), 4096), tokens // 2)
    unit = 16  # the pool is simulated in 16-token units; hit and usage figures are reported in tokens
    per_token = arch.kv_bytes_per_token(kv_bytes, tp)
    role = {"prefill": "producer", "decode": "consumer"}.get(ns.disaggregation_mode)
    core, phases, startup_s, scale = _core(
        ctx, arch, wbytes, tp, "sglang", gpu=gpu, tp=tp, num_blocks=tokens // unit, block_size=unit,
        max_num_seqs=max_running, max_num_batched_tokens=chunk if chunk > 0 else ns.max_prefill_tokens,
        max_model_len=ctx_len, kv_bytes_per_token_rank=per_token, prefix_caching=not ns.disable_radix_cache,
        chunked_prefill=chunk > 0, kv_role=role, reserve_null_block=False,
        seed=ns.random_seed if ns.random_seed is not None else ctx.seed,
    )
    if ns.enable_hierarchical_cache:
        # --hicache-size whole GB per rank overrides --hicache-ratio (host pool = ratio x device pool).
        host = int(ns.hicache_size * 1e9 // per_token) if ns.hicache_size else int(ns.hicache_ratio * tokens)
        core.cpu_tier = _tier(host, "hicache", unit, per_token, tp, gpu, core.physics)
        logs.append(f"[INFO] Allocating host KV cache: {host} tokens, write policy {ns.hicache_write_policy}")
    logs += [
        f"[INFO] server_args=ServerArgs(model_path='{ns.model_path}', tp_size={tp}, "
        f"mem_fraction_static={mem_fraction}, chunked_prefill_size={chunk}, port={ns.port})",
        f"[INFO] Load weight end. mem usage={core.weight_bytes_rank / GIB:.2f} GB.",
        f"[INFO] KV Cache is allocated. #tokens: {tokens}, K size: {tokens * per_token / 2 / GIB:.2f} GB, "
        f"V size: {tokens * per_token / 2 / GIB:.2f} GB",
        f"[INFO] max_total_num_tokens={tokens}, chunked_prefill_size={chunk}, max_prefill_tokens="
        f"{ns.max_prefill_tokens}, max_running_requests={max_running}, context_len={ctx_len}",
        f"[INFO] Uvicorn running on http://{ns.host}:{ns.port} (Press CTRL+C to quit)",
        "[INFO] The server is fired up and ready to roll!",
    ]
    if ns.enable_lora or ns.lora_paths:  # the batch's adapter slots; adapters load into host memory when added
        core.max_loras = core.max_cpu_loras = ns.max_loras_per_batch
    return EngineSpec(
        kind="sglang", served_names=[ns.served_model_name or ns.model_path], core=core, startup_s=startup_s,
        phases=phases,
        time_scale=scale, enable_lora=bool(ns.enable_lora or ns.lora_paths), runtime_lora=True,
        lora_modules=_lora_modules(ns.lora_paths or []), pd_role=_pd(role), max_total_tokens=tokens,
        page_size=ns.page_size or 1, mem_fraction=mem_fraction, logs=logs,
        sglang_buckets={key: getattr(ns, dest) for key, dest in _SGLANG_BUCKETS if getattr(ns, dest)},
        sleep=SleepConfig(bool(ns.enable_memory_saver), True, _wake_facts(ctx, core, gpu),
                          weights_backup=bool(ns.enable_weights_cpu_backup)),
        **_fields(ns, _SGLANG_FIELDS),
    )
