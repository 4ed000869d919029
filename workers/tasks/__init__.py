"""Celery task modules; importing this package registers every task."""

from workers.tasks import autoscale, reconcile, system, telemetry  # noqa: F401
