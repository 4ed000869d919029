"""Celery tasks that keep services converged: one reconcile per service, and the periodic resync."""

from __future__ import annotations

import logging
import random

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from apps.serving import retention
from apps.serving.dispatch import clear_queued, mark_queued
from controlplane import tasknames as names
from workers import reconcile as rec
from workers.kube import TransientClusterError

log = logging.getLogger(__name__)


def backoff(retries: int, base: float = 1.0, cap: float = 60.0) -> float:
    """Exponential backoff with full jitter: a random delay in [0, min(cap, base·2^retries)]."""
    return random.uniform(0, min(cap, base * 2**retries))


@shared_task(bind=True, name=names.RECONCILE_SERVICE, max_retries=20, acks_late=True)
def reconcile_service(self, service_id: int) -> dict:
    """Reconcile one service; retry transient cluster errors with backoff and jitter, re-enqueue while
    the service is still deploying (never sleep waiting for readiness)."""
    clear_queued(service_id)  # from here on, a change made meanwhile queues a new pass
    try:
        outcome = rec.reconcile(service_id)
    except TransientClusterError as exc:
        rec.record_transient(service_id, exc)
        delay = max(exc.retry_after or 0.0, backoff(self.request.retries))
        log.info("reconcile %s: transient error (%s); retry in %.1fs", service_id, exc.message, delay)
        if not mark_queued(service_id):
            return {"service": service_id, "result": "queued-elsewhere"}
        raise self.retry(exc=exc, countdown=delay) from exc
    if outcome.requeue_after is not None and mark_queued(service_id):
        reconcile_service.apply_async(args=[service_id], countdown=outcome.requeue_after, ignore_result=True)
    log.info("reconcile %s: %s applied=%d pruned=%d in %.2fs %s", service_id, outcome.result, outcome.applied,
             outcome.pruned, outcome.duration_s, outcome.message)
    return {"service": service_id, "result": outcome.result, "applied": outcome.applied, "pruned": outcome.pruned}


@shared_task(name=names.RESYNC)
def resync() -> int:
    """Enqueue every service that is behind its spec, being deleted, or not checked for one interval
    (drift: a manual `kubectl edit` is undone within one interval)."""
    now = timezone.now()
    count = 0
    for pk in list(rec.due_for_resync(now).values_list("pk", flat=True)):
        if mark_queued(pk, now):  # a conditional update: two resyncs at once still queue it once
            reconcile_service.apply_async(args=[pk], ignore_result=True)
            count += 1
    return count


@shared_task(name=names.PRUNE_HISTORY)
def prune_history() -> dict:
    """Delete reconcile runs (and other registered history) past retention."""
    return retention.prune_history()


@shared_task(name=names.SYNC_INVENTORIES)
def sync_inventories() -> dict:
    """Refresh the GPU inventory of every cluster; an unreachable cluster is reported, not fatal."""
    from apps.clusters.models import Cluster
    from workers.inventory import sync_inventory
    from workers.kube import ClusterError, kube_for

    counts = {}
    for cluster in Cluster.objects.all():
        try:
            kube = kube_for(cluster)
            with kube.pass_deadline(settings.RECONCILE_PASS_DEADLINE_SECONDS):
                counts[cluster.name] = sync_inventory(cluster, kube)
        except ClusterError as exc:
            log.warning("inventory of cluster %s failed: %s", cluster.name, exc.message)
            counts[cluster.name] = None
        except Exception:  # whatever one cluster answers, the others still get their inventory
            log.exception("inventory of cluster %s failed", cluster.name)
            counts[cluster.name] = None
    return counts
