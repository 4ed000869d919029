"""The renderer's input: a plain, frozen description of one service and everything it refers to.

`render_service(spec)` never touches the database; `spec_from_service(service)` builds the spec from a
saved InferenceService (tenant, cluster, model, runtime, adapters, pools) in a fixed number of queries.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from apps.catalog.choices import DTYPE_BYTES
from apps.catalog.engines import EngineSettings
from apps.serving.choices import GpuType
from apps.serving.models import InferenceService
from apps.serving.names import HF_TOKEN_SECRET, tenant_namespace
from apps.serving.rendering.kueue import ClassSpec, FlavorQuota, KueueSpec, QueueQuota

MODES = ("standard", "pd_disaggregated", "multi_node", "serverless")
ROUTING_POLICIES = ("round_robin", "session", "prefix_aware", "kv_aware", "cache_aware")
AUTOSCALERS = ("none", "builtin", "hpa", "keda")
# How an engine pod reaches the model agent's node-local copy (the cluster's `node_model_volume`, rendering/weights.py).
NODE_MODEL_VOLUMES = ("none", "hostPath", "csi")

@dataclass(frozen=True)
class ModelSpec:
    """A base model: where its weights come from and its architecture facts."""

    name: str
    source_uri: str
    parameters: int  # total parameter count (not billions)
    layers: int
    hidden_size: int
    attention_heads: int
    kv_heads: int
    head_dim: int
    max_context: int
    dtype: str = "bfloat16"
    size_bytes: int | None = None
    platform_wide: bool = False  # a platform catalog entry: its cluster cache is one per cluster, not per tenant

    @property
    def weights_bytes(self) -> int:
        """Checkpoint size: the stored size when known, else parameters × bytes per parameter."""
        if self.size_bytes:
            return self.size_bytes
        return math.ceil(self.parameters * DTYPE_BYTES.get(self.dtype, 2))


@dataclass(frozen=True)
class AdapterSpec:
    """A LoRA adapter of the base model."""

    name: str
    source_uri: str
    rank: int


@dataclass(frozen=True)
class PoolSpec:
    """The replicas of one role: engine, prefill, decode or leader (a multi-node group). What the API,
    admin and commands save (`actions.save_service`) and what the renderer reads; defaults as a new Pool."""

    role: str
    replicas: int = 1
    min_replicas: int = 1
    max_replicas: int = 1
    gpus_per_replica: int = 1  # per pod; per node of the group for multi-node
    gpu_type: str = GpuType.H100_SXM_80GB.value
    nodes_per_replica: int = 1


@dataclass(frozen=True)
class AutoscalingSpec:
    """Which autoscaler scales the pools, and on which targets (see serving/autoscaling_spec.py)."""

    autoscaler: str = "none"
    targets: tuple[tuple[str, float], ...] = ()
    scale_up_stabilization_seconds: int | None = None
    scale_down_stabilization_seconds: int | None = None
    scale_to_zero_after_seconds: int | None = None
    when_idle: str = "delete"  # serving/idle_spec.py: "sleep" and "auto" render vLLM's sleep mode
    prometheus_url: str = "http://prometheus-operated.monitoring.svc:9090"

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> AutoscalingSpec:
        data = data or {}
        targets = data.get("targets") or {}
        return cls(
            autoscaler=data.get("autoscaler", "none"),
            targets=tuple(sorted((str(k), float(v)) for k, v in targets.items())),
            scale_up_stabilization_seconds=data.get("scale_up_stabilization_seconds"),
            scale_down_stabilization_seconds=data.get("scale_down_stabilization_seconds"),
            scale_to_zero_after_seconds=data.get("scale_to_zero_after_seconds"),
            when_idle=data.get("when_idle") or "delete",
            **({"prometheus_url": data["prometheus_url"]} if data.get("prometheus_url") else {}),
        )

    def target(self, name: str) -> float | None:
        return dict(self.targets).get(name)


@dataclass(frozen=True)
class ServiceSpec:
    """Everything needed to render one service's Kubernetes objects."""

    tenant: str  # slug
    tenant_gpu_quota: int
    name: str
    uid: str
    namespace: str
    generation: int
    mode: str
    engine: str  # "vllm" | "sglang"
    image: str
    tag: str
    model: ModelSpec
    pools: tuple[PoolSpec, ...]
    settings: EngineSettings = field(default_factory=EngineSettings)
    runtime_args: tuple[str, ...] = ()
    adapters: tuple[AdapterSpec, ...] = ()
    routing: str = "round_robin"
    autoscaling: AutoscalingSpec = field(default_factory=AutoscalingSpec)
    has_gateway: bool = False
    gateway_name: str = "inference-gateway"
    model_token_secret: str | None = None  # Secret with key "token" for gated Hugging Face models
    # Where the API server's proxy traffic comes from (the tenant NetworkPolicy lets it in); the worker fills
    # it from the cluster (`default/kubernetes` Endpoints) when the Cluster row names none.
    api_server_cidrs: tuple[str, ...] = ()
    # Where tenant pods may connect beyond their namespace and DNS: the model sources or an egress proxy.
    model_egress_cidrs: tuple[str, ...] = ()
    # The catalog model a draft-model speculative decoding names (`engine_settings.speculative_model`), fetched
    # like the service's own; None when the setting names none or no catalog model the tenant may use.
    draft_model: ModelSpec | None = None
    # A canary unit's revision (its objects and pods carry it, names.REVISION_LABEL); None for the stable one.
    unit_revision: int | None = None
    # During a canary rollout: the new revision's unit rendered beside this (stable) one, and its share.
    canary: CanarySpec | None = None
    # On a cluster with Kueue: the tenant's queue and the classes (rendering/kueue.py); None without Kueue.
    kueue: KueueSpec | None = None
    # How pods reach the node-local copy of cached weights: "none" (the cluster cache only), "hostPath" or "csi".
    node_model_volume: str = "none"

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"unknown deployment mode {self.mode!r}")
        if self.routing not in ROUTING_POLICIES:
            raise ValueError(f"unknown routing policy {self.routing!r}")
        if self.autoscaling.autoscaler not in AUTOSCALERS:
            raise ValueError(f"unknown autoscaler {self.autoscaling.autoscaler!r}")
        if self.node_model_volume not in NODE_MODEL_VOLUMES:
            raise ValueError(f"unknown node model volume {self.node_model_volume!r}")

    def pool(self, role: str) -> PoolSpec:
        for pool in self.pools:
            if pool.role == role:
                return pool
        raise ValueError(f"service {self.name} has no {role} pool (mode {self.mode})")

    @property
    def image_ref(self) -> str:
        return f"{self.image}:{self.tag}"


