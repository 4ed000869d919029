"""The one place apps hand work to the workers: by task name, so apps never import `workers/`."""

from __future__ import annotations

import logging

from django.db import transaction

from controlplane.celery import app as celery_app
from controlplane.tasknames import RECONCILE_SERVICE

logger = logging.getLogger(__name__)


def enqueue_reconcile(service_id: int) -> None:
    """Ask a worker to reconcile the service once the current transaction commits.

    A lost message is not fatal: the periodic resync picks up every service whose
    observed_generation is behind, so a broker outage only delays convergence.
    """

    def send() -> None:
        try:
            celery_app.send_task(RECONCILE_SERVICE, args=[service_id], retry=False)
        except Exception:  # the broker may be down; resync will catch up
            logger.warning("Could not enqueue reconcile for service %s; resync will retry.", service_id)

    transaction.on_commit(send)
