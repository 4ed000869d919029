"""A tenant's GPUs against its queue: which queue covers a service, and what its services hold per quota entry.

Validation bounds the tenant's services at maximum replicas by each entry's ceiling (nominal plus what it may
borrow); the autoscaler bounds a scale-up the same way with current replicas. A queue covers the tenant's
services on its cluster, or, without a cluster, those on every cluster where the tenant has no queue of its own.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

from apps.tenancy.choices import ANY_GPU_TYPE
from apps.tenancy.models import TenantQueue


def queue_for(tenant_id: int, cluster_id: int | None) -> TenantQueue | None:
    """The tenant's queue on a cluster: its own there, else the tenant's queue for every cluster."""
    found = {q.cluster_id: q for q in TenantQueue.objects.filter(tenant_id=tenant_id).select_related("cluster")
             if q.cluster_id in (None, cluster_id)}
    return found.get(cluster_id) or found.get(None)


def covered_services(queue: TenantQueue):
    """The tenant's services (not being deleted) whose GPUs count against this queue."""
    return queue.covered_services()


def held(queue: TenantQueue, pools: Iterable, gpus: Callable = lambda p: p.gpus_at_max) -> Counter:
    """GPUs per quota entry of the queue that `pools` hold (`gpus(pool)`: at maximum replicas by default)."""
    total: Counter = Counter()
    for pool in pools:
        total[queue.bucket(pool.gpu_type)] += gpus(pool)
    return total


def entry_words(key: str) -> str:
    """How a message names one quota entry: "GPUs" for the any-type entry, "l4-24gb GPUs" otherwise."""
    return "GPUs" if key == ANY_GPU_TYPE else f"{key} GPUs"


def quota_room(service, pool, gpus_per: int, other_gpus: int = 0) -> tuple[int, str]:
    """Replicas the tenant's queue still allows the pool beyond its current ones, for the pool's GPU type (its
    ceiling: nominal plus what it may borrow, less what the tenant's services hold now; `other_gpus`: used by no Pool
    row, counted against the same entry), and the figures. The autoscaler's bound and the prefetch plan's."""
    queue = queue_for(service.tenant_id, service.cluster_id)
    if queue is None:
        return 0, f"tenant {service.tenant.slug} has no GPU quota on cluster {service.cluster.name}"
    key = queue.bucket(pool.gpu_type)
    covered = [p for s in covered_services(queue).prefetch_related("pools") for p in s.pools.all()]
    used = other_gpus + held(queue, covered, lambda p: p.replicas * p.gpus_per_replica * p.nodes_per_replica)[key]
    quota = queue.ceiling(key)
    return max((quota - used) // gpus_per, 0), f"tenant {service.tenant.slug} uses {used} of {quota} {entry_words(key)}"
