"""Vocabularies of serving: phases, pool roles, routing policies, autoscalers, GPU types."""

from django.db import models

from apps.catalog.choices import DeploymentMode, EngineKind

__all__ = ["Autoscaler", "DeploymentMode", "EngineKind", "GpuType", "Phase", "PoolRole", "RoutingPolicy"]


class Phase(models.TextChoices):
    PENDING = "Pending", "Pending"
    DEPLOYING = "Deploying", "Deploying"
    READY = "Ready", "Ready"
    DEGRADED = "Degraded", "Degraded"
    FAILED = "Failed", "Failed"
    DELETING = "Deleting", "Deleting"


class ReconcileResult(models.TextChoices):
    """What one reconcile pass came to (the `ReconcileRun` history and the worker's log)."""

    CONVERGED = "converged", "Converged"
    PROGRESSING = "progressing", "Progressing"
    FAILED = "failed", "Failed"
    RETRYING = "retrying", "Retrying (transient error)"
    DELETED = "deleted", "Deleted"
    BUSY = "busy", "Busy (another worker holds the service)"
    GONE = "gone", "Gone (no such service)"


class PoolRole(models.TextChoices):
    ENGINE = "engine", "Engine"
    PREFILL = "prefill", "Prefill"
    DECODE = "decode", "Decode"
    LEADER = "leader", "Leader/worker group"


class RoutingPolicy(models.TextChoices):
    ROUND_ROBIN = "round_robin", "Round robin"
    SESSION = "session", "Session affinity (sticky by header)"
    PREFIX_AWARE = "prefix_aware", "Prefix-aware"
    KV_AWARE = "kv_aware", "KV-cache-aware"
    CACHE_AWARE = "cache_aware", "Cache-aware (SGLang router)"


class Autoscaler(models.TextChoices):
    BUILTIN = "builtin", "Built-in (LLM signals)"
    HPA = "hpa", "Kubernetes HPA"
    KEDA = "keda", "KEDA"
    NONE = "none", "None (fixed replicas)"


class GpuType(models.TextChoices):
    """GPU kinds of reference/gpus-and-models.md; the key maps to a node selector when rendering."""

    H100_SXM_80GB = "h100-sxm-80gb", "NVIDIA H100 SXM 80GB"
    H100_PCIE_80GB = "h100-pcie-80gb", "NVIDIA H100 PCIe 80GB"
    H200_141GB = "h200-141gb", "NVIDIA H200 141GB"
    A100_SXM_80GB = "a100-sxm-80gb", "NVIDIA A100 SXM 80GB"
    A100_40GB = "a100-40gb", "NVIDIA A100 40GB"
    L40S_48GB = "l40s-48gb", "NVIDIA L40S 48GB"
    L4_24GB = "l4-24gb", "NVIDIA L4 24GB"
    RTX4090_24GB = "rtx4090-24gb", "NVIDIA RTX 4090 24GB"
    B200_180GB = "b200-180gb", "NVIDIA B200 180GB"
    MI300X_192GB = "mi300x-192gb", "AMD Instinct MI300X 192GB"


# Which pool roles each deployment mode needs (exactly these, one pool each).
MODE_POOL_ROLES: dict[str, frozenset[str]] = {
    DeploymentMode.STANDARD: frozenset({PoolRole.ENGINE}),
    DeploymentMode.SERVERLESS: frozenset({PoolRole.ENGINE}),
    DeploymentMode.PD_DISAGGREGATED: frozenset({PoolRole.PREFILL, PoolRole.DECODE}),
    DeploymentMode.MULTI_NODE: frozenset({PoolRole.LEADER}),
}

# Routing policies only one engine's router implements.
ENGINE_ONLY_ROUTING: dict[str, str] = {RoutingPolicy.CACHE_AWARE: EngineKind.SGLANG}
