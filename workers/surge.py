"""Surges between the built-in autoscaler's periodic evaluations.

Every chunk of a telemetry cycle (workers/telemetry.py), once written, is read for services whose load stepped
up from the smoothed load the periodic evaluations keep (`PoolAutoscalerState.history`, the forecast's level), by
the same test the check itself makes (`apps.autoscaling.surge.stepped`). Each is checked at once on the
`autoscale` queue (`apps.autoscaling.surge`, which tests that again and more on the pool's own figures): so a step
in the load is met within one scrape period, as Knative's panic mode meets it, not at the next evaluation. One
query per chunk with any load; services never evaluated (no autoscaler state) wait for the periodic evaluation.
"""

from __future__ import annotations

from apps.autoscaling.models import PoolAutoscalerState
from apps.autoscaling.surge import stepped
from apps.telemetry.models import SERVICE_ROLE
from controlplane.celery import app as celery_app
from controlplane.tasknames import AUTOSCALE_SURGE_SERVICE


def surging(groups: dict) -> list[int]:
    """Ids of the builtin services whose service-wide figures of this scrape (`CycleFigures.groups`) show a step
    (`apps.autoscaling.surge.stepped`) from the smoothed load of each of their pools (the lowest; any pool not
    measured yet: none)."""
    figures = {sid: f for (sid, role), f in groups.items() if role == SERVICE_ROLE and f is not None
               and (f.prompt_tokens_per_s or f.waiting_prompt_tokens)}  # an idle service has no step to check
    if not figures:
        return []
    levels: dict[int, list[float | None]] = {}
    for service_id, history in (PoolAutoscalerState.objects
                                .filter(service_id__in=figures, service__autoscaling__autoscaler="builtin",
                                        service__deletion_requested_at__isnull=True)
                                .exclude(pool__contains="@").values_list("service_id", "history")):
        levels.setdefault(service_id, []).append(((history or {}).get("forecast") or {}).get("level"))
    return sorted(sid for sid, pools in levels.items()
                  if stepped(figures[sid].prompt_tokens_per_s, figures[sid].waiting_prompt_tokens,
                             None if None in pools else min(pools)))


def check(groups: dict) -> list[int]:
    """Enqueue a surge check for each service of `groups` whose load stepped up; returns their ids."""
    found = surging(groups)
    for service_id in found:
        celery_app.send_task(AUTOSCALE_SURGE_SERVICE, args=[service_id], retry=False)
    return found
