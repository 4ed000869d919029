"""Filters of the services API."""

import django_filters

from apps.catalog.choices import EngineKind
from apps.core.api.filters import IdFilter, StrictFilterSet
from apps.serving.models import InferenceService


class InferenceServiceFilterSet(StrictFilterSet):
    """Services by name, tenant slug, cluster name, model and runtime id (as the API shows them), engine,
    deployment mode, phase and routing policy."""

    name = django_filters.CharFilter(field_name="name", help_text="Exact service name.")
    tenant = django_filters.CharFilter(field_name="tenant__slug", help_text="Tenant slug.")
    cluster = django_filters.CharFilter(field_name="cluster__name", help_text="Cluster name.")
    # By id, as the API shows them; an id the caller cannot see simply matches nothing.
    model = IdFilter(field_name="model_id", help_text="Model id.")
    runtime = IdFilter(field_name="runtime_id", help_text="Runtime id.")
    engine = django_filters.ChoiceFilter(field_name="runtime__engine", choices=EngineKind.choices)

    class Meta:
        model = InferenceService
        fields = ["name", "tenant", "cluster", "model", "runtime", "engine", "deployment_mode", "phase",
                  "routing_policy"]
