"""Retention of history tables: reconcile runs here, and any other app's history (e.g. scaling decisions)
through `register_history`, so one periodic task prunes them all."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.utils import timezone


@dataclass(frozen=True)
class History:
    """A table whose rows older than `settings.<days_setting>` days (by `time_field`) are deleted."""

    model_label: str  # "app_label.ModelName"
    time_field: str
    days_setting: str


_HISTORIES: dict[str, History] = {}


def register_history(model_label: str, time_field: str, days_setting: str) -> None:
    """Have `prune_history` delete the model's rows past the retention named by `days_setting`. Apps call
    it from their AppConfig.ready() (the autoscaler's decisions, for one)."""
    _HISTORIES[model_label] = History(model_label, time_field, days_setting)


register_history("serving.ReconcileRun", "started_at", "RECONCILE_RUN_RETENTION_DAYS")


def prune_history(now=None) -> dict[str, int]:
    """Delete every registered table's rows past retention; returns rows deleted per table."""
    from django.apps import apps

    now = now or timezone.now()
    counts = {}
    for history in _HISTORIES.values():
        model = apps.get_model(history.model_label)
        cutoff = now - timedelta(days=getattr(settings, history.days_setting))
        deleted, _ = model.objects.filter(**{f"{history.time_field}__lt": cutoff}).delete()
        counts[history.model_label] = deleted
    return counts
