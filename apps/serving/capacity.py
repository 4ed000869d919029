"""Capacity planning for catalog models: the domain functions behind `manage.py capacity`, the
`/api/v1/capacity/` endpoint, admission in `InferenceService.clean()` and the crash explanations.

The arithmetic is the shared `capacity` package (the same one kubesim's engines use); this module maps
catalog rows and engine settings onto it and words the results for people.
"""

from __future__ import annotations

from apps.catalog.choices import DTYPE_BYTES, EngineKind
from apps.catalog.engines import EngineSettingsError
from capacity import arch as a
from capacity.advisor import Load
from capacity.advisor import suggest as advise
from capacity.gpus import GPUS, Gpu
from capacity.parallel import ParallelismError, effective_parallelism
from capacity.plan import Knobs, Plan, describe_option, plan, what_fits

KV_CACHE_DTYPES = ("auto", "fp8")  # what the planner is asked about; engine spellings are mapped by `a.kv_dtype_bytes`


class CapacityInputError(ValueError):
    """Parameters the planner cannot use; `errors` maps the parameter name to the reason."""

    def __init__(self, errors: dict[str, str]):
        super().__init__("; ".join(f"{name}: {reason}" for name, reason in errors.items()))
        self.errors = errors


def arch_of(model) -> a.ModelArch:
    """The architecture facts of a catalog Model."""
    return a.ModelArch(
        name=model.name, params_b=model.parameters_billions, layers=model.layers, hidden=model.hidden_size,
        heads=model.attention_heads, kv_heads=model.kv_heads, head_dim=model.head_dim,
        max_context=model.max_context, active_params_b=model.active_parameters_billions,
        dtype_bytes=DTYPE_BYTES.get(model.dtype, 2),
    )


def source_id(model) -> str:
    """`org/name` of a source URI such as `hf://org/name@revision` (what people call the model)."""
    uri = model.source_uri.split("://", 1)[-1]
    return uri.split("@", 1)[0].rstrip("/")


def find_model(queryset, text: str):
    """The model named `text` (catalog name, or source id like `meta-llama/Llama-3.1-8B-Instruct`) among
    `queryset`; LookupError with a readable message when none or several match."""
    text = (text or "").strip()
    matches = list(queryset.filter(name=text))
    if not matches:
        wanted = text.split("://", 1)[-1].split("@", 1)[0].lower()
        matches = [m for m in queryset.filter(source_uri__icontains=wanted) if source_id(m).lower() == wanted]
    if len(matches) > 1:
        platform = [m for m in matches if m.tenant_id is None]
        matches = platform if len(platform) == 1 else matches
    if not matches:
        raise LookupError(f"unknown model {text!r}: give a catalog model name or a source id such as "
                          "meta-llama/Llama-3.1-8B-Instruct")
    if len(matches) > 1:
        raise LookupError(f"model {text!r} is ambiguous: {', '.join(str(m) for m in matches)}")
    return matches[0]


def _gpu(gpu_type: str) -> Gpu:
    if gpu_type not in GPUS:
        raise CapacityInputError({"gpu_type": f"unknown GPU type {gpu_type!r}; known: {', '.join(GPUS)}"})
    return GPUS[gpu_type]


def _knobs(kv_cache_dtype, gpu_memory_utilization, max_model_len, model, cpu_tier_gib=None) -> Knobs:
    errors = {}
    if cpu_tier_gib is not None and (not isinstance(cpu_tier_gib, int | float) or not 0 < cpu_tier_gib <= 1024):
        errors["cpu_tier_gib"] = "must be a number of GiB per GPU in (0, 1024]"
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        errors["kv_cache_dtype"] = f"must be one of {', '.join(KV_CACHE_DTYPES)}"
    if not isinstance(gpu_memory_utilization, int | float) or not 0 < gpu_memory_utilization <= 1:
        errors["gpu_memory_utilization"] = "must be a number in (0, 1]"
    if max_model_len is not None and (not isinstance(max_model_len, int) or max_model_len < 1):
        errors["max_model_len"] = "must be a positive integer"
    elif max_model_len is not None and max_model_len > model.max_context:
        errors["max_model_len"] = f"must not exceed the model's context of {model.max_context} tokens"
    if errors:
        raise CapacityInputError(errors)
    return Knobs(kv_cache_dtype=kv_cache_dtype, gpu_memory_utilization=float(gpu_memory_utilization),
                 max_model_len=max_model_len, cpu_tier_gib=cpu_tier_gib)


