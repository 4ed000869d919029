"""The node page (platform staff): every cluster's GPU nodes with their GPUs, the model copies on their local disks
within the platform's budget, and the model agent's progress (what it still has to copy) and latest Events, all from
the inventory pass (`workers/inventory.py`), for kubesim and real clusters alike."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.shortcuts import render

from apps.clusters.models import Cluster, GpuNode
from apps.core.access import is_platform_staff
from apps.serving.prefetch import cluster_plan, held_models, platform_weights
from capacity.modelcache import COPYING
from capacity.startup import size


def _size(nbytes: int) -> str:
    return size(nbytes) if nbytes > 0 else "0 GB"


def node_row(node, weights_of: dict[str, int], planned: list[dict], budget: int) -> dict:
    """One node's figures: GPUs, models held, disk used and free against the budget, what the agent has to copy."""
    held = held_models(node, weights_of)
    used = sum(b for _, b in held)
    names = {m for m, _ in held}
    latest = node.agent_events[0] if node.agent_events else {}

    def copying(model: str) -> bool:  # the agent's newest Event is "copying <model> (<size>) …"
        return latest.get("reason") == COPYING and latest.get("message", "").startswith(f"copying {model} ")

    pending = [{"model": p["model"], "size": size(int(p.get("bytes") or 0)),
                "state": "copying" if copying(p["model"]) else "to copy"}
               for p in planned if p["model"] not in names]
    return {
        "name": node.name, "ready": node.ready, "product": node.gpu_product or "no GPU label",
        "gpus": node.gpu_count, "in_use": node.allocated,
        "held": [{"model": m, "size": size(b)} for m, b in held],
        "used": _size(used), "budget": size(budget) if budget else "", "free": _size(budget - used),
        "over": budget and used > budget,
        "pending": pending, "events": node.agent_events,
    }


def cluster_nodes(cluster, weights_of: dict[str, int]) -> dict:
    plan = cluster_plan(cluster)
    budget = int(plan["budget_bytes"])
    nodes = GpuNode.objects.filter(cluster=cluster).order_by("name")
    return {"name": cluster.name, "budget": size(budget) if budget else "",
            "rows": [node_row(n, weights_of, plan["nodes"].get(n.name, []), budget) for n in nodes]}


@login_required
def node_page(request):
    """Platform staff only: nodes are platform infrastructure no tenant sees."""
    if not is_platform_staff(request.user):
        raise PermissionDenied("Only platform staff see the clusters' nodes.")
    weights_of = platform_weights()
    clusters = [cluster_nodes(c, weights_of) for c in Cluster.objects.restrict(request.user).order_by("name")]
    return render(request, "web/nodes.html", {"clusters": clusters})
