"""The gateway's upstreams, learnt in each telemetry cycle from the pod list it already makes: for every
service of the cluster, its ready router pods when it has a router, else its ready engine pods that serve
the API (`engine` pools and multi-node leaders), each as `podIP:port`. Stored in `gateway.Upstream`, read
by the snapshot writer; the gateway connects to these addresses directly, never through the API server."""

from __future__ import annotations

from collections import defaultdict

from apps.gateway.models import Upstream
from apps.serving.names import (
    COMPONENT_LABEL,
    ENGINE_COMPONENTS,
    LWS_WORKER_INDEX_LABEL,
    SERVICE_UID_LABEL,
    pod_role,
)
from workers.enginepods import http_port, is_ready

SERVING_ROLES = frozenset({"engine", "leader"})  # prefill and decode pools are reached through their router


def upstreams(items: list[dict], services: dict[str, int]) -> dict[int, tuple[bool, list[dict], int]]:
    """service id → (routed, ready endpoints sorted by pod, ready engine pods) for every service in
    `services` (uid → id)."""
    return {service_id: found[:3] for service_id, found in _gather(items, services).items()}


def _gather(items: list[dict], services: dict[str, int]) -> dict[int, tuple[bool, list[dict], int, list[dict]]]:
    routers: dict[int, list[dict]] = defaultdict(list)
    engines: dict[int, list[dict]] = defaultdict(list)
    has_router: set[int] = set()
    ready_engines: dict[int, int] = defaultdict(int)
    for pod in items:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        service_id = services.get(labels.get(SERVICE_UID_LABEL, ""))
        if service_id is None:
            continue
        component = labels.get(COMPONENT_LABEL)
        router = component == "router"
        if not router and (component not in ENGINE_COMPONENTS or labels.get(LWS_WORKER_INDEX_LABEL, "0") != "0"):
            continue  # not an engine, or a multi-node group's worker (its leader serves)
        if router:
            has_router.add(service_id)
        elif is_ready(pod):
            ready_engines[service_id] += 1
        if not router and pod_role(labels) not in SERVING_ROLES:
            continue
        ip, port = (pod.get("status") or {}).get("podIP"), http_port(pod)
        if is_ready(pod) and ip and port:
            (routers if router else engines)[service_id].append({"pod": meta.get("name", ""),
                                                                 "address": f"{ip}:{port}"})
    out = {}
    for service_id in services.values():
        routed = service_id in has_router
        found = (routers if routed else engines)[service_id]
        out[service_id] = (routed, sorted(found, key=lambda e: e["pod"]), ready_engines[service_id],
                           sorted(engines[service_id], key=lambda e: e["pod"]))
    return out


def record_upstreams(items: list[dict], services: dict[str, int], at) -> None:
    """Store this cycle's upstreams of the cluster's services (one statement)."""
    rows = [Upstream(service_id=service_id, routed=routed, endpoints=endpoints, ready_engines=engines,
                     engines=serving, seen_at=at)
            for service_id, (routed, endpoints, engines, serving) in _gather(items, services).items()]
    Upstream.objects.bulk_create(rows, update_conflicts=True, unique_fields=["service"],
                                 update_fields=["routed", "endpoints", "ready_engines", "engines", "seen_at"])
