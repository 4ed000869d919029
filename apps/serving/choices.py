"""Vocabularies of serving: phases, pool roles, routing policies, autoscalers, GPU types."""

from django.db import models

from apps.catalog.choices import DeploymentMode, EngineKind
from capacity.gpus import choices as gpu_choices

__all__ = [
    "Autoscaler", "DeploymentMode", "EngineKind", "GpuType", "Phase", "PolicySelect", "PoolRole", "RatePolicyType",
    "RolloutStrategy", "RoutingPolicy",
]  # fmt: skip


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


# GPU kinds of the one GPU table (capacity.gpus); the key maps to a node selector when rendering.
GpuType = models.TextChoices(
    "GpuType", [(key.upper().replace("-", "_"), (key, label)) for key, label in gpu_choices()]
)


# Which pool roles each deployment mode needs (exactly these, one pool each).
MODE_POOL_ROLES: dict[str, frozenset[str]] = {
    DeploymentMode.STANDARD: frozenset({PoolRole.ENGINE}),
    DeploymentMode.SERVERLESS: frozenset({PoolRole.ENGINE}),
    DeploymentMode.PD_DISAGGREGATED: frozenset({PoolRole.PREFILL, PoolRole.DECODE}),
    DeploymentMode.MULTI_NODE: frozenset({PoolRole.LEADER}),
}

# Routing policies only one engine's router implements.
ENGINE_ONLY_ROUTING: dict[str, str] = {RoutingPolicy.CACHE_AWARE: EngineKind.SGLANG}
# Routing policy -> the router's own argument, per engine; a policy missing here is one that engine's router
# lacks (validation refuses it; the renderer writes the argument).
ROUTER_POLICIES: dict[str, dict[str, str]] = {
    EngineKind.VLLM: {RoutingPolicy.ROUND_ROBIN: "roundrobin", RoutingPolicy.SESSION: "session",
                      RoutingPolicy.PREFIX_AWARE: "prefixaware", RoutingPolicy.KV_AWARE: "kvaware"},
    EngineKind.SGLANG: {RoutingPolicy.PREFIX_AWARE: "cache_aware", RoutingPolicy.KV_AWARE: "cache_aware",
                        RoutingPolicy.CACHE_AWARE: "cache_aware", RoutingPolicy.ROUND_ROBIN: "round_robin"},
}


# Rate policies of the built-in autoscaler's behavior (Kubernetes' HPAScalingRules vocabulary).
class PolicySelect(models.TextChoices):
    MAX = "Max", "Max (most change)"
    MIN = "Min", "Min (least change)"
    DISABLED = "Disabled", "Disabled"


class RatePolicyType(models.TextChoices):
    PERCENT = "Percent", "Percent"
    PODS = "Pods", "Pods"


class RolloutStrategy(models.TextChoices):
    """How a new revision replaces the running one (apps/serving/rollout_spec.py)."""

    ROLLING = "rolling", "Rolling update"
    CANARY = "canary", "Canary (weighted steps, each judged)"
