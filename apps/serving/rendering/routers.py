"""Request routers: the vLLM production-stack router and the SGLang router, one adapter each.

A router runs when the service is prefill/decode disaggregated or its routing policy needs one (round
robin is the Service alone). Both discover the engine pods through the Kubernetes API by label, so they
follow scaling without a restart; each gets a ServiceAccount allowed to list and watch pods.
"""

from __future__ import annotations

from django.conf import settings

from apps.catalog.engines import get_adapter
from apps.serving.choices import ROUTER_POLICIES
from apps.serving.names import (
    ACTIVATION_HOLD_ANNOTATION,
    CANARY_WEIGHTS_ANNOTATION,
    COMPONENT_LABEL,
    INSTANCE_LABEL,
    NAME_LABEL,
    ROLE_LABEL,
    TEMPLATE_HASH_ANNOTATION,
    labels,
    object_name,
    selector,
)
from apps.serving.rendering.pods import metadata, with_template_hash
from apps.serving.rendering.spec import ServiceSpec
from apps.serving.rendering.workloads import ROLLING, service
from enginevocab import routers as router_vocab
from enginevocab.labels import canary_weights_value

ROUTER_PORT = 8000
SESSION_HEADER = "x-session-id"

VLLM_ROUTING = ROUTER_POLICIES["vllm"]
SGLANG_ROUTING = ROUTER_POLICIES["sglang"]


class RenderError(ValueError):
    """A spec the renderer cannot express (a permanent error for the reconciler)."""


# Serverless services: the router is where a request arriving at zero replicas waits for activation (the
# control plane scales from 0 on the router's held-request gauge). kubesim's routers honour this annotation;
# on a real cluster see docs/autoscaling.md (an activator in front of the router).
ACTIVATION_HOLD_SECONDS = 300


def needs_router(spec: ServiceSpec) -> bool:
    """P/D and serverless services, policies beyond round robin, and every service during a canary rollout
    (the router splits the requests between the revisions by weight)."""
    return spec.mode in ("pd_disaggregated", "serverless") or spec.routing != "round_robin" or spec.canary is not None


def supported_routing(engine: str) -> tuple[str, ...]:
    """Routing policies the engine's router implements (round robin needs no router)."""
    table = VLLM_ROUTING if engine == "vllm" else SGLANG_ROUTING
    return tuple(sorted({"round_robin", *table}))


def _discovery(spec: ServiceSpec, component: str, **extra: str) -> dict[str, str]:
    """The labels a router finds its backends by: one component's pods of the service, of both revisions during a
    canary (a canary unit's pods differ from the stable ones in their instance and revision labels)."""
    found = selector(spec, component, **extra)
    if spec.canary is not None:
        found.pop(INSTANCE_LABEL)
    return found


def _backend_selector(spec: ServiceSpec) -> dict[str, str]:
    extra = {ROLE_LABEL: "leader"} if spec.mode == "multi_node" else {}
    return _discovery(spec, "engine", **extra)


def _model_labels(spec: ServiceSpec, role: str) -> str:
    names = [object_name(spec, role)]
    if spec.canary is not None:
        names.append(object_name(spec.canary.unit, role))
    return ",".join(names)


def checked(args: list[str], table) -> list[str]:
    """`args` when each flag is one of the router's vocabulary (enginevocab/routers.py) and each value of a flag
    with choices is one of them; else RenderError naming the flag."""
    kinds = {flag: kind for flags, kind, _default in table for flag in flags}
    for i, word in enumerate(args):
        if not word.startswith("--"):
            continue
        if word not in kinds:
            raise RenderError(f"the router has no {word} flag")
        kind = kinds[word]
        if isinstance(kind, tuple) and (i + 1 >= len(args) or args[i + 1] not in kind):
            raise RenderError(f"{word} must be one of {', '.join(kind)}")
    return args


def _equality(sel: dict[str, str]) -> list[str]:
    return [f"{k}={v}" for k, v in sel.items()]


def vllm_router_args(spec: ServiceSpec) -> list[str]:
    engine_port = get_adapter("vllm").port
    if spec.mode == "pd_disaggregated":
        base = {k: v for k, v in _discovery(spec, "prefill").items() if k != COMPONENT_LABEL}
        label_selector = ",".join([*_equality(base), f"{COMPONENT_LABEL} in (prefill,decode)"])
    else:
        label_selector = ",".join(_equality(_backend_selector(spec)))
    args = ["--host", "0.0.0.0", "--port", str(ROUTER_PORT),
            "--service-discovery", "k8s", "--k8s-namespace", spec.namespace,
            "--k8s-port", str(engine_port), "--k8s-label-selector", label_selector]
    if spec.mode == "pd_disaggregated":
        args += ["--routing-logic", "disaggregated_prefill",
                 "--prefill-model-labels", _model_labels(spec, "prefill"),
                 "--decode-model-labels", _model_labels(spec, "decode")]
    else:
        logic = VLLM_ROUTING.get(spec.routing)
        if logic is None:
            raise RenderError(f"the vLLM router has no {spec.routing} policy")
        args += ["--routing-logic", logic]
        if logic == "session":
            args += ["--session-key", SESSION_HEADER]
    return checked([*args, "--engine-stats-interval", "15", "--request-stats-window", "60"], router_vocab.PSTACK_FLAGS)


