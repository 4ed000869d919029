"""Vocabularies of telemetry."""

from django.db import models


class Resolution(models.IntegerChoices):
    """How much time one stored series row covers."""

    RAW = 0, "One scrape interval"
    MINUTE = 60, "One-minute rollup"
