"""Celery task modules; importing this package registers every task."""

from workers.tasks import system  # noqa: F401