def sglang_router_args(spec: ServiceSpec) -> list[str]:
    policy = SGLANG_ROUTING.get(spec.routing)
    if policy is None:
        raise RenderError(f"the SGLang router has no {spec.routing} policy")
    args = ["--host", "0.0.0.0", "--port", str(ROUTER_PORT),
            "--service-discovery", "--service-discovery-namespace", spec.namespace,
            "--service-discovery-port", str(get_adapter("sglang").port)]
    if spec.mode == "pd_disaggregated":
        args += ["--pd-disaggregation",
                 "--prefill-selector", *_equality(_discovery(spec, "prefill")),
                 "--decode-selector", *_equality(_discovery(spec, "decode"))]
    else:
        args += ["--selector", *_equality(_backend_selector(spec))]
    return checked([*args, "--policy", policy, "--prometheus-host", "0.0.0.0",
                    "--prometheus-port", str(router_vocab.SGLANG_METRICS_PORT)], router_vocab.SGLANG_ROUTER_FLAGS)


def _router_container(spec: ServiceSpec) -> dict:
    if spec.engine == "vllm":
        image, command, args = settings.VLLM_ROUTER_IMAGE, ["vllm-router"], vllm_router_args(spec)
        ports = [{"name": "http", "containerPort": ROUTER_PORT, "protocol": "TCP"}]
    else:
        image, command, args = spec.image_ref, ["python3", "-m", "sglang_router.launch_router"], \
            sglang_router_args(spec)
        ports = [{"name": "http", "containerPort": ROUTER_PORT, "protocol": "TCP"},
                 {"name": "metrics", "containerPort": router_vocab.SGLANG_METRICS_PORT, "protocol": "TCP"}]
    def probe(**extra) -> dict:
        return {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 10, "timeoutSeconds": 5,
                "failureThreshold": 3, **extra}

    return {
        "name": "router",
        "image": image,
        "command": command,
        "args": args,
        "ports": ports,
        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "2Gi"}},
        "readinessProbe": probe(),
        "livenessProbe": probe(initialDelaySeconds=10),
    }


def router_name(spec: ServiceSpec) -> str:
    return object_name(spec, "router")


def router_app_name(spec: ServiceSpec) -> str:
    return f"{spec.engine}-router"


def router_selector(spec: ServiceSpec) -> dict[str, str]:
    """The router's pods (the gateway's endpoint picker is a router component too, by another name)."""
    return selector(spec, "router", **{NAME_LABEL: router_app_name(spec)})


def rbac_objects(spec: ServiceSpec, name: str, app: str, rules: list[dict]) -> list[dict]:
    """A ServiceAccount and a namespaced Role + RoleBinding granting it `rules`."""
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": metadata(spec, name, "router", app_name=app)},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": metadata(spec, name, "router", app_name=app),
            "rules": rules,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": metadata(spec, name, "router", app_name=app),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": spec.namespace}],
        },
    ]


POD_READER = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}


def router_objects(spec: ServiceSpec) -> list[dict]:
    """ServiceAccount + Role + RoleBinding (pod discovery), router Deployment, and the `<service>` Service."""
    name = router_name(spec)
    app = router_app_name(spec)
    template_meta: dict = {"labels": labels(spec, "router", app)}
    if spec.mode == "serverless":
        template_meta["annotations"] = {ACTIVATION_HOLD_ANNOTATION: str(ACTIVATION_HOLD_SECONDS)}
    if spec.canary is not None:
        template_meta.setdefault("annotations", {})[CANARY_WEIGHTS_ANNOTATION] = canary_weights_value(
            spec.canary.revision, spec.canary.weight)
    template, digest = with_template_hash({
        "metadata": template_meta,
        "spec": {"serviceAccountName": name, "containers": [_router_container(spec)]},
    })
    return [
        *rbac_objects(spec, name, app, [POD_READER]),
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": metadata(spec, name, "router", app_name=app, annotations={TEMPLATE_HASH_ANNOTATION: digest}),
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": router_selector(spec)},
                "strategy": {"type": "RollingUpdate", "rollingUpdate": dict(ROLLING)},
                "template": template,
            },
        },
        service(spec, object_name(spec), "router", router_selector(spec), [("http", ROUTER_PORT)], app_name=app),
    ]
