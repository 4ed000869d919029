"""The Django project: settings, URLs, WSGI/ASGI. The Celery app lives in `workers.celery`."""

from workers.celery import app as celery_app

__all__ = ["celery_app"]
