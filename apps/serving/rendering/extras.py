"""Objects around the engines: the tenant's Namespace and GPU ResourceQuota, the per-model cache PVC,
and KEDA ScaledObjects or HPAs when a service asks for them."""

from __future__ import annotations

from apps.catalog.engines import ENGINE_KINDS, get_adapter
from apps.core.validators import link_local_inside
from apps.serving.names import (
    EGRESS_POLICY_NAME,
    GATEWAY_NAMESPACE,
    GATEWAY_POD_LABELS,
    ISOLATION_POLICY_NAME,
    MODEL_SOURCE_ANNOTATION,
    NAMESPACE_NAME_LABEL,
    POD_SECURITY_LABELS,
    QUOTA_NAME,
    cache_claim_name,
    model_cache_labels,
    object_name,
    tenant_labels,
)
from apps.serving.rendering.pods import (
    cache_size_gib,
    metadata,
)
from apps.serving.rendering.routers import ROUTER_PORT
from apps.serving.rendering.spec import PoolSpec, ServiceSpec


def tenant_objects(tenant: str, namespace: str, gpu_quota: int, api_server_cidrs: tuple[str, ...] = (),
                   model_egress_cidrs: tuple[str, ...] = (), pod_security: dict[str, str] | None = None) -> list[dict]:
    """The tenant's Namespace on a cluster (Pod Security labels: `pod_security`, else POD_SECURITY_LABELS), its
    quota on requested NVIDIA GPUs, and its default-deny ingress and egress NetworkPolicies."""
    return [
        {"apiVersion": "v1", "kind": "Namespace",
         "metadata": {"name": namespace, "labels": {**tenant_labels(tenant), **(pod_security or POD_SECURITY_LABELS)}}},
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": QUOTA_NAME, "namespace": namespace, "labels": tenant_labels(tenant)},
            "spec": {"hard": {"requests.nvidia.com/gpu": str(gpu_quota)}},
        },
        isolation_policy(tenant, namespace, api_server_cidrs),
        egress_policy(tenant, namespace, api_server_cidrs, model_egress_cidrs),
    ]


def egress_policy(tenant: str, namespace: str, api_server_cidrs: tuple[str, ...],
                  model_egress_cidrs: tuple[str, ...]) -> dict:
    """Deny all egress from the tenant's pods but DNS (kube-dns), the namespace's own pods, the API server
    (router discovery and the endpoint picker; engines mount no token) and the cluster's model sources.
    Link-local addresses, where clouds serve instance credentials, are carved out of every block."""
    dns = {"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                   "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
           "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}
    egress: list[dict] = [dns, {"to": [{"podSelector": {}}]}]
    for cidrs in (api_server_cidrs, model_egress_cidrs):
        if cidrs:
            egress.append({"to": [_ip_block(cidr) for cidr in cidrs]})
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": EGRESS_POLICY_NAME, "namespace": namespace, "labels": tenant_labels(tenant)},
        "spec": {"podSelector": {}, "policyTypes": ["Egress"], "egress": egress},
    }


def _ip_block(cidr: str) -> dict:
    carved = link_local_inside(cidr)
    return {"ipBlock": {"cidr": cidr, "except": carved} if carved else {"cidr": cidr}}


def isolation_policy(tenant: str, namespace: str, api_server_cidrs: tuple[str, ...]) -> dict:
    """Deny all ingress to the tenant's pods but from its own namespace (engines, routers, the gateway's
    endpoint picker), from the API server (the control plane scrapes and probes through its proxy) and from
    the inference gateway's pods, to the engines' and routers' HTTP ports only. Other tenants' pods, and
    anything else in the cluster, cannot reach the engines' plain-HTTP ports."""
    ports = sorted({ROUTER_PORT, *(get_adapter(kind).port for kind in ENGINE_KINDS)})
    gateway = {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: GATEWAY_NAMESPACE}},
               "podSelector": {"matchLabels": dict(GATEWAY_POD_LABELS)}}
    ingress: list[dict] = [{"from": [{"podSelector": {}}]},
                           {"from": [gateway], "ports": [{"protocol": "TCP", "port": port} for port in ports]}]
    if api_server_cidrs:
        ingress.append({"from": [{"ipBlock": {"cidr": cidr}} for cidr in api_server_cidrs]})
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": ISOLATION_POLICY_NAME, "namespace": namespace, "labels": tenant_labels(tenant)},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": ingress},
    }


def model_cache_claim(spec: ServiceSpec) -> dict:
    """Shared by every pod (and service) of the model in the namespace, so ReadWriteMany."""
    cache_labels = model_cache_labels(spec.tenant, spec.model.name)
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": cache_claim_name(spec), "namespace": spec.namespace, "labels": cache_labels,
                     "annotations": {MODEL_SOURCE_ANNOTATION: spec.model.source_uri}},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "volumeMode": "Filesystem",
            "resources": {"requests": {"storage": f"{cache_size_gib(spec)}Gi"}},
        },
    }


# -- autoscaling --------------------------------------------------------------------------------------

# target name -> (vLLM series, SGLang series); per-pod series summed over the pool.
SERIES = {
    "waiting_requests_per_replica": ("vllm:num_requests_waiting", "sglang:num_queue_reqs"),
    "running_requests_per_replica": ("vllm:num_requests_running", "sglang:num_running_reqs"),
    "kv_cache_usage": ("vllm:kv_cache_usage_perc", "sglang:token_usage"),
}
# Rates of counters (per-pod tokens/s summed over the pool) and latency histograms compared pool-wide.
RATES = {
    "prompt_tokens_per_s_per_replica": ("vllm:prompt_tokens_total", "sglang:prompt_tokens_total"),
    "generation_tokens_per_s_per_replica": ("vllm:generation_tokens_total", "sglang:generation_tokens_total"),
}
LATENCIES = {
    "ttft_p95_seconds": ("vllm:time_to_first_token_seconds_bucket", "sglang:time_to_first_token_seconds_bucket"),
    "itl_p95_seconds": ("vllm:inter_token_latency_seconds_bucket", "sglang:inter_token_latency_seconds_bucket"),
}


