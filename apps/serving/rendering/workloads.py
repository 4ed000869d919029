"""Engine workloads per deployment mode: Deployments (standard, serverless, prefill/decode), the
LeaderWorkerSet of a multi-node service, their Services and PodDisruptionBudgets."""

from __future__ import annotations

from apps.catalog.engines import MultiNode, get_adapter
from apps.serving.names import (
    AUTOSCALER_ANNOTATION,
    GENERATION_ANNOTATION,
    MAX_REPLICAS_ANNOTATION,
    MIN_REPLICAS_ANNOTATION,
    ROLE_LABEL,
    SCALE_TO_ZERO_AFTER_ANNOTATION,
    SCALE_TO_ZERO_ANNOTATION,
    TEMPLATE_HASH_ANNOTATION,
    VLLM_ROUTER_MODEL_LABEL,
    object_name,
    selector,
)
from apps.serving.rendering.pods import (
    PodRole,
    engine_pod_template,
    metadata,
    progress_deadline_seconds,
    template_hash,
)
from apps.serving.rendering.spec import PoolSpec, ServiceSpec

# Rendezvous port of the leader of a multi-node group (vLLM --master-port, SGLang --dist-init-addr).
DIST_PORT = 29500
ROLLING = {"maxUnavailable": 0, "maxSurge": 1}


def external_autoscaler(spec: ServiceSpec) -> bool:
    """HPA or KEDA owns `replicas`; leaving it out of the applied object avoids fighting them."""
    return spec.autoscaling.autoscaler in ("hpa", "keda")


def workload_annotations(spec: ServiceSpec, pool: PoolSpec, digest: str) -> dict[str, str]:
    notes = {TEMPLATE_HASH_ANNOTATION: digest, GENERATION_ANNOTATION: str(spec.generation)}
    if spec.autoscaling.autoscaler != "none" or spec.mode == "serverless":
        notes.update({
            AUTOSCALER_ANNOTATION: spec.autoscaling.autoscaler,
            MIN_REPLICAS_ANNOTATION: str(pool.min_replicas),
            MAX_REPLICAS_ANNOTATION: str(pool.max_replicas),
        })
    if spec.mode == "serverless":
        notes[SCALE_TO_ZERO_ANNOTATION] = "true" if pool.min_replicas == 0 else "false"
        if spec.autoscaling.scale_to_zero_after_seconds is not None:
            notes[SCALE_TO_ZERO_AFTER_ANNOTATION] = str(spec.autoscaling.scale_to_zero_after_seconds)
    return notes


def engine_deployment(spec: ServiceSpec, pool: PoolSpec, name: str, role: PodRole) -> dict:
    template = engine_pod_template(spec, pool, role)
    digest = template["metadata"]["annotations"][TEMPLATE_HASH_ANNOTATION]
    body: dict = {}
    if not external_autoscaler(spec):
        body["replicas"] = pool.replicas
    body.update({
        "selector": {"matchLabels": selector(spec, role.component)},
        "strategy": {"type": "RollingUpdate", "rollingUpdate": dict(ROLLING)},
        "progressDeadlineSeconds": progress_deadline_seconds(spec, pool),
        "template": template,
    })
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(spec, name, role.component, annotations=workload_annotations(spec, pool, digest)),
        "spec": body,
    }


