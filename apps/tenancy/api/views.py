"""API views of tenancy."""

from __future__ import annotations

from apps.core.api.views import ScopedModelViewSet
from apps.tenancy.api.secrets import SecretShownOnceMixin, shown_once_schema
from apps.tenancy.api.serializers import (
    ApiTokenRotationSerializer,
    ApiTokenSerializer,
    IssuedApiTokenSerializer,
    MembershipSerializer,
    TenantSerializer,
)
from apps.tenancy.filtersets import ApiTokenFilterSet, MembershipFilterSet
from apps.tenancy.models import ApiToken, Membership, Tenant
from apps.tenancy.tokens import rotate_token


class TenantViewSet(ScopedModelViewSet):
    queryset = Tenant.objects.all()
    serializer_class = TenantSerializer
    search_fields = ["slug", "name"]
    ordering_fields = ["slug", "name", "created"]
    filterset_fields = ["slug"]


class MembershipViewSet(ScopedModelViewSet):
    queryset = Membership.objects.select_related("tenant", "user")
    serializer_class = MembershipSerializer
    filterset_class = MembershipFilterSet
    search_fields = ["user__username", "tenant__slug"]
    ordering_fields = ["created", "role"]


@shown_once_schema(IssuedApiTokenSerializer, ApiTokenRotationSerializer,
                   "A new secret for this token (shown once) and a new expiry; the old secret stops working now.")
class ApiTokenViewSet(SecretShownOnceMixin, ScopedModelViewSet):
    queryset = ApiToken.objects.select_related("tenant", "user")
    serializer_class = ApiTokenSerializer
    issued_serializer_class = IssuedApiTokenSerializer
    rotation_serializer_class = ApiTokenRotationSerializer
    rotate_secret = staticmethod(rotate_token)
    filterset_class = ApiTokenFilterSet
    search_fields = ["name", "prefix"]
    ordering_fields = ["created", "expires_at", "last_used_at"]
