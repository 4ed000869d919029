"""Prefetch: which nodes should hold a service's weights before it scales up (the model agent copies them there).

A service whose maximum exceeds its current replicas, and whose platform-wide model the platform caches on its
cluster (`ModelCache`), gets its weights onto as many nodes of its GPU as it may scale to (its maximum, or fewer when
the tenant's GPU quota stops it short: the autoscaler's own bound, `apps.serving.quota.quota_room`), each within the
cache's per-node budget; the nodes with the most room first (`capacity.modelcache.prefetch_nodes`). Shown in the
Scaling panel.
"""

from __future__ import annotations

from apps.serving.quota import quota_room
from apps.serving.startup import engine_pool
from capacity.gpus import gpu_for
from capacity.startup import size
from enginevocab.labels import MODEL_HELD_PREFIX, model_held_label


def held_models(node, weights_of: dict[str, int]) -> list[tuple[str, int]]:
    """(model, bytes) of the copies a node's labels say it holds, by name (a model the catalog no longer has counts
    0 bytes)."""
    prefix = MODEL_HELD_PREFIX + "/"
    names = [key[len(prefix):] for key, value in (node.labels or {}).items()
             if key.startswith(prefix) and value == "true"]
    return sorted((name, weights_of.get(name, 0)) for name in names)


def platform_weights() -> dict[str, int]:
    """Every platform-wide model's weights in bytes, by name (what a node's copies weigh)."""
    from apps.catalog.models import Model
    from apps.serving.rendering.spec import model_spec

    return {m.name: model_spec(m).weights_bytes for m in Model.objects.filter(tenant__isnull=True)}


def prefetch_plan(service) -> dict | None:
    """{wanted, held, targets, short, model_bytes, budget_gb, words} for the service's engine pool; None when the
    platform does not cache its model on the service's cluster, or when the cluster's pods read no node copies
    (its node model volume is "none")."""
    from apps.clusters.models import GpuNode
    from apps.serving.models import ModelCache
    from apps.serving.rendering.spec import model_spec
    from capacity.modelcache import prefetch_nodes

    if not service.cluster.reads_node_copies:
        return None
    pool = engine_pool(service)
    cache = ModelCache.objects.filter(cluster_id=service.cluster_id, model_id=service.model_id).first()
    if pool is None or cache is None:
        return None
    nbytes = model_spec(service.model).weights_bytes
    per_node = pool.gpus_per_replica // max(1, pool.nodes_per_replica) or 1
    nodes_per = max(1, pool.nodes_per_replica)
    room, quota_words = quota_room(service, pool, pool.gpus_per_replica * nodes_per)
    reach = min(pool.max_replicas, pool.replicas + room)  # the tenant's quota may stop it short of its maximum
    wanted = reach * nodes_per if reach > pool.replicas else 0
    product = gpu_for(pool.gpu_type).product
    nodes = [n for n in GpuNode.objects.filter(cluster_id=service.cluster_id, gpu_product=product)
             if n.gpu_count >= per_node]
    label = model_held_label(service.model.name)
    held = sorted(n.name for n in nodes if (n.labels or {}).get(label) == "true")
    weights_of = platform_weights()
    budget = cache.node_budget_gb * 10**9
    free = [(n.name, budget - sum(b for _, b in held_models(n, weights_of))) for n in nodes if n.name not in held]
    targets = prefetch_nodes(free, wanted - len(held), nbytes) if wanted > len(held) else []
    short = max(0, wanted - len(held) - len(targets))
    quota_limited = reach < pool.max_replicas
    if not wanted:
        words = ("No scale-up room within the tenant's GPU quota" if quota_limited
                 else "No scale-up room (replicas at the maximum)") + ": nothing to prefetch."
    else:
        words = (f"{size(nbytes)} of weights wanted on {wanted} node(s): held on {len(held)}, "
                 f"to copy to {len(targets)}" + (f", {short} without a suitable node within the "
                                                  f"{cache.node_budget_gb:,} GB budget" if short else "") + ".")
    quota_text = (f"The tenant's GPU quota limits the plan to {reach} replica(s), not the maximum of "
                  f"{pool.max_replicas}: {quota_words}." if quota_limited else "")
    return {"wanted": wanted, "held": held, "targets": targets, "short": short, "model_bytes": nbytes,
            "budget_gb": cache.node_budget_gb, "words": words, "reach": reach, "quota_limited": quota_limited,
            "quota_words": quota_text}


def cluster_plan(cluster) -> dict:
    """The model agent's plan for a cluster: {"budget_bytes", "nodes": {node: [{"model", "bytes", "source"}]}}
    (`source`: where the weights lie in the cluster cache volume, `<claim>/<source dir>`): every node
    that holds or should hold each cached model's weights for the services of the cluster; the budget the strictest
    of the cluster's caches. Empty nodes when the platform caches nothing there."""
    from apps.serving.models import InferenceService, ModelCache
    from apps.serving.rendering.pods import cluster_cache_path
    from apps.serving.rendering.spec import model_spec

    caches = list(ModelCache.objects.filter(cluster=cluster).select_related("model"))
    nodes: dict[str, list[dict]] = {}
    services = InferenceService.objects.filter(cluster=cluster, model_id__in=[c.model_id for c in caches],
                                               deletion_requested_at__isnull=True)
    services = services.select_related("model", "runtime", "cluster")
    for service in services.order_by("pk"):
        plan = prefetch_plan(service)
        if plan is None:
            continue
        spec = model_spec(service.model)
        item = {"model": spec.name, "bytes": spec.weights_bytes, "source": cluster_cache_path(spec)}
        for name in [*plan["held"], *plan["targets"]]:
            if item not in nodes.setdefault(name, []):
                nodes[name].append(item)
    budget = min((c.node_budget_gb for c in caches), default=0) * 10**9
    return {"budget_bytes": budget, "nodes": dict(sorted(nodes.items()))}