def _scaled_pools(spec: ServiceSpec) -> list[tuple[PoolSpec, str, str, str]]:
    """(pool, component, target apiVersion, target kind/name) of every scalable engine pool."""
    if spec.mode == "pd_disaggregated":
        return [(spec.pool(r), r, "apps/v1", object_name(spec, r)) for r in ("prefill", "decode")]
    if spec.mode == "multi_node":
        return [(spec.pool("leader"), "engine", "leaderworkerset.x-k8s.io/v1", object_name(spec))]
    return [(spec.pool("engine"), "engine", "apps/v1", object_name(spec))]


def _series(spec: ServiceSpec, pair: tuple[str, str]) -> str:
    return pair[0] if spec.engine == "vllm" else pair[1]


def _promql_filter(spec: ServiceSpec, api_version: str, workload: str) -> str:
    """The pool's pods by name: `<deployment>-<hash>-<suffix>`, or `<lws>-<group>` for group leaders."""
    pods = f"{workload}-[a-z0-9]+-[a-z0-9]+" if api_version == "apps/v1" else f"{workload}-[0-9]+"
    return f'{{namespace="{spec.namespace}",pod=~"{pods}"}}'


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _behavior(spec: ServiceSpec) -> dict:
    a = spec.autoscaling
    behavior = {}
    if a.scale_up_stabilization_seconds is not None:
        behavior["scaleUp"] = {"stabilizationWindowSeconds": a.scale_up_stabilization_seconds}
    if a.scale_down_stabilization_seconds is not None:
        behavior["scaleDown"] = {"stabilizationWindowSeconds": a.scale_down_stabilization_seconds}
    return behavior


def _kind(api_version: str) -> str:
    return "Deployment" if api_version == "apps/v1" else "LeaderWorkerSet"


def keda_scaled_objects(spec: ServiceSpec) -> list[dict]:
    """A KEDA ScaledObject per pool with Prometheus triggers on the engine's own metrics."""
    out = []
    for pool, component, api_version, workload in _scaled_pools(spec):
        match = _promql_filter(spec, api_version, workload)
        triggers = []
        for target, value in spec.autoscaling.targets:
            if target in SERIES:
                # AverageValue: KEDA divides the pool-wide sum by the threshold to get replicas.
                query, metric_type = f"sum({_series(spec, SERIES[target])}{match})", "AverageValue"
            elif target in RATES:
                query, metric_type = f"sum(rate({_series(spec, RATES[target])}{match}[1m]))", "AverageValue"
            elif target in LATENCIES:  # a pool-wide latency compared as a whole
                query = (f"histogram_quantile(0.95, sum by (le) "
                         f"(rate({_series(spec, LATENCIES[target])}{match}[2m])))")
                metric_type = "Value"
            else:
                continue
            triggers.append({
                "type": "prometheus",
                "metricType": metric_type,
                "metadata": {"serverAddress": spec.autoscaling.prometheus_url, "query": query,
                             "threshold": _number(value)},
            })
        body: dict = {
            "scaleTargetRef": {"apiVersion": api_version, "kind": _kind(api_version), "name": workload},
            "pollingInterval": 15,
            "cooldownPeriod": spec.autoscaling.scale_to_zero_after_seconds or 300,
            "minReplicaCount": pool.min_replicas,
            "maxReplicaCount": pool.max_replicas,
        }
        behavior = _behavior(spec)
        if behavior:
            body["advanced"] = {"horizontalPodAutoscalerConfig": {"behavior": behavior}}
        body["triggers"] = triggers
        out.append({"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
                    "metadata": metadata(spec, workload, component), "spec": body})
    return out


def horizontal_pod_autoscalers(spec: ServiceSpec) -> list[dict]:
    """autoscaling/v2 HPAs on per-pod custom metrics (served by a Prometheus adapter).

    The HPA cannot reach zero replicas or compare a pool-wide TTFT; those need the built-in
    autoscaler or KEDA.
    """
    out = []
    for pool, component, api_version, workload in _scaled_pools(spec):
        metrics = []
        for target, value in spec.autoscaling.targets:
            if target not in SERIES:
                continue
            name = _series(spec, SERIES[target]).replace(":", "_")
            metrics.append({"type": "Pods", "pods": {
                "metric": {"name": name},
                "target": {"type": "AverageValue", "averageValue": _number(value)}}})
        body: dict = {
            "scaleTargetRef": {"apiVersion": api_version, "kind": _kind(api_version), "name": workload},
            "minReplicas": max(1, pool.min_replicas),
            "maxReplicas": max(1, pool.max_replicas),
            "metrics": metrics,
        }
        behavior = _behavior(spec)
        if behavior:
            body["behavior"] = behavior
        out.append({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                    "metadata": metadata(spec, workload, component), "spec": body})
    return out


def autoscaling_objects(spec: ServiceSpec) -> list[dict]:
    if spec.autoscaling.autoscaler == "keda":
        return keda_scaled_objects(spec)
    if spec.autoscaling.autoscaler == "hpa":
        return horizontal_pod_autoscalers(spec)
    return []
