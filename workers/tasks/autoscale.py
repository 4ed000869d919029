"""Celery tasks of the built-in autoscaler (queue `autoscale`): every AUTOSCALE_SECONDS beat evaluates each
builtin service from the stored series (no scrape), both revisions of it during a canary rollout
(apps/rollouts/scaling.py); the scraper asks for one service at once when its
router holds a request at zero replicas (activation), and for a surge check when a scrape shows a step in its load
(workers/surge.py); decisions past retention are pruned hourly."""

from __future__ import annotations

import logging

from celery import shared_task

from apps.autoscaling import evaluate
from apps.rollouts import scaling
from controlplane import tasknames as names
from workers import sleep

log = logging.getLogger(__name__)


@shared_task(name=names.AUTOSCALE_EVALUATE_ALL, ignore_result=True)
def evaluate_all() -> int:
    """Evaluate every builtin-autoscaled service; one service's failure does not stop the others."""
    count = 0
    for service_id in evaluate.autoscaled_services().values_list("pk", flat=True):
        try:
            for outcome in scaling.evaluate_service(service_id):
                if outcome.action:
                    log.info("autoscale %s/%s: %s %d → %d: %s", service_id, outcome.pool, outcome.action,
                             outcome.current, outcome.desired, outcome.reason)
        except Exception:
            log.exception("autoscale: evaluating service %s failed", service_id)
        count += 1
    return count


@shared_task(name=names.AUTOSCALE_EVALUATE_SERVICE, ignore_result=True)
def evaluate_service(service_id: int) -> list[dict]:
    """Evaluate one service now (activation of a serverless service at zero replicas)."""
    return [vars(o) for o in scaling.evaluate_service(service_id)]


@shared_task(name=names.AUTOSCALE_SURGE_SERVICE, ignore_result=True)
def surge_service(service_id: int) -> list[dict]:
    """Check one service for a surge now, between the periodic evaluations (scale-up only)."""
    outcomes = [o for o in scaling.evaluate_service(service_id, between=True) if o.action]
    for outcome in outcomes:
        log.info("autoscale %s/%s: surge %s %d → %d: %s", service_id, outcome.pool, outcome.action,
                 outcome.current, outcome.desired, outcome.reason)
    return [vars(o) for o in outcomes]


@shared_task(name=names.AUTOSCALE_SLEEP_POOL, ignore_result=True)
def sleep_pool(service_id: int, role: str, level: int) -> dict[str, str]:
    """Put an idle pool's engines to sleep (the autoscaler chose sleep over scale to zero)."""
    return sleep.sleep_pool(service_id, role, level)


@shared_task(name=names.AUTOSCALE_PRUNE, ignore_result=True)
def prune() -> int:
    return evaluate.prune_decisions()
