"""The Django project: settings, URLs, WSGI/ASGI and the Celery app (`controlplane.celery`)."""

from controlplane.celery import app as celery_app

__all__ = ("celery_app",)
