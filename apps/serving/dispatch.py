"""The one place apps hand work to the workers: by task name, so apps never import `workers/`."""

from __future__ import annotations

import logging

from django.db import transaction

logger = logging.getLogger(__name__)

RECONCILE_TASK = "workers.tasks.reconcile.reconcile_service"


def enqueue_reconcile(service_id: int) -> None:
    """Ask a worker to reconcile the service once the current transaction commits.

    A lost message is not fatal: the periodic resync picks up every service whose
    observed_generation is behind, so a broker outage only delays convergence.
    """

    def send() -> None:
        from workers.celery import app

        try:
            app.send_task(RECONCILE_TASK, args=[service_id], retry=False)
        except Exception:  # the broker may be down; resync will catch up
            logger.warning("Could not enqueue reconcile for service %s; resync will retry.", service_id)

    transaction.on_commit(send)
