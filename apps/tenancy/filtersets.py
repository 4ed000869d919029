"""Filters of the tenancy API."""

import django_filters

from apps.core.api.filters import StrictBooleanFilter, StrictFilterSet
from apps.tenancy.models import ApiToken, Membership


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
