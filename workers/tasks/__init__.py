"""Celery task modules; importing this package registers every task."""

from workers.tasks import autoscale, reconcile, rollout, system, telemetry, whatif  # noqa: F401