def leader_worker_set(spec: ServiceSpec, pool: PoolSpec) -> dict:
    """One group of `nodes_per_replica` pods per replica; the leader (rank 0) serves the API.

    LeaderWorkerSet injects LWS_LEADER_ADDRESS and LWS_WORKER_INDEX into every pod; Kubernetes expands
    the `$(VAR)` references in the arguments from them.
    """
    size = pool.nodes_per_replica

    def side(is_leader: bool) -> dict:
        rank = "0" if is_leader else "$(LWS_WORKER_INDEX)"
        group = MultiNode(str(size), rank, "$(LWS_LEADER_ADDRESS)", DIST_PORT, is_leader)
        role = PodRole("engine", multi_node=group,
                       extra_labels=((ROLE_LABEL, "leader" if is_leader else "worker"),))
        return engine_pod_template(spec, pool, role)

    leader, worker = side(True), side(False)
    digest = template_hash({"leader": leader, "worker": worker})
    body: dict = {}
    if not external_autoscaler(spec):
        body["replicas"] = pool.replicas
    body.update({
        "startupPolicy": "LeaderCreated",
        "rolloutStrategy": {"type": "RollingUpdate", "rollingUpdateConfiguration": dict(ROLLING)},
        "leaderWorkerTemplate": {
            "size": size,
            # A lost rank breaks the collective: restart the whole group together.
            "restartPolicy": "RecreateGroupOnPodRestart",
            "leaderTemplate": leader,
            "workerTemplate": worker,
        },
    })
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": metadata(spec, object_name(spec), "engine", annotations=workload_annotations(spec, pool, digest)),
        "spec": body,
    }


def service(spec: ServiceSpec, name: str, component: str, pod_selector: dict, ports: list[tuple[str, int]],
            app_name: str | None = None) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(spec, name, component, app_name=app_name),
        "spec": {
            "type": "ClusterIP",
            "selector": pod_selector,
            "ports": [{"name": port_name, "port": port, "targetPort": port_name, "protocol": "TCP"}
                      for port_name, port in ports],
        },
    }


def disruption_budget(spec: ServiceSpec, name: str, component: str) -> dict:
    """At most one engine pod (or group member) of a pool evicted at a time during drains."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(spec, name, component),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector(spec, component)}},
    }


def engine_service_name(spec: ServiceSpec, component: str, has_router: bool) -> str:
    """Prefill/decode pools get their own Services; otherwise `<service>` unless a router takes it."""
    if component in ("prefill", "decode"):
        return object_name(spec, component)
    return object_name(spec, "engine") if has_router else object_name(spec)


def engine_objects(spec: ServiceSpec, has_router: bool) -> list[dict]:
    """Workloads, Services and PDBs of the engine pools of a service, for its deployment mode."""
    port = get_adapter(spec.engine).port
    objects: list[dict] = []
    if spec.mode in ("standard", "serverless"):
        pool = spec.pool("engine")
        objects.append(engine_deployment(spec, pool, object_name(spec), PodRole("engine")))
        objects.append(service(spec, engine_service_name(spec, "engine", has_router), "engine",
                               selector(spec, "engine"), [("http", port)]))
        objects.append(disruption_budget(spec, object_name(spec), "engine"))
    elif spec.mode == "pd_disaggregated":
        for role in ("prefill", "decode"):
            pool = spec.pool(role)
            extra = ()
            if spec.engine == "vllm":
                # The production-stack router tells prefill from decode pods by their `model` label.
                extra = ((VLLM_ROUTER_MODEL_LABEL, object_name(spec, role)),)
            pod_role = PodRole(role, disaggregation=role, extra_labels=extra)
            objects.append(engine_deployment(spec, pool, object_name(spec, role), pod_role))
            ports = [("http", port)]
            if role == "prefill" and spec.engine == "sglang":
                ports.append(("bootstrap", get_adapter("sglang").bootstrap_port))
            objects.append(service(spec, engine_service_name(spec, role, has_router), role,
                                   selector(spec, role), ports))
            objects.append(disruption_budget(spec, object_name(spec, role), role))
    elif spec.mode == "multi_node":
        pool = spec.pool("leader")
        objects.append(leader_worker_set(spec, pool))
        objects.append(service(spec, engine_service_name(spec, "engine", has_router), "engine",
                               selector(spec, "engine", **{ROLE_LABEL: "leader"}), [("http", port)]))
        objects.append(disruption_budget(spec, object_name(spec), "engine"))
    return objects
