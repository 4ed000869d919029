"""Manifest rendering: a ServiceSpec -> the complete, ordered list of Kubernetes objects (plain dicts).

Pure functions: no database, no cluster. The reconcile worker builds the spec with
`spec_from_service(service)`, renders with `render_service(spec)`, applies every object with
server-side apply and prunes objects labelled with the service uid that are no longer rendered.
"""

from __future__ import annotations

from apps.catalog.engines import get_adapter
from apps.serving.names import SERVICE_UID_LABEL, TENANT_LABEL, tenant_namespace
from apps.serving.rendering.extras import autoscaling_objects, model_cache_claim, tenant_objects
from apps.serving.rendering.gateway import gateway_objects
from apps.serving.rendering.kueue import KUEUE_KINDS, kueue_objects
from apps.serving.rendering.pods import needs_cache
from apps.serving.rendering.routers import ROUTER_PORT, RenderError, needs_router, router_objects, supported_routing
from apps.serving.rendering.spec import (
    AdapterSpec,
    AutoscalingSpec,
    CanarySpec,
    ModelSpec,
    PoolSpec,
    ServiceSpec,
    spec_from_service,
)
from apps.serving.rendering.weights import pod_security_labels, shared_cache
from apps.serving.rendering.workloads import engine_objects
from apps.serving.sharedcache import shared_claim

# Apply order: what others refer to comes first (namespace, quota, storage, RBAC, then workloads).
KIND_ORDER = (
    "Namespace", *KUEUE_KINDS, "ResourceQuota", "NetworkPolicy", "PersistentVolume", "PersistentVolumeClaim",
    "ConfigMap",
    "ServiceAccount", "Role", "RoleBinding",
    "Deployment", "LeaderWorkerSet", "Service", "PodDisruptionBudget", "HorizontalPodAutoscaler",
    "ScaledObject", "InferencePool", "HTTPRoute",
)


def _order(obj: dict) -> tuple[int, str]:
    return KIND_ORDER.index(obj["kind"]), obj["metadata"]["name"]


def render_service(spec: ServiceSpec) -> list[dict]:
    """Every object the service needs on its cluster, tenant Namespace and ResourceQuota included."""
    has_router = needs_router(spec)
    objects = tenant_objects(spec.tenant, spec.namespace, spec.tenant_gpu_quota, spec.api_server_cidrs,
                             spec.model_egress_cidrs, pod_security_labels(spec.node_model_volume))
    if spec.kueue is not None:
        objects += kueue_objects(spec.kueue, spec.tenant, spec.namespace)
    if needs_cache(spec):
        claim = model_cache_claim(spec)
        objects += shared_claim(shared_cache(spec), claim) if shared_cache(spec) else [claim]
    objects += engine_objects(spec, has_router)
    if spec.canary is not None:
        # The new revision's own unit (P/D pairs and multi-node groups whole); the router and the route split
        # the requests between the two.
        objects += engine_objects(spec.canary.unit, True)
    if has_router:
        objects += router_objects(spec)
    objects += autoscaling_objects(spec)
    if spec.has_gateway:
        objects += gateway_objects(spec)
    return sorted(objects, key=_order)


def service_objects(objects: list[dict]) -> list[dict]:
    """The objects that belong to one service (carry its uid): what pruning compares against."""
    return [o for o in objects if SERVICE_UID_LABEL in o["metadata"].get("labels", {})]


def service_endpoint(spec: ServiceSpec) -> str:
    """The in-cluster URL of the service's OpenAI-compatible API."""
    port = ROUTER_PORT if needs_router(spec) else get_adapter(spec.engine).port
    return f"http://{spec.name}.{spec.namespace}.svc.cluster.local:{port}"


__all__ = [
    "KIND_ORDER",
    "SERVICE_UID_LABEL",
    "TENANT_LABEL",
    "AdapterSpec",
    "AutoscalingSpec",
    "CanarySpec",
    "ModelSpec",
    "PoolSpec",
    "RenderError",
    "ServiceSpec",
    "render_service",
    "service_endpoint",
    "service_objects",
    "spec_from_service",
    "supported_routing",
    "tenant_namespace",
    "tenant_objects",
]
