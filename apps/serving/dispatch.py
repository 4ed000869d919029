"""The one place apps hand work to the workers: by task name, so apps never import `workers/`."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from apps.serving.models import InferenceService
from controlplane.celery import app as celery_app
from controlplane.tasknames import RECONCILE_SERVICE

logger = logging.getLogger(__name__)


def mark_queued(service_id: int, now=None) -> bool:
    """Claim the right to queue a reconcile of the service: True when no reconcile is queued already (or
    the last mark is older than RECONCILE_QUEUED_EXPIRY_SECONDS, a lost message). The task clears the mark
    when it starts, so a change made during a pass is queued again."""
    now = now or timezone.now()
    expired = now - timedelta(seconds=settings.RECONCILE_QUEUED_EXPIRY_SECONDS)
    return bool(InferenceService.objects.filter(Q(queued_at__isnull=True) | Q(queued_at__lt=expired),
                                                pk=service_id).update(queued_at=now))


def clear_queued(service_id: int) -> None:
    """The queued reconcile is running (or was never sent): the next change may queue another."""
    InferenceService.objects.filter(pk=service_id).update(queued_at=None)


def enqueue_reconcile(service_id: int) -> None:
    """Ask a worker to reconcile the service once the current transaction commits, unless one is queued
    already (it reads the spec when it runs, so it applies this change too).

    A lost message is not fatal: the periodic resync picks up every service whose
    observed_generation is behind, so a broker outage only delays convergence.
    """

    def send() -> None:
        if not mark_queued(service_id):
            return
        try:
            # No result subscription: with the broker down, a result backend on it would retry for
            # ~20 s inside the user's request before giving up.
            celery_app.send_task(RECONCILE_SERVICE, args=[service_id], retry=False, ignore_result=True)
        except Exception:  # the broker may be down; resync will catch up
            clear_queued(service_id)
            logger.warning("Could not enqueue reconcile for service %s; resync will retry.", service_id)

    transaction.on_commit(send)
