"""Read-only API of the audit log: staff see every entry, tenant members their tenants' entries."""

from __future__ import annotations

import django_filters
from rest_framework import serializers, viewsets

from apps.core.api.filters import StrictFilterSet
from apps.core.api.pagination import StandardPagination
from apps.core.api.views import ASCII_PK
from apps.core.models import AuditEntry


class AuditEntrySerializer(serializers.ModelSerializer):
    object_type = serializers.CharField(source="content_type.model", read_only=True)
    tenant = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)

    class Meta:
        model = AuditEntry
        fields = [
            "id",
            "time",
            "actor_repr",
            "via",
            "action",
            "object_type",
            "object_id",
            "object_repr",
            "tenant",
            "before",
            "after",
        ]


class AuditEntryFilterSet(StrictFilterSet):
    object_type = django_filters.CharFilter(field_name="content_type__model")
    tenant = django_filters.CharFilter(field_name="tenant__slug")

    class Meta:
        model = AuditEntry
        fields = ["object_type", "object_id", "action", "via", "tenant"]


class AuditEntryViewSet(viewsets.ReadOnlyModelViewSet):
    lookup_value_regex = ASCII_PK
    queryset = AuditEntry.objects.select_related("content_type", "tenant")
    serializer_class = AuditEntrySerializer
    filterset_class = AuditEntryFilterSet
    pagination_class = StandardPagination
    search_fields = ["object_repr", "actor_repr"]
    ordering_fields = ["time"]

    def get_queryset(self):
        return self.queryset.restrict(self.request.user)
