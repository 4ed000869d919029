"""API views of tenancy."""

from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.response import Response

from apps.core.api.exceptions import Conflict, api_error
from apps.core.api.views import ScopedModelViewSet
from apps.core.choices import AuditVia
from apps.tenancy.api.serializers import (
    ApiTokenRotationSerializer,
    ApiTokenSerializer,
    IssuedApiTokenSerializer,
    MembershipSerializer,
    TenantSerializer,
)
from apps.tenancy.filtersets import ApiTokenFilterSet, MembershipFilterSet
from apps.tenancy.models import ApiToken, Membership, Tenant
from apps.tenancy.tokens import TokenRevoked, rotate_token


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

    @extend_schema(request=ApiTokenRotationSerializer, responses={200: IssuedApiTokenSerializer})
    @action(detail=True, methods=["post"])
    def rotate(self, request, pk=None):
        """A new secret for this token (shown once) and a new expiry; the old secret stops working now."""
        token = self.get_object()
        serializer = ApiTokenRotationSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        try:
            plaintext = rotate_token(
                token, actor=request.user, via=AuditVia.API, expires_at=serializer.validated_data.get("expires_at")
            )
        except TokenRevoked as exc:
            raise Conflict(str(exc)) from exc
        except DjangoValidationError as exc:
            raise api_error(exc) from exc
        token.refresh_from_db()
        token.plaintext = plaintext
        return Response(IssuedApiTokenSerializer(token, context=self.get_serializer_context()).data)