def describe(model, gpu_type: str, tp: int = 1, kv_cache_dtype: str = "auto", gpu_memory_utilization: float = 0.9,
             max_model_len: int | None = None, cpu_tier_gib: float | None = None) -> dict:
    """The capacity plan of a catalog model on `tp` GPUs of `gpu_type` (the keys of `capacity --json`), with
    the tokens a CPU tier of `cpu_tier_gib` per GPU would hold (vLLM's offloading).

    Raises CapacityInputError naming the parameter when one is unusable."""
    gpu = _gpu(gpu_type)
    if not isinstance(tp, int) or not 1 <= tp <= 64:
        raise CapacityInputError({"tp": "must be an integer from 1 to 64"})
    knobs = _knobs(kv_cache_dtype, gpu_memory_utilization, max_model_len, model, cpu_tier_gib)
    return plan(arch_of(model), gpu, tp, knobs).as_dict()


def suggest(model, rate: float, prompt_tokens: int, output_tokens: int, ttft_slo: float,
            kv_cache_dtype: str = "auto", gpu_memory_utilization: float = 0.9, gpu_types: list[str] | None = None,
            limit: int = 10) -> list[dict]:
    """GPU kind × TP × replicas that serve `rate` requests/s of `prompt_tokens` + `output_tokens` within
    a TTFT p95 of `ttft_slo` seconds, fewest GPUs first (see capacity.advisor for the model); `gpu_types`
    limits the kinds considered (e.g. those a cluster has)."""
    load = Load(rate, prompt_tokens, output_tokens, ttft_slo)
    errors = load.errors()
    unknown = [key for key in gpu_types or [] if key not in GPUS]
    if unknown:
        errors["gpu_types"] = f"unknown GPU type(s) {', '.join(unknown)}; known: {', '.join(GPUS)}"
    if errors:
        raise CapacityInputError(errors)
    _knobs(kv_cache_dtype, gpu_memory_utilization, None, model)
    offered = {key: GPUS[key] for key in gpu_types} if gpu_types else None
    return [s.as_dict() for s in advise(arch_of(model), load, kv_cache_dtype=kv_cache_dtype,
                                        gpu_memory_utilization=gpu_memory_utilization, gpus=offered, limit=limit)]


# -- admission ------------------------------------------------------------------------------------------

def draft_of(tenant_id, settings) -> a.ModelArch | None:
    """The architecture of the catalog model the settings name as speculative decoding's draft (None: none, or no
    model of that name for the tenant, which validation refuses)."""
    from apps.catalog.models import Model

    name = getattr(settings, "speculative_model", None)
    row = Model.objects.named_for_tenant(tenant_id, name) if isinstance(name, str) else None
    return None if row is None else arch_of(row)


def engine_knobs(engine: str, settings, gpu: Gpu, draft: a.ModelArch | None = None) -> Knobs:
    """What the engine will run with: the service's settings (and the draft model they name), else the engine's
    defaults."""
    return Knobs(
        kv_cache_dtype=settings.kv_cache_dtype or "auto",
        gpu_memory_utilization=settings.gpu_memory_utilization or a.VLLM_DEFAULT_GPU_MEMORY_UTILIZATION,
        max_model_len=settings.max_model_len,
        quantization=settings.quantization,
        engine=EngineKind.SGLANG if engine == EngineKind.SGLANG else EngineKind.VLLM,
        pp=settings.pipeline_parallel_size,
        cpu_tier_gib=settings.kv_offload.size_gib if settings.kv_offload is not None else None,
        draft=draft,
    )


def pool_plan(model, engine: str, settings, pool, draft: a.ModelArch | None = None) -> tuple[Plan, Knobs, Gpu] | None:
    """The plan of one pool's replica (None when the pool's GPU type is unknown)."""
    gpu = GPUS.get(pool.gpu_type)
    if gpu is None:
        return None
    knobs = engine_knobs(engine, settings, gpu, draft)
    try:
        tp = effective_parallelism(pool.gpus_per_replica, getattr(pool, "nodes_per_replica", 1),
                                   settings.tensor_parallel_size, settings.pipeline_parallel_size, engine=engine).tp
    except ParallelismError:
        return None  # the pool rules refuse it, naming the setting (serving/validation.py)
    return plan(arch_of(model), gpu, tp, knobs, search=False), knobs, gpu


