"""Surges between the built-in autoscaler's periodic evaluations.

Every chunk of a telemetry cycle (workers/telemetry.py), once written, is read for services whose load stepped
up: prompt tokens arriving at `SURGE_FACTOR` × or more the smoothed load the periodic evaluations keep
(`PoolAutoscalerState.history`, the forecast's level), or more prompt tokens waiting than a second of it brings
(any, before a load is measured). Each is checked at once on the `autoscale` queue (`apps.autoscaling.surge`,
which tests the same and more on the pool's own figures): so a step in the load is met within one scrape
period, as Knative's panic mode meets it, not at the next evaluation. One query per chunk; services never
evaluated (no autoscaler state) wait for the periodic evaluation.
"""

from __future__ import annotations

from apps.autoscaling.models import PoolAutoscalerState
from apps.autoscaling.surge import SURGE_FACTOR
from apps.telemetry.models import SERVICE_ROLE
from controlplane.celery import app as celery_app
from controlplane.tasknames import AUTOSCALE_SURGE_SERVICE


def surging(groups: dict) -> list[int]:
    """Ids of the builtin services whose service-wide figures of this scrape (`CycleFigures.groups`) show a step."""
    figures = {sid: f for (sid, role), f in groups.items() if role == SERVICE_ROLE and f is not None}
    if not figures:
        return []
    levels: dict[int, list[float | None]] = {}
    for service_id, history in (PoolAutoscalerState.objects
                                .filter(service_id__in=figures, service__autoscaling__autoscaler="builtin",
                                        service__deletion_requested_at__isnull=True)
                                .exclude(pool__contains="@").values_list("service_id", "history")):
        levels.setdefault(service_id, []).append(((history or {}).get("forecast") or {}).get("level"))
    out = []
    for service_id, pools in levels.items():
        f = figures[service_id]
        tps, waiting = f.prompt_tokens_per_s, f.waiting_prompt_tokens or 0.0
        known = [level for level in pools if level is not None]
        level = min(known) if len(known) == len(pools) else None  # a pool not measured yet: any wait counts
        if waiting > (level or 0.0) or (level is not None and tps is not None and tps >= SURGE_FACTOR * level):
            out.append(service_id)
    return sorted(out)


def check(groups: dict) -> list[int]:
    """Enqueue a surge check for each service of `groups` whose load stepped up; returns their ids."""
    found = surging(groups)
    for service_id in found:
        celery_app.send_task(AUTOSCALE_SURGE_SERVICE, args=[service_id], retry=False)
    return found
