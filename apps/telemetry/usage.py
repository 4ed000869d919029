"""GPU usage of a tenant: GPUs per GPU type (at maximum replicas and running now) and GPU-hours.

GPU-hours come from the one-minute rollups of the stored series: each row's ready replicas times the
pool's GPUs per replica (x nodes per replica) is that many GPUs for one minute. Single-pool services
use their whole-service rows, multi-pool services their per-pool rows. The pools' current sizes are
used, so a pool resized within the window is counted at its new size. The minute still being rolled up
is not counted yet.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from django.db.models import Sum

from apps.serving.choices import GpuType, Phase
from apps.serving.models import Pool
from apps.telemetry.choices import Resolution
from apps.telemetry.models import SERVICE_ROLE, SeriesPoint


def gpus_by_type(tenant_id: int) -> list[dict]:
    """Per GPU type: GPUs the tenant's services reserve at maximum replicas and GPUs in ready replicas."""
    rows: dict[str, dict] = defaultdict(lambda: {"at_max": 0, "ready": 0})
    pools = Pool.objects.filter(service__tenant_id=tenant_id).exclude(service__phase=Phase.DELETING)
    for pool in pools.only("gpu_type", "max_replicas", "ready_replicas", "gpus_per_replica", "nodes_per_replica"):
        per_replica = pool.gpus_per_replica * pool.nodes_per_replica
        rows[pool.gpu_type]["at_max"] += pool.max_replicas * per_replica
        rows[pool.gpu_type]["ready"] += pool.ready_replicas * per_replica
    labels = dict(GpuType.choices)
    return [{"gpu_type": key, "label": labels.get(key, key), **rows[key]} for key in sorted(rows)]


def gpu_hours(tenant_id: int, since: datetime) -> float:
    """GPU-hours of the tenant's services from `since` until the newest one-minute rollup."""
    pools = list(Pool.objects.filter(service__tenant_id=tenant_id)
                 .values_list("service_id", "role", "gpus_per_replica", "nodes_per_replica"))
    per_service: dict[int, list] = defaultdict(list)
    for service_id, role, gpus, nodes in pools:
        per_service[service_id].append((role, gpus * nodes))
    gpus_of: dict[tuple[int, str], int] = {}
    for service_id, roles in per_service.items():
        if len(roles) == 1:
            gpus_of[(service_id, SERVICE_ROLE)] = roles[0][1]
        else:
            gpus_of.update({(service_id, role): gpus for role, gpus in roles})
    minutes = (
        SeriesPoint.objects.filter(service_id__in=per_service, resolution=Resolution.MINUTE, time__gte=since)
        .values_list("service_id", "role").annotate(replica_minutes=Sum("ready_replicas"))
    )
    gpu_minutes = sum(gpus_of.get((sid, role), 0) * (replica_minutes or 0) for sid, role, replica_minutes in minutes)
    return gpu_minutes / 60
