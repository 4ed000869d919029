"""Filters of the services API."""

import django_filters

from apps.core.api.filters import StrictFilterSet
from apps.serving.models import InferenceService


class InferenceServiceFilterSet(StrictFilterSet):
    tenant = django_filters.CharFilter(field_name="tenant__slug")
    cluster = django_filters.CharFilter(field_name="cluster__name")
    engine = django_filters.CharFilter(field_name="runtime__engine")

    class Meta:
        model = InferenceService
        fields = ["tenant", "cluster", "engine", "model", "runtime", "deployment_mode", "phase", "routing_policy"]
