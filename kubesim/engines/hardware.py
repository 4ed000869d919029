"""Which GPU and model a simulated engine runs (the GPU of its node and the model its flags name), and what the
pod's hardware makes of them: the physics settings its annotations override, whether the weights fit its GPUs,
and its start-up phases.

The facts and the arithmetic live in the shared `capacity` package (imported by the control plane too);
this module only resolves a pod's model path to an architecture the way the engines read config.json.
"""

from __future__ import annotations

import json
import os

from capacity import arch as cap
from capacity import startup
from capacity.arch import ModelArch
from capacity.gpus import GPUS, HOST_LINK_FRACTION, Gpu
from capacity.known import KNOWN_MODELS
from kubesim.engines.coreconfig import Physics
from kubesim.workload import PodContext, WorkloadExit

DEFAULT_GPU = "h100-sxm-80gb"
# Unknown models get this shape (an 8B Llama) unless the pod passes an architecture.
FALLBACK_ARCH = KNOWN_MODELS["meta-llama/Llama-3.1-8B-Instruct"]
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
        if candidate in KNOWN_MODELS:
            return KNOWN_MODELS[candidate]
        tail = candidate.rstrip("/").split("/")[-1].lower()
        for name, arch in KNOWN_MODELS.items():
            if name.split("/")[-1].lower() == tail:
                return arch
    return ModelArch(**{**FALLBACK_ARCH.__dict__, "name": model})


def float_setting(ctx: PodContext, name: str, default: float) -> float:
    raw = ctx.annotations.get(f"kubesim.io/{name}") or ctx.env.get("KUBESIM_" + name.upper().replace("-", "_"))
    if raw is None:
        raw = os.environ.get("KUBESIM_" + name.upper().replace("-", "_"))
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise WorkloadExit(f"kubesim: invalid {name}: {raw!r}") from None
    if value <= 0:
        raise WorkloadExit(f"kubesim: {name} must be positive, got {raw!r}")
    return value


def physics_for(ctx: PodContext, warmup_s: float) -> Physics:
    """Physical constants, each overridable by a `kubesim.io/<name>` annotation."""
    return Physics(
        prefill_flops_fraction=float_setting(ctx, "prefill-flops-fraction", 0.5),
        decode_bandwidth_fraction=float_setting(ctx, "decode-bandwidth-fraction", 0.7),
        step_overhead_s=float_setting(ctx, "step-overhead-ms", 2.0) / 1000,
        kv_link_bandwidth=float_setting(ctx, "kv-link-gbps", 400.0) * 1e9 / 8,
        storage_bandwidth=float_setting(ctx, "storage-gbps", startup.CLUSTER_CACHE_BYTES_PER_S * 8 / 1e9) * 1e9 / 8,
        warmup_s=float_setting(ctx, "warmup-seconds", warmup_s),
        host_link_fraction=float_setting(ctx, "host-link-fraction", HOST_LINK_FRACTION),
    )


def pod_gpu(ctx: PodContext, logs: list[str]) -> Gpu:
    if ctx.gpu_key in GPUS:
        return GPUS[ctx.gpu_key]
    logs.append(f"WARNING kubesim: no known GPU on this node ({ctx.gpu_key!r}); simulating {DEFAULT_GPU}")
    return GPUS[DEFAULT_GPU]


def load_weights(gpu: Gpu, arch: cap.ModelArch, weights_rank: float, logs: list[str], sglang: bool) -> None:
    """Weights that do not fit the GPU fail at load with PyTorch's out-of-memory error, as on real GPUs."""
    if cap.weights_fit(gpu, weights_rank):
        return
    oom = cap.cuda_oom_message(gpu, arch, weights_rank)
    if sglang:
        lines = ["[ERROR] Scheduler hit an exception: Traceback (most recent call last):", oom,
                 "[ERROR] Exception: Rank 0 scheduler is dead. Please check if there are relevant logs.", oom]
    else:
        lines = ["INFO [gpu_model_runner.py] Starting to load model " + arch.name + "...",
                 "ERROR [core.py] EngineCore failed to start.", "Traceback (most recent call last):", oom]
    raise WorkloadExit(oom, logs=logs + lines)


def node_count(value: str) -> int:
    """`--nnodes` as an int (a value the pod's environment did not resolve counts as one node)."""
    try:
        return max(1, int(value))
    except (TypeError, ValueError):
        return 1


def check_gpus(ctx: PodContext, needed: int) -> None:
    """The ranks this pod hosts must fit its GPUs (multi-node engines split them across pods)."""
    if ctx.gpu_count and needed > ctx.gpu_count:
        raise WorkloadExit(
            f"ValueError: The number of required GPUs ({needed}) exceeds the total number of available GPUs "
            f"({ctx.gpu_count}) in the placement group."
        )


def startup_phases(ctx: PodContext, gpu: Gpu, rank_bytes: float, ranks: int, phys: Physics) -> startup.Phases:
    """The pod's start-up phases (capacity.startup): its ranks' weights read from where the pod finds them (a pod
    without a weights annotation reads them from a filled volume), `storage-gbps` being the cluster cache's rate."""
    pod_ranks = min(ranks, ctx.gpu_count) if ctx.gpu_count else ranks
    cache = ctx.weights_cache or "cluster"
    return startup.phases(
        gpu, pod_ranks, rank_bytes * pod_ranks, cache, init_s=phys.warmup_s,
        source_bytes_per_s=float_setting(ctx, "source-mbps", startup.SOURCE_BYTES_PER_S * 8 / 1e6) * 1e6 / 8,
        host_link_fraction=phys.host_link_fraction,
        read_bytes_per_s=phys.storage_bandwidth if cache != "node" else startup.NODE_DISK_BYTES_PER_S,
    )
