"""The one definition of every label and annotation key, object-name rule, selector and namespace rule.

Rendering writes these labels, and reconcile, status, telemetry and inventory read them back, so each
key is spelled here once and imported everywhere (a key spelled twice drifted once: status read a role
label the renderer never wrote). Pure functions over plain values and anything with a service spec's
attributes (`name`, `uid`, `tenant`, `engine`): no database, no cluster.
"""

from __future__ import annotations

import hashlib
import re

# Keys kubesim reads too live in enginevocab.labels; re-exported here with every other name.
from capacity.kueue import PRIORITY_LABEL, QUEUE_LABEL
from enginevocab.labels import (  # noqa: F401
    ACTIVATION_HOLD_ANNOTATION,
    CANARY_WEIGHTS_ANNOTATION,
    FIELD_PREFIX,
    REVISION_LABEL,
)

MANAGED_BY = "controlplane"
FIELD_MANAGER = "controlplane"

# Recommended labels (DESIGN.md "Reconciliation").
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
NAME_LABEL = "app.kubernetes.io/name"
INSTANCE_LABEL = "app.kubernetes.io/instance"
COMPONENT_LABEL = "app.kubernetes.io/component"
TENANT_LABEL = f"{FIELD_PREFIX}/tenant"
SERVICE_UID_LABEL = f"{FIELD_PREFIX}/service-uid"
# The rank side of a multi-node group's pods: "leader" (serves the API) or "worker".
ROLE_LABEL = f"{FIELD_PREFIX}/role"
# The production-stack router tells prefill from decode pods by this label.
VLLM_ROUTER_MODEL_LABEL = "model"

# Annotations the renderer writes.
TEMPLATE_HASH_ANNOTATION = f"{FIELD_PREFIX}/pod-template-hash"
GENERATION_ANNOTATION = f"{FIELD_PREFIX}/generation"
AUTOSCALER_ANNOTATION = f"{FIELD_PREFIX}/autoscaler"
MIN_REPLICAS_ANNOTATION = f"{FIELD_PREFIX}/min-replicas"
MAX_REPLICAS_ANNOTATION = f"{FIELD_PREFIX}/max-replicas"
SCALE_TO_ZERO_ANNOTATION = f"{FIELD_PREFIX}/scale-to-zero"
SCALE_TO_ZERO_AFTER_ANNOTATION = f"{FIELD_PREFIX}/scale-to-zero-after-seconds"
MODEL_SOURCE_ANNOTATION = f"{FIELD_PREFIX}/model-source"

# Labels LeaderWorkerSet's controller puts on the pods of a group.
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"

# Components: the engine pools, the router, and the tenant- and model-level objects.
ENGINE_COMPONENTS = frozenset({"engine", "prefill", "decode"})
TENANT_COMPONENT = "tenant"
MODEL_CACHE_COMPONENT = "model-cache"

# Every object we manage carries this; the scraper lists pods with it.
MANAGED_SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY}"

NAMESPACE_PREFIX = "tenant-"
# Pod Security admission on every tenant namespace: baseline is enforced (no privileged pods, host access
# or added capabilities), restricted is warned about (vLLM runs non-root; SGLang images still need root).
POD_SECURITY_LABELS = {
    "pod-security.kubernetes.io/enforce": "baseline",
    "pod-security.kubernetes.io/enforce-version": "latest",
    "pod-security.kubernetes.io/warn": "restricted",
    "pod-security.kubernetes.io/warn-version": "latest",
}
EGRESS_POLICY_NAME = "tenant-egress"  # the tenant namespace's default-deny egress NetworkPolicy
ISOLATION_POLICY_NAME = "tenant-isolation"  # the tenant namespace's default-deny ingress NetworkPolicy
# The inference gateway's pods (deploy/kubernetes/base/gateway.yaml, installed in the kustomization's
# namespace): the only peer outside a tenant namespace its isolation policy admits, to engine and router ports.
GATEWAY_NAMESPACE = "controlplane"
GATEWAY_POD_LABELS = {NAME_LABEL: "controlplane", COMPONENT_LABEL: "gateway"}
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # set by the API server on every namespace
QUOTA_NAME = "gpu-quota"  # the tenant's ResourceQuota in its namespace
# Kueue: its labels on engine workloads and pods (defined once in capacity/kueue.py, which kubesim's Kueue imports
# too), and the tenant's LocalQueue in its namespace.
KUEUE_QUEUE_LABEL = QUEUE_LABEL
KUEUE_PRIORITY_LABEL = PRIORITY_LABEL
LOCAL_QUEUE_NAME = "gpus"
# Objects of service `x` are named `x` or `x<suffix>`: a sibling service named e.g. `x-router` would
# collide with them, so validation may refuse such names when `x` exists in the tenant.
RESERVED_SUFFIXES = ("-engine", "-prefill", "-decode", "-router", "-epp")
DNS_LABEL_MAX = 63
_HASH_CHARS = 8
_NON_DNS = re.compile(r"[^a-z0-9-]+")


def short_hash(text: str, n: int = _HASH_CHARS) -> str:
    """The first `n` hex digits of the text's SHA-256: a stable, DNS-safe disambiguator."""
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def dns_label(text: str) -> str:
    """`text` squeezed into a DNS-1123 label alphabet (lower case, digits, dashes)."""
    return _NON_DNS.sub("-", text.lower()).strip("-") or "x"