@dataclass(frozen=True)
class CanarySpec:
    """The new revision of a service running as its own unit beside the stable one during a canary rollout."""

    revision: int
    weight: int  # percent of the requests it gets
    unit: ServiceSpec  # named names.canary_name(service, revision), unit_revision=revision

    def __post_init__(self):
        if not 0 <= self.weight <= 100:
            raise ValueError(f"canary weight {self.weight} is not a percentage")


def spec_from_service(service) -> ServiceSpec:
    """The ServiceSpec of a saved InferenceService (reloaded with its related rows in 3 queries)."""
    service = (
        InferenceService.objects.select_related("tenant", "cluster", "model", "runtime")
        .prefetch_related("pools", "adapters")
        .get(pk=service.pk)
    )
    return _spec(service, service.model, service.runtime, list(service.adapters.all()), list(service.pools.all()))


def spec_from_revision(service, revision_spec: dict) -> ServiceSpec:
    """The ServiceSpec of a saved service as it was at a revision (`Revision.spec`, apps/serving/revisions.py):
    the revision's model, runtime, adapters, mode, settings, routing and pod fields; current replicas and bounds
    where the pool still exists."""
    from apps.catalog.models import Adapter, Model, Runtime
    from apps.serving.models import Pool

    service = InferenceService.objects.select_related("tenant", "cluster").get(pk=service.pk)
    live = {p.role: p for p in service.pools.all()}
    pools = []
    for stored in revision_spec["pools"]:
        pool = Pool(role=stored["role"], **{k: v for k, v in stored.items() if k != "role"})
        if stored["role"] in live:
            for name in ("replicas", "min_replicas", "max_replicas"):
                setattr(pool, name, getattr(live[stored["role"]], name))
        pools.append(pool)
    service.deployment_mode = revision_spec["deployment_mode"]
    service.engine_settings = revision_spec["engine_settings"]
    service.routing_policy = revision_spec["routing_policy"]
    model, runtime = Model.objects.get(pk=revision_spec["model"]), Runtime.objects.get(pk=revision_spec["runtime"])
    return _spec(service, model, runtime, list(Adapter.objects.filter(pk__in=revision_spec["adapters"])), pools)


