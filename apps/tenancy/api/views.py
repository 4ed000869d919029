"""API views of tenancy."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import status
from rest_framework.response import Response

from apps.core.api.views import ScopedModelViewSet
from apps.tenancy.api.serializers import (
    ApiTokenSerializer,
    IssuedApiTokenSerializer,
    MembershipSerializer,
    TenantSerializer,
)
from apps.tenancy.filtersets import ApiTokenFilterSet, MembershipFilterSet
from apps.tenancy.models import ApiToken, Membership, Tenant


class TenantViewSet(ScopedModelViewSet):
    queryset = Tenant.objects.all()
    serializer_class = TenantSerializer
    search_fields = ["slug", "name"]
    ordering_fields = ["slug", "name", "gpu_quota", "created"]
    filterset_fields = ["slug"]


class MembershipViewSet(ScopedModelViewSet):
    queryset = Membership.objects.select_related("tenant", "user")
    serializer_class = MembershipSerializer
    filterset_class = MembershipFilterSet
    search_fields = ["user__username", "tenant__slug"]
    ordering_fields = ["created", "role"]


@extend_schema_view(create=extend_schema(responses={201: IssuedApiTokenSerializer}))
class ApiTokenViewSet(ScopedModelViewSet):
    queryset = ApiToken.objects.select_related("tenant", "user")
    serializer_class = ApiTokenSerializer
    filterset_class = ApiTokenFilterSet
    search_fields = ["name", "prefix"]
    ordering_fields = ["created", "expires_at", "last_used_at"]

    def create(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        self.perform_create(serializer)
        body = IssuedApiTokenSerializer(serializer.instance, context=self.get_serializer_context()).data
        return Response(body, status=status.HTTP_201_CREATED)
