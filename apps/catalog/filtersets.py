"""Filters of the catalog API: by tenant slug, platform-wide or private, and per-kind fields."""

import django_filters

from apps.catalog.models import Adapter, Model, Runtime
from apps.core.api.filters import StrictBooleanFilter, StrictFilterSet


class CatalogEntryFilterSet(StrictFilterSet):
    name = django_filters.CharFilter(field_name="name", help_text="Exact name.")
    tenant = django_filters.CharFilter(field_name="tenant__slug", help_text="Tenant slug.")
    platform_wide = StrictBooleanFilter(field_name="tenant", lookup_expr="isnull")


class ModelFilterSet(CatalogEntryFilterSet):
    class Meta:
        model = Model
        fields = ["tenant", "platform_wide", "name", "dtype"]


class AdapterFilterSet(CatalogEntryFilterSet):
    class Meta:
        model = Adapter
        fields = ["tenant", "platform_wide", "name", "base_model"]


class RuntimeFilterSet(CatalogEntryFilterSet):
    class Meta:
        model = Runtime
        fields = ["tenant", "platform_wide", "name", "engine"]
