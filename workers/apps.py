from django.apps import AppConfig


class WorkersConfig(AppConfig):
    """Registered so that the worker-side management commands (`reconcile`) are found."""

    name = "workers"
    label = "workers"
