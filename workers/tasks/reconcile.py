"""Celery tasks that keep services converged: one reconcile per service, and the periodic resync."""

from __future__ import annotations

import logging
import math
import random
from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.db.models import F
from django.utils import timezone

from apps.serving import retention
from apps.serving.dispatch import clear_queued, mark_queued
from controlplane import tasknames as names
from workers import reconcile as rec
from workers.kubeerrors import TransientClusterError

log = logging.getLogger(__name__)


def backoff(retries: int, base: float = 1.0, cap: float = 60.0) -> float:
    """Exponential backoff with full jitter: a random delay in [0, min(cap, base·2^retries)]."""
    return random.uniform(0, min(cap, base * 2**retries))


REQUEUE_GROWTH = 1.5  # each look that finds a service still deploying waits this much longer...
REQUEUE_CAP_SECONDS = 15.0  # ...up to this


def requeue_delay(base: float, waits: int) -> float:
    """Seconds until the next look at a service still deploying after `waits` such looks in a row: the
    first comes soon (a small rollout is seen Ready quickly), later ones less often, so that a thousand
    services rolling out at once do not spend the workers on looking."""
    return max(base, min(base * REQUEUE_GROWTH**waits, REQUEUE_CAP_SECONDS))


@shared_task(bind=True, name=names.RECONCILE_SERVICE, max_retries=20, acks_late=True)
def reconcile_service(self, service_id: int, waits: int = 0, look: bool = False) -> dict:
    """Reconcile one service; retry transient cluster errors with backoff and jitter, re-enqueue while
    the service is still deploying (never sleep waiting for readiness), less often the longer it takes.
    The re-enqueued passes are looks (`look`): they read back the workloads and pods, not every object."""
    clear_queued(service_id)  # from here on, a change made meanwhile queues a new pass
    try:
        outcome = rec.reconcile(service_id, look=look)
    except TransientClusterError as exc:
        rec.record_transient(service_id, exc)
        delay = max(exc.retry_after or 0.0, backoff(self.request.retries))
        log.info("reconcile %s: transient error (%s); retry in %.1fs", service_id, exc.message, delay)
        if not mark_queued(service_id):
            return {"service": service_id, "result": "queued-elsewhere"}
        raise self.retry(exc=exc, countdown=delay) from exc
    if outcome.requeue_after is not None and mark_queued(service_id):
        waits = waits + 1 if not (outcome.applied or outcome.pruned) else 0
        reconcile_service.apply_async(args=[service_id], kwargs={"waits": waits, "look": True},
                                      countdown=requeue_delay(outcome.requeue_after, waits), ignore_result=True)
    log.info("reconcile %s: %s applied=%d pruned=%d in %.2fs %s", service_id, outcome.result, outcome.applied,
             outcome.pruned, outcome.duration_s, outcome.message)
    return {"service": service_id, "result": outcome.result, "applied": outcome.applied, "pruned": outcome.pruned}


SPREAD_SHARE_OF_TICK = 0.9  # drift checks finish before the next tick looks at what is due


def spread(due: list[tuple[int, bool]], tick_seconds: float, share: int) -> list[tuple[int, float]]:
    """(service, countdown) for one resync tick. Work that is behind goes now. Drift checks of services
    that are up to date (`due` lists them oldest first) are capped at `share` per tick and spread
    evenly over the tick: services that converged together are checked over the whole interval, not
    all in the same second of every interval (no thundering herd); the rest wait for the next tick."""
    checks = [pk for pk, behind in due if not behind][:share]
    step = tick_seconds * SPREAD_SHARE_OF_TICK / max(len(checks), 1)
    return [(pk, 0.0) for pk, behind in due if behind] + [(pk, i * step) for i, pk in enumerate(checks)]


def tick_share(services: int, tick_seconds: float, interval_seconds: float, in_flight: int = 0) -> int:
    """Drift checks one tick may start: its fair share (every service once per interval, round robin), less
    the passes still in flight (queued, running, or waiting to look at a rollout again).

    Exactly the fair share, no more: the oldest go first, so services that converged in the same tick are
    spread over the ticks of the next interval and stay spread (a tick allowed more would keep a large
    cohort together, interval after interval). A tick only tops the workers' backlog up to its share: drift
    checks of converged services yield to services being created, changed or rolled out, and when the
    workers cannot check every service once per interval the interval stretches to their pass rate instead
    of the queue growing without end. A backlog of overdue checks drains in one interval, oldest first."""
    return max(0, math.ceil(services * tick_seconds / interval_seconds) - in_flight)


@shared_task(name=names.RESYNC)
def resync() -> int:
    """Enqueue every service that is behind its spec or being deleted, and this tick's round-robin share of
    drift checks, oldest first and spread over the tick (drift: a manual `kubectl edit` is undone within
    about one interval). A service with a reconcile queued already is never queued again."""
    now = timezone.now()
    queued = 0
    for pk, countdown in tick_plan(now):
        if mark_queued(pk, now):  # a conditional update: two resyncs at once still queue it once
            reconcile_service.apply_async(args=[pk], countdown=countdown or None, ignore_result=True)
            queued += 1
    return queued


def tick_plan(now) -> list[tuple[int, float]]:
    """(service, countdown) of every pass one resync tick at `now` starts: what is behind at once, then
    its share of drift checks, oldest first, spread over the tick."""
    from apps.serving.models import InferenceService

    rows = rec.due_for_resync(now).order_by(F("last_reconciled_at").asc(nulls_first=True), "pk").values_list(
        "pk", "generation", "observed_generation", "last_reconciled_at", "deletion_requested_at")
    due = [(pk, seen is None or observed < generation or deleting is not None)
           for pk, generation, observed, seen, deleting in rows.iterator()]
    lost = now - timedelta(seconds=settings.RECONCILE_QUEUED_EXPIRY_SECONDS)
    share = tick_share(InferenceService.objects.count(), settings.RESYNC_TICK_SECONDS,
                       settings.RECONCILE_RESYNC_SECONDS,
                       in_flight=InferenceService.objects.filter(queued_at__gte=lost).count())
    return spread(due, settings.RESYNC_TICK_SECONDS, share)


@shared_task(name=names.PRUNE_HISTORY)
def prune_history() -> dict:
    """Delete reconcile runs (and other registered history) past retention."""
    return retention.prune_history()


@shared_task(name=names.SYNC_INVENTORIES)
def sync_inventories() -> dict:
    """Refresh the GPU inventory of every cluster; an unreachable cluster is reported, not fatal."""
    from apps.clusters.models import Cluster
    from workers.inventory import sync_inventory
    from workers.kube import kube_for
    from workers.kubeerrors import ClusterError

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
