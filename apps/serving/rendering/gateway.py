"""Gateway API inference extension: an InferencePool over the service's serving pods, its endpoint
picker (EPP) and an HTTPRoute from the cluster's gateway, rendered when the cluster has a gateway.

The EPP scores the pool's engine pods on queue depth, KV-cache usage and prefix-cache affinity (the
extension's default weights 2/2/3) and tells the gateway which pod takes each request; in-cluster clients
keep using the service's own Service (and router, if any). A prefill/decode service has no pool: its
route goes straight to the router's Service, since the router pairs prefill with decode itself.
"""

from __future__ import annotations

import yaml
from django.conf import settings

from apps.catalog.engines import get_adapter
from apps.serving.names import NAME_LABEL, ROLE_LABEL, TEMPLATE_HASH_ANNOTATION, labels, object_name, selector
from apps.serving.rendering.pods import metadata, with_template_hash
from apps.serving.rendering.routers import ROUTER_PORT, rbac_objects
from apps.serving.rendering.spec import ServiceSpec
from apps.serving.rendering.workloads import ROLLING, service

EPP_PORT = 9002
EPP_HEALTH_PORT = 9003
EPP_APP = "epp"
EPP_CONFIG = {
    "apiVersion": "inference.networking.x-k8s.io/v1alpha1",
    "kind": "EndpointPickerConfig",
    "plugins": [{"type": "queue-scorer"}, {"type": "kv-cache-utilization-scorer"},
                {"type": "prefix-cache-scorer"}, {"type": "max-score-picker"}],
    "schedulingProfiles": [{"name": "default", "plugins": [
        {"pluginRef": "queue-scorer", "weight": 2},
        {"pluginRef": "kv-cache-utilization-scorer", "weight": 2},
        {"pluginRef": "prefix-cache-scorer", "weight": 3},
        {"pluginRef": "max-score-picker"},
    ]}],
}
EPP_RULES = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["inference.networking.k8s.io"], "resources": ["inferencepools"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["inference.networking.x-k8s.io"], "resources": ["inferenceobjectives", "inferencemodelrewrites"],
     "verbs": ["get", "list", "watch"]},
]


def _pool_members(spec: ServiceSpec) -> tuple[dict[str, str], int]:
    extra = {ROLE_LABEL: "leader"} if spec.mode == "multi_node" else {}
    return selector(spec, "engine", **extra), get_adapter(spec.engine).port


def _epp_args(spec: ServiceSpec) -> list[str]:
    args = ["--pool-name", object_name(spec), "--pool-namespace", spec.namespace,
            "--config-file", "/config/config.yaml", "--grpc-port", str(EPP_PORT),
            "--grpc-health-port", str(EPP_HEALTH_PORT)]
    if spec.engine == "sglang":
        # The picker reads vLLM metric names by default; SGLang's equivalents (engines.md §2).
        args += ["--total-queued-requests-metric", "sglang:num_queue_reqs",
                 "--kv-cache-usage-percentage-metric", "sglang:token_usage", "--lora-info-metric", ""]
    return args


def endpoint_picker(spec: ServiceSpec) -> list[dict]:
    name = object_name(spec, "epp")
    epp_selector = selector(spec, "router", **{NAME_LABEL: EPP_APP})
    health = {"grpc": {"port": EPP_HEALTH_PORT, "service": "inference-extension"},
              "initialDelaySeconds": 5, "periodSeconds": 10}
    template, digest = with_template_hash({
        "metadata": {"labels": labels(spec, "router", EPP_APP)},
        "spec": {
            "serviceAccountName": name,
            "containers": [{
                "name": "epp",
                "image": settings.EPP_IMAGE,
                "args": _epp_args(spec),
                "env": [{"name": "NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}],
                "ports": [{"name": "grpc", "containerPort": EPP_PORT, "protocol": "TCP"},
                          {"name": "grpc-health", "containerPort": EPP_HEALTH_PORT, "protocol": "TCP"},
                          {"name": "metrics", "containerPort": 9090, "protocol": "TCP"}],
                "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}},
                "readinessProbe": dict(health),
                "livenessProbe": dict(health),
                "volumeMounts": [{"name": "config", "mountPath": "/config", "readOnly": True}],
            }],
            "volumes": [{"name": "config", "configMap": {"name": name}}],
        },
    })
    return [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata(spec, name, "router", app_name=EPP_APP),
         "data": {"config.yaml": yaml.safe_dump(EPP_CONFIG, sort_keys=False)}},
        *rbac_objects(spec, name, EPP_APP, EPP_RULES),
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": metadata(spec, name, "router", app_name=EPP_APP,
                                 annotations={TEMPLATE_HASH_ANNOTATION: digest}),
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": epp_selector},
                "strategy": {"type": "RollingUpdate", "rollingUpdate": dict(ROLLING)},
                "template": template,
            },
        },
        service(spec, name, "router", epp_selector, [("grpc", EPP_PORT)], app_name=EPP_APP),
    ]


def _route(spec: ServiceSpec, component: str, backend: dict) -> dict:
    """`/<tenant>/<service>/...` on the cluster's gateway, with the prefix stripped, to `backend`."""
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": metadata(spec, object_name(spec), component),
        "spec": {
            "parentRefs": [{"name": spec.gateway_name}],
            "rules": [{
                "matches": [{"path": {"type": "PathPrefix", "value": f"/{spec.tenant}/{spec.name}"}}],
                "filters": [{"type": "URLRewrite", "urlRewrite": {
                    "path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}}}],
                "backendRefs": [backend],
            }],
        },
    }


def inference_pool(spec: ServiceSpec) -> dict:
    """The InferencePool over the serving pods of one unit (the service's, or a canary unit's)."""
    members, port = _pool_members(spec)
    return {
        "apiVersion": "inference.networking.k8s.io/v1",
        "kind": "InferencePool",
        "metadata": metadata(spec, object_name(spec), "engine"),
        "spec": {
            "selector": {"matchLabels": members},
            "targetPorts": [{"number": port}],
            "endpointPickerRef": {"name": object_name(spec, "epp"), "port": {"number": EPP_PORT},
                                  "failureMode": "FailClose"},
        },
    }


def _pool_ref(spec: ServiceSpec, weight: int | None = None) -> dict:
    ref = {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": object_name(spec)}
    return ref if weight is None else {**ref, "weight": weight}


def gateway_objects(spec: ServiceSpec) -> list[dict]:
    """The EPP, the InferencePool naming it and an HTTPRoute to the pool (P/D: a route to the router). During a
    canary the new revision's unit gets its own EPP and pool, and the route splits requests between the two
    pools by weight (P/D: the router splits them)."""
    name = object_name(spec)
    if spec.mode == "pd_disaggregated":
        return [_route(spec, "router", {"kind": "Service", "name": name, "port": ROUTER_PORT})]
    if spec.canary is None:
        return [*endpoint_picker(spec), inference_pool(spec), _route(spec, "engine", _pool_ref(spec))]
    unit, weight = spec.canary.unit, spec.canary.weight
    route = _route(spec, "engine", _pool_ref(spec, 100 - weight))
    route["spec"]["rules"][0]["backendRefs"].append(_pool_ref(unit, weight))
    return [*endpoint_picker(spec), inference_pool(spec), *endpoint_picker(unit), inference_pool(unit), route]
