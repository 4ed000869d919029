"""Filters of the tenancy API."""

import django_filters

from apps.tenancy.models import ApiToken, Membership


class MembershipFilterSet(django_filters.FilterSet):
    tenant = django_filters.CharFilter(field_name="tenant__slug")
    user = django_filters.CharFilter(field_name="user__username")

    class Meta:
        model = Membership
        fields = ["tenant", "user", "role"]


class ApiTokenFilterSet(django_filters.FilterSet):
    tenant = django_filters.CharFilter(field_name="tenant__slug")
    revoked = django_filters.BooleanFilter(field_name="revoked_at", lookup_expr="isnull", exclude=True)

    class Meta:
        model = ApiToken
        fields = ["tenant", "revoked"]