def service_pool_plan(service, pool) -> tuple[Plan, Knobs, Gpu] | None:
    """The plan of a stored service's pool when its replica fits; None when there is no pool, model or runtime,
    the spec is unreadable, the GPU unknown, or the replica does not fit."""
    if pool is None or not service.model_id or not service.runtime_id:
        return None
    try:
        settings = service.engine_settings_obj()
    except EngineSettingsError:
        return None
    found = pool_plan(service.model, service.runtime.engine, settings, pool, draft_of(service.tenant_id, settings))
    return found if found is not None and found[0].fits else None


def admission(model, engine: str, settings, pools, draft: a.ModelArch | None = None
              ) -> tuple[dict[str, list[str]], list[str]]:
    """(errors by field, warnings) of the capacity rules for every pool of a service spec (with its draft model's
    weights and KV, where it names one)."""
    errors: dict[str, list[str]] = {}
    warnings: list[str] = []
    arch = arch_of(model)
    for pool in pools:
        found = pool_plan(model, engine, settings, pool, draft)
        if found is None:
            continue
        p, knobs, gpu = found
        where = f"{pool.role} pool ({describe_option(gpu, p.tp)})"
        if p.problem in ("weights", "kv_budget"):
            advice = what_fits(arch, gpu, knobs)
            errors.setdefault("pools", []).append(
                f"{pool.role}: {model.name} does not fit {describe_option(gpu, p.tp)}: {p.reason}"
                + (f"; {advice}." if advice else "; no single node fits it: multi-node needed.")
            )
        elif p.problem == "max_model_len" and knobs.engine == EngineKind.VLLM:
            unset = "" if settings.max_model_len else " (unset: the model's context)"
            errors.setdefault("engine_settings", []).append(
                f"max_model_len: {p.max_model_len}{unset} is above the KV cache capacity of the {where}: "
                f"{p.max_tokens} tokens ({p.num_blocks} blocks × 16). vLLM refuses to start: "
                f"{p.engine_error.removeprefix('ValueError: ')}"
            )
        elif p.problem == "tp":
            errors.setdefault("engine_settings", []).append(f"tensor_parallel_size: {p.reason}")
        elif p.fits and p.low_headroom:
            warnings.append(
                f"Low headroom on the {where}: the KV cache holds {p.max_tokens} tokens, "
                f"{p.max_concurrent_at_context} sequences of max_model_len {p.max_model_len} (fewer than 4); "
                f"requests queue or are preempted under load. Lower max_model_len, use fp8 KV cache or more GPUs."
            )
    return errors, warnings


def service_warnings(service) -> list[str]:
    """Warnings of a saved service: capacity (low headroom, or a spec admitted before the rules that no
    longer fits) and extra engine arguments saved before the engine-argument policy refused them; empty
    when the spec cannot be read."""
    from apps.catalog.engines import EngineSettings, EngineSettingsError, get_adapter

    try:
        settings = service.engine_settings_obj()
    except EngineSettingsError:
        return []
    if not service.model_id or not service.runtime_id:
        return []
    refused = get_adapter(service.runtime.engine).validate(EngineSettings(extra_args=settings.extra_args),
                                                           tag=service.runtime.tag)
    policy = [f"Engine arguments now refused: {refused['extra_args']}"] if "extra_args" in refused else []
    return policy + spec_warnings(service.model, service.runtime.engine, settings, service.spec_pools(),
                                  draft_of(service.tenant_id, settings))


def spec_warnings(model, engine: str, settings, pools, draft: a.ModelArch | None = None) -> list[str]:
    """`service_warnings` of a spec given by parts: a catalog Model, the runtime's engine, EngineSettings, the
    pools (anything with `role` and `gpu_type`, e.g. Pool or PoolSpec) and the draft model's architecture."""
    errors, warnings = admission(model, engine, settings, pools, draft)
    flagged = [f"Does not fit: {m}" for messages in errors.values() for m in messages]
    return flagged + warnings


def crash_explanation(model, engine: str, settings, pool) -> str:
    """The planner's reason a replica of this pool cannot start, or '' when it sees none."""
    found = pool_plan(model, engine, settings, pool)
    if found is None:
        return ""
    p, knobs, gpu = found
    if p.fits or (p.problem == "max_model_len" and knobs.engine != EngineKind.VLLM):
        return ""
    advice = what_fits(arch_of(model), gpu, knobs) if p.problem in ("weights", "kv_budget") else ""
    return f"capacity planner: {p.reason}" + (f"; {advice}" if advice else "")


def gib(n: float) -> str:
    """Bytes as GiB with one decimal, for tables."""
    return f"{n / 1024**3:.1f} GiB"
