"""GPU inventory: each cluster's nodes, GPU product, capacity and GPUs allocated to running pods."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from apps.clusters.models import Cluster, GpuNode
from capacity.modelcache import COMPONENT
from workers import status as st
from workers.kube import Kube

GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")
AGENT_EVENTS_KEPT = 10


def agent_events(kube: Kube) -> dict[str, list[dict]]:
    """The model agent's Events on each node, newest first, at most AGENT_EVENTS_KEPT per node."""
    by_node: dict[str, list[dict]] = {}
    for event in kube.list("v1", "Event", field_selector="involvedObject.kind=Node"):
        source = event.get("source") or {}
        if COMPONENT not in (source.get("component"), event.get("reportingComponent")):
            continue
        time = event.get("lastTimestamp") or event.get("eventTime") or event.get("firstTimestamp")
        by_node.setdefault((event.get("involvedObject") or {}).get("name") or "", []).append({
            "reason": event.get("reason") or "", "message": event.get("message") or "",
            "type": event.get("type") or "Normal", "time": str(time or ""), "count": int(event.get("count") or 1)})
    return {name: sorted(events, key=lambda e: e["time"], reverse=True)[:AGENT_EVENTS_KEPT]
            for name, events in by_node.items()}


def observe_nodes(kube: Kube) -> list[dict]:
    """Nodes with their GPU product, allocatable GPUs, GPUs requested by live pods, and readiness."""
    nodes = {}
    for node in kube.list("v1", "Node"):
        meta, status = node["metadata"], node.get("status") or {}
        labels = meta.get("labels") or {}
        alloc = status.get("allocatable") or {}
        gpus = sum(int(str(alloc.get(r, 0))) for r in GPU_RESOURCES)
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
        nodes[meta["name"]] = {
            "name": meta["name"], "gpu_product": labels.get("nvidia.com/gpu.product")
            or labels.get("amd.com/gpu.product-name", ""), "gpu_count": gpus, "allocatable": gpus,
            "allocated": 0, "labels": labels, "ready": ready,
        }
    for pod in kube.list("v1", "Pod"):
        node_name = (pod.get("spec") or {}).get("nodeName")
        if node_name in nodes and (pod.get("status") or {}).get("phase") not in {"Succeeded", "Failed"}:
            nodes[node_name]["allocated"] += st.pod_view(pod).gpus
    events = agent_events(kube)
    for name, node in nodes.items():
        node["agent_events"] = events.get(name, [])
    return sorted(nodes.values(), key=lambda n: n["name"])


def sync_inventory(cluster: Cluster, kube: Kube) -> int:
    """Replace the cluster's GpuNode rows with what the cluster reports now; returns the node count."""
    observed = observe_nodes(kube)  # cluster I/O first, outside the transaction
    now = timezone.now()
    with transaction.atomic():
        names = []
        for node in observed:
            names.append(node["name"])
            GpuNode.objects.update_or_create(
                cluster=cluster, name=node["name"],
                defaults={k: node[k] for k in ("gpu_product", "gpu_count", "allocatable", "allocated", "labels",
                                               "ready", "agent_events")} | {"observed_at": now},
            )
        GpuNode.objects.filter(cluster=cluster).exclude(name__in=names).delete()
        Cluster.objects.filter(pk=cluster.pk).update(last_seen_at=now)
    publish_agent_plan(cluster, kube)
    return len(observed)


def publish_agent_plan(cluster: Cluster, kube: Kube) -> None:
    """Give the cluster's model agent its plan (from the nodes just observed), when the platform caches models there
    and the cluster's pods read node copies (its node model volume is not "none");
    the platform namespace is applied first, as the agent's ConfigMap lives in it."""
    from apps.serving.models import ModelCache
    from apps.serving.names import GATEWAY_NAMESPACE, MANAGED_BY, MANAGED_BY_LABEL
    from apps.serving.prefetch import cluster_plan
    from apps.serving.rendering.modelagent import plan_config_map

    if not cluster.reads_node_copies or not ModelCache.objects.filter(cluster=cluster).exists():
        return
    config_map = plan_config_map(cluster_plan(cluster))
    kube.apply({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": GATEWAY_NAMESPACE, "labels": {MANAGED_BY_LABEL: MANAGED_BY}}})
    kube.apply(config_map)
