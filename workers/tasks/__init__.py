"""Celery task modules; importing this package registers every task."""

from workers.tasks import autoscale, reconcile, rollout, system, telemetry  # noqa: F401
