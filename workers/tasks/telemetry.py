"""Celery tasks of telemetry: the scrape cycle (beat, every TELEMETRY_SCRAPE_SECONDS), retention, and
heartbeats that measure how long a task waits in each queue (the `/metrics` queue-lag gauge)."""

from __future__ import annotations

import logging
from datetime import datetime

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from apps.gateway.rollup import roll_up_recent
from apps.telemetry.models import QueueHeartbeat
from apps.telemetry.retention import compact as compact_series
from controlplane import tasknames as names
from workers import telemetry

log = logging.getLogger(__name__)
QUEUES = names.QUEUES


@shared_task(name=names.TELEMETRY_SCRAPE, ignore_result=True)
def scrape() -> dict:
    """One scrape cycle of every cluster; a slow cycle is not queued behind (beat sets `expires`)."""
    reports = telemetry.scrape_all()
    summary = {r.cluster: {"pods": r.pods, "errors": r.errors, "seconds": round(r.duration_s, 3)} for r in reports}
    log.debug("telemetry cycle: %s", summary)
    return summary


@shared_task(name=names.TELEMETRY_COMPACT)
def compact() -> dict:
    """Roll raw rows up into one-minute rows and delete what is past retention."""
    return compact_series()


@shared_task(name=names.GATEWAY_USAGE_ROLLUP)
def gateway_usage_rollup() -> dict:
    """Roll the gateway's usage rows up per hour, then delete what is past retention."""
    return roll_up_recent()


@shared_task(name=names.SEND_HEARTBEATS, ignore_result=True)
def send_heartbeats() -> None:
    """Send one heartbeat through every queue; `heartbeat` notes how long it waited there."""
    prefix = settings.CELERY_QUEUE_PREFIX
    now = timezone.now()
    for name in QUEUES:
        queue = prefix + name
        # Only a heartbeat that arrived is replaced, so a stuck queue shows a growing lag.
        beat, created = QueueHeartbeat.objects.get_or_create(queue=queue, defaults={"sent_at": now})
        if not created and beat.received_at is None:
            continue
        QueueHeartbeat.objects.filter(queue=queue).update(sent_at=now, received_at=None)
        heartbeat.apply_async(args=[queue, now.isoformat()], queue=queue, expires=3600)


@shared_task(name=names.HEARTBEAT, ignore_result=True)
def heartbeat(queue: str, sent_at: str) -> None:
    """Record the time this task spent waiting in `queue`."""
    received = timezone.now()
    sent = datetime.fromisoformat(sent_at)
    QueueHeartbeat.objects.filter(queue=queue, sent_at=sent).update(
        received_at=received, lag_s=max((received - sent).total_seconds(), 0.0)
    )
