"""What each tenant queue holds of its cohort: nominal, used, borrowed and lent GPUs per GPU type, per cluster.

Read for the tenant overview and the fleet page's cohorts from the same admission plan the control plane acts on
(`apps.serving.admission.cluster_plans`, i.e. `capacity.kueue.admit`): where the control plane admits, the
replicas it admitted hold GPUs; where Kueue admits, the policy's answer from scratch is what Kueue holds.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from django.db.models import Q

from apps.clusters.models import Cluster
from apps.serving.admission import cluster_plans, queues_by_cluster, workload_key
from apps.tenancy.choices import ANY_GPU_TYPE
from capacity import kueue


@dataclass(frozen=True)
class QueueRow:
    """One tenant queue's GPUs of one type on one cluster."""

    cluster: str
    cohort: str
    tenant: str
    gpu: str  # the GPU's short name ("L4"), or "any type"
    nominal: int
    used: int
    borrowed: int
    lent: int


def cluster_rows(clusters) -> list[QueueRow]:
    """Every tenant queue of the clusters, a row per GPU type it has quota of or uses, by cluster, cohort, tenant."""
    clusters = list(clusters)
    plans, queues = cluster_plans(clusters), queues_by_cluster(clusters)
    return [row for cluster in clusters for row in _rows(cluster, *plans[cluster.pk], queues[cluster.pk])]


def _rows(cluster, plan: kueue.Plan, services: list, tenant_queues: dict) -> list[QueueRow]:
    """One cluster's rows from its admission plan: what admitted replicas hold, and whose quota they borrow."""
    used: dict[tuple[str, str], int] = defaultdict(int)
    borrowed: dict[tuple[str, str], int] = defaultdict(int)
    lent: dict[tuple[str, str], int] = defaultdict(int)
    for service in services:
        for pool in service.pools.all():
            for i in range(pool.replicas):
                got = plan.admitted.get(workload_key(service, pool.role, i))
                # Replicas this very pass would newly admit hold nothing yet where the control plane admits.
                if got is None or (got.new and not cluster.kueue_installed):
                    continue
                slug, flavor = service.tenant.slug, pool.gpu_type
                used[slug, flavor] += pool.gpus_per_replica * pool.nodes_per_replica
                for lender, gpus in got.borrowed.items():
                    borrowed[slug, flavor] += gpus
                    lent[lender, flavor] += gpus
    rows = []
    for queue in tenant_queues.values():
        slug = queue.tenant.slug
        flavors = {f for (s, f) in (*used, *lent) if s == slug} | {k for k in queue.nominal if k != ANY_GPU_TYPE}
        if not flavors and ANY_GPU_TYPE in queue.nominal:
            flavors = {ANY_GPU_TYPE}
        for f in sorted(flavors):
            rows.append(QueueRow(
                cluster=cluster.name, cohort=queue.cohort_name(cluster), tenant=slug,
                gpu="any type" if f == ANY_GPU_TYPE else kueue.gpu_word(f), nominal=queue.nominal_of(queue.bucket(f)),
                used=used[slug, f], borrowed=borrowed[slug, f], lent=lent[slug, f]))
    return sorted(rows, key=lambda r: (r.cohort, r.tenant, r.gpu))


def tenant_rows(tenant) -> list[QueueRow]:
    """The tenant's rows on every cluster it may deploy to or has services on."""
    usable = Cluster.objects.usable_by_tenant(tenant.pk).values("pk")
    clusters = Cluster.objects.filter(Q(pk__in=usable) | Q(services__tenant=tenant)).distinct()
    return [row for row in cluster_rows(clusters.order_by("name")) if row.tenant == tenant.slug]


def cohorts(clusters, tenant_slugs: set[str] | None) -> list[dict]:
    """The fleet page's cohorts: per cluster and cohort, the member queues' rows (only those of `tenant_slugs`
    unless None) and the cohort's totals per GPU type."""
    out, clusters = [], list(clusters)
    by_cluster: dict[str, list[QueueRow]] = defaultdict(list)
    for row in cluster_rows(clusters):
        by_cluster[row.cluster].append(row)
    for cluster in clusters:
        by_cohort: dict[str, list[QueueRow]] = defaultdict(list)
        for row in by_cluster[cluster.name]:
            by_cohort[row.cohort].append(row)
        for name, rows in sorted(by_cohort.items()):
            totals: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
            for row in rows:
                total = totals[row.gpu]
                total[0], total[1], total[2] = total[0] + row.nominal, total[1] + row.used, total[2] + row.borrowed
            shown = [r for r in rows if tenant_slugs is None or r.tenant in tenant_slugs]
            out.append({"cluster": cluster.name, "cohort": name, "members": len({r.tenant for r in rows}),
                        "rows": shown, "totals": [{"gpu": g, "nominal": n, "used": u, "borrowed": b}
                                                  for g, (n, u, b) in sorted(totals.items())]})
    return out