def fit_label(name: str, limit: int = DNS_LABEL_MAX) -> str:
    """`name` when it fits `limit` characters; else its head plus a hash of the whole, so two long
    names that share a head never map to one label."""
    if len(name) <= limit:
        return name
    head = name[: limit - _HASH_CHARS - 1].rstrip("-")
    return f"{head}-{short_hash(name)}"


def tenant_namespace(tenant_slug: str) -> str:
    """The namespace a tenant's services live in on every cluster: `tenant-<slug>`, unique per tenant."""
    return fit_label(f"{NAMESPACE_PREFIX}{tenant_slug}")


def object_name(spec, suffix: str = "") -> str:
    """`<service>` or `<service>-<suffix>`; service names are at most 40 characters, so it fits 63."""
    return f"{spec.name}-{suffix}" if suffix else spec.name


def canary_name(service_name: str, revision: int) -> str:
    """The name of a canary unit (the new revision beside the stable one): `<service>-r<revision>`; its objects
    are named from it as a service's are (`<service>-r7-prefill`), so they fit 63 characters too."""
    return f"{service_name}-r{revision}"


def _unit_labels(spec) -> dict[str, str]:
    """A canary unit's objects and pods carry its revision; the stable ones carry none (their selectors are
    immutable, and a canary pod must never match them)."""
    revision = getattr(spec, "unit_revision", None)
    return {REVISION_LABEL: str(revision)} if revision else {}


def cache_claim_name(spec) -> str:
    """The per-model cache PVC: one per model source in the tenant namespace, shared by services."""
    return model_claim_name(spec.model)


def model_claim_name(model) -> str:
    """The cache PVC of a model (anything with `name` and `source_uri`)."""
    return f"model-{dns_label(model.name)[:45]}-{short_hash(model.source_uri)}"


# The cluster cache of a platform-wide model is one per cluster; this prefix marks its key.
PLATFORM_CACHE_PREFIX = "platform"


def cluster_cache_key(spec) -> str:
    """The cluster cache an engine pod's weights come from: one per cluster for a platform-wide model (every
    tenant's services of it share it), the tenant namespace's claim for a tenant's private model."""
    claim = cache_claim_name(spec)
    return f"{PLATFORM_CACHE_PREFIX}/{claim}" if spec.model.platform_wide else f"{spec.namespace}/{claim}"


def service_selector(uid) -> str:
    """The label selector of every object of one service."""
    return f"{SERVICE_UID_LABEL}={uid}"


def selector(spec, component: str, **extra: str) -> dict[str, str]:
    """Labels that pick one component's pods of one service (stable across changes)."""
    return {INSTANCE_LABEL: spec.name, COMPONENT_LABEL: component, SERVICE_UID_LABEL: spec.uid,
            **_unit_labels(spec), **extra}


def labels(spec, component: str, name: str | None = None, **extra: str) -> dict[str, str]:
    """The recommended labels of every object of a service (DESIGN.md)."""
    return {
        MANAGED_BY_LABEL: MANAGED_BY,
        NAME_LABEL: name or spec.engine,
        INSTANCE_LABEL: spec.name,
        COMPONENT_LABEL: component,
        TENANT_LABEL: spec.tenant,
        SERVICE_UID_LABEL: spec.uid,
        **_unit_labels(spec),
        **_queue_labels(spec, component),
        **extra,
    }


def _queue_labels(spec, component: str) -> dict[str, str]:
    """On a cluster with Kueue, engine workloads and their pods name the tenant's LocalQueue and the class they
    run at, so Kueue's integrations queue them (routers hold no GPUs and are not queued)."""
    kueue = getattr(spec, "kueue", None)
    if kueue is None or component not in ENGINE_COMPONENTS:
        return {}
    running = {KUEUE_PRIORITY_LABEL: kueue.running.name} if kueue.running is not None else {}
    return {KUEUE_QUEUE_LABEL: kueue.local_queue, **running}


# The tenant's Hugging Face token in its namespace (key "token"): the reconciler applies it from the tenant's
# encrypted field (workers/tenantsecrets.py), never in the rendered objects; pods read it as HF_TOKEN.
HF_TOKEN_SECRET = "hf-token"
HF_TOKEN_KEY = "token"


def tenant_labels(tenant: str) -> dict[str, str]:
    """Tenant-level objects carry no service uid, so pruning a service never removes them."""
    return {MANAGED_BY_LABEL: MANAGED_BY, NAME_LABEL: "controlplane", INSTANCE_LABEL: tenant,
            COMPONENT_LABEL: TENANT_COMPONENT, TENANT_LABEL: tenant}


def model_cache_labels(tenant: str, model_name: str) -> dict[str, str]:
    """The per-model cache claim is shared by services, so it too carries no service uid."""
    return {MANAGED_BY_LABEL: MANAGED_BY, NAME_LABEL: MODEL_CACHE_COMPONENT, INSTANCE_LABEL: model_name,
            COMPONENT_LABEL: MODEL_CACHE_COMPONENT, TENANT_LABEL: tenant}


def pod_role(pod_labels: dict, default: str = "engine") -> str:
    """The pool role a pod or workload plays, read back from the labels the renderer wrote: `leader` or
    `worker` in a multi-node group, else its component (engine, prefill, decode, router)."""
    return pod_labels.get(ROLE_LABEL) or pod_labels.get(COMPONENT_LABEL) or default
