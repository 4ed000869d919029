"""The live capacity check beside the service form: for each pool, whether the chosen model fits the
chosen GPUs with the form's engine settings, how many KV-cache tokens that leaves and how many
sequences of full context run at once. The arithmetic is `apps.serving.capacity` (one definition);
this module only reads the form and says "unavailable" when that module is not installed.

Each pool is judged at the tensor parallelism its replica will run with, `capacity.parallel.
effective_parallelism` (the fact admission, the planner and the renderer share): an unset TP on 4 GPUs is
TP 4, and a TP × PP that would leave GPUs idle is shown with the reason admission will give."""

from __future__ import annotations

import importlib

from capacity.parallel import ParallelismError, effective_parallelism


def _capacity_module():
    try:
        return importlib.import_module("apps.serving.capacity")
    except ImportError:
        return None


def _value(form, name, cast, default=None):
    raw = form.data.get(form.add_prefix(name)) if form.is_bound else form.initial.get(name)
    try:
        return cast(raw) if raw not in (None, "") else default
    except (TypeError, ValueError):
        return default


def capacity_context(form, pools) -> dict:
    """{"capacity": {"available": bool, "rows": [...], "note": str}} for the form's current values."""
    capacity = _capacity_module()
    if capacity is None or not hasattr(capacity, "describe"):
        return {"capacity": {"available": False, "rows": [],
                             "note": "The capacity check is not available in this installation."}}
    model_id = _value(form, "model", int)
    model = form.fields["model"].queryset.filter(pk=model_id).first() if model_id else None
    if model is None:
        return {"capacity": {"available": True, "rows": [], "note": "Choose a model to see whether it fits."}}
    runtime_id = _value(form, "runtime", int)
    runtime = form.fields["runtime"].queryset.filter(pk=runtime_id).first() if runtime_id else None
    engine = runtime.engine if runtime is not None else "vllm"
    tp, pp = _value(form, "tensor_parallel_size", int), _value(form, "pipeline_parallel_size", int, 1) or 1
    settings = {
        # The planner knows two KV-cache sizes: the model's dtype ("auto") and one byte ("fp8"); every
        # engine spelling of an fp8 cache (fp8_e4m3, fp8_e5m2, …) is the latter.
        "kv_cache_dtype": "fp8" if "fp8" in (_value(form, "kv_cache_dtype", str, "") or "") else "auto",
        "gpu_memory_utilization": _value(form, "gpu_memory_utilization", float, 0.9) or 0.9,
        "max_model_len": _value(form, "max_model_len", int),
        "cpu_tier_gib": _cpu_tier_gib(form),
    }
    rows = []
    for pool in pools:
        gpu_type = _value(pool, "gpu_type", str)
        if not gpu_type:
            continue
        try:
            parallel = effective_parallelism(_value(pool, "gpus_per_replica", int, 1) or 1,
                                             _value(pool, "nodes_per_replica", int, 1) or 1, tp, pp, engine=engine)
            described = capacity.describe(model, gpu_type, tp=parallel.tp, **settings)
        except ParallelismError as exc:
            rows.append({"role": pool.pool_role, "gpu_type": gpu_type, "fits": False, "tp": tp,
                         "reason": f"{exc.field}: {exc.message}"})
            continue
        except (ValueError, KeyError) as exc:
            rows.append({"role": pool.pool_role, "gpu_type": gpu_type, "fits": False, "reason": str(exc)})
            continue
        row = {"role": pool.pool_role, "gpu_type": gpu_type, **described}
        if not described.get("fits"):
            row["fits_on"] = _fits_on(capacity, model, settings | {"tp": parallel.tp})
        rows.append(row)
    return {"capacity": {"available": True, "rows": rows, "note": ""}}


def _cpu_tier_gib(form) -> float | None:
    """The form's KV-cache CPU tier in GiB per GPU, when it names one the planner can count (SGLang's whole GB
    as GiB); validation says what is wrong with the others."""
    backend, size = _value(form, "kv_offload_backend", str), _value(form, "kv_offload_size_gib", float)
    if not backend or size is None or not 0 < size <= 1024:
        return None
    if backend == "hicache":
        size = int(size * 1024**3 / 1e9) * 1e9 / 1024**3
    return size or None


def _fits_on(capacity, model, settings) -> list[str]:
    """The GPU types on which the model fits with the same settings (a suggestion beside a no)."""
    from apps.serving.choices import GpuType

    fitting = []
    for key, label in GpuType.choices:
        try:
            if capacity.describe(model, key, **settings).get("fits"):
                fitting.append(label)
        except (ValueError, KeyError):
            continue
    return fitting
