"""Filters of the tenancy API."""

import django_filters

from apps.core.api.filters import StrictBooleanFilter, StrictFilterSet
from apps.tenancy.models import ApiToken, Membership, TenantQueue


class MembershipFilterSet(StrictFilterSet):
    tenant = django_filters.CharFilter(field_name="tenant__slug")
    user = django_filters.CharFilter(field_name="user__username")

    class Meta:
        model = Membership
        fields = ["tenant", "user", "role"]


class ApiTokenFilterSet(StrictFilterSet):
    tenant = django_filters.CharFilter(field_name="tenant__slug")
    revoked = StrictBooleanFilter(field_name="revoked_at", lookup_expr="isnull", exclude=True)

    class Meta:
        model = ApiToken
        fields = ["tenant", "revoked"]


class TenantQueueFilterSet(StrictFilterSet):
    tenant = django_filters.CharFilter(field_name="tenant__slug")
    cluster = django_filters.CharFilter(field_name="cluster__name")

    class Meta:
        model = TenantQueue
        fields = ["tenant", "cluster", "cohort"]