def _spec(service, model, runtime, adapters: list, pools: list) -> ServiceSpec:
    return ServiceSpec(
        tenant=service.tenant.slug,
        tenant_gpu_quota=_gpu_ceiling(service),
        name=service.name,
        uid=str(service.uid),
        namespace=tenant_namespace(service.tenant.slug),
        generation=service.generation,
        mode=service.deployment_mode,
        engine=runtime.engine,
        image=runtime.image,
        tag=runtime.tag,
        runtime_args=tuple(runtime.default_args or ()),
        model=model_spec(model),
        draft_model=draft_model_spec(service.tenant_id, (service.engine_settings or {}).get("speculative_model")),
        adapters=tuple(
            AdapterSpec(a.name, a.source_uri, a.rank) for a in sorted(adapters, key=lambda a: a.name)
        ),
        settings=EngineSettings.from_dict(service.engine_settings),
        pools=tuple(
            PoolSpec(
                role=p.role, replicas=p.replicas, min_replicas=p.min_replicas, max_replicas=p.max_replicas,
                gpus_per_replica=p.gpus_per_replica, gpu_type=p.gpu_type, nodes_per_replica=p.nodes_per_replica,
            )
            for p in sorted(pools, key=lambda p: p.role)
        ),
        routing=service.routing_policy,
        autoscaling=AutoscalingSpec.from_dict(service.autoscaling),
        has_gateway=service.cluster.has_gateway,
        api_server_cidrs=tuple(service.cluster.api_server_cidrs or ()),
        model_egress_cidrs=tuple(service.cluster.model_egress_cidrs or ()),
        kueue=kueue_spec(service) if service.cluster.kueue_installed else None,
        node_model_volume=service.cluster.node_model_volume,
        # The tenant's Hugging Face token, applied by the reconciler as this Secret (workers/tenantsecrets.py).
        model_token_secret=HF_TOKEN_SECRET if service.tenant.hf_token else None,
    )


def kueue_spec(service) -> KueueSpec | None:
    """The Kueue objects' view of the service's cluster: every tenant queue there (None when the service's tenant
    has none). An entry for any GPU type ("*") becomes a flavor of every GPU type without its own entry."""
    from apps.serving.admission import cluster_queues
    from apps.tenancy.models import PriorityClass

    queues = cluster_queues(service.cluster)
    if service.tenant_id not in queues:
        return None
    classes = tuple(ClassSpec(c.name, c.value, c.preemption_policy, c.description) for c in PriorityClass.objects.all())
    running = service.tenant.priority_class_for(service.priority_class)
    running = next((c for c in classes if running and c.name == running.name), None)
    return KueueSpec(queue=service.tenant.slug, running=running, classes=classes,
                     queues=tuple(_queue_quota(q, service.cluster) for q in queues.values()))


def _queue_quota(queue, cluster) -> QueueQuota:
    from apps.tenancy.choices import ANY_GPU_TYPE

    types = [t for t in GpuType.values if t in queue.nominal or ANY_GPU_TYPE in queue.nominal]
    flavors = tuple(FlavorQuota(t, queue.nominal_of(queue.bucket(t)), queue.borrowing_limit.get(queue.bucket(t)),
                                queue.lending_limit.get(queue.bucket(t))) for t in types)
    return QueueQuota(name=queue.tenant.slug, namespace=tenant_namespace(queue.tenant.slug),
                      cohort=queue.cohort_name(cluster), flavors=flavors, weight=float(queue.weight))


def _gpu_ceiling(service) -> int:
    """The namespace's ResourceQuota on requested GPUs: the most the tenant's queue there may ever hold."""
    from apps.serving.quota import queue_for

    queue = queue_for(service.tenant_id, service.cluster_id)
    return 0 if queue is None else queue.total_ceiling()


def model_spec(model) -> ModelSpec:
    """The rendering facts of a catalog model (its weights, where they come from, platform-wide or private)."""
    return ModelSpec(
        name=model.name,
        source_uri=model.source_uri,
        parameters=round(model.parameters_billions * 1e9),
        layers=model.layers,
        hidden_size=model.hidden_size,
        attention_heads=model.attention_heads,
        kv_heads=model.kv_heads,
        head_dim=model.head_dim,
        max_context=model.max_context,
        dtype=model.dtype,
        platform_wide=model.tenant_id is None,
    )


def draft_model_spec(tenant_id: int, name) -> ModelSpec | None:
    """The catalog model a draft-model `speculative_model` names for the tenant (None: none named or none found,
    which the renderer refuses: a tenant's free text never reaches the engine)."""
    from apps.catalog.models import Model

    if not isinstance(name, str):
        return None
    draft = Model.objects.named_for_tenant(tenant_id, name)
    return None if draft is None else model_spec(draft)
