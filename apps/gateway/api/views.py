"""API views of the gateway: inference keys (create, list, revoke, rotate) and tenant limits."""

from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.response import Response

from apps.core.api.exceptions import Conflict, api_error
from apps.core.api.views import ScopedModelViewSet
from apps.core.choices import AuditVia
from apps.gateway.api.serializers import (
    InferenceKeySerializer,
    IssuedInferenceKeySerializer,
    KeyRotationSerializer,
    TenantLimitsSerializer,
)
from apps.gateway.keys import revoke_key, rotate_key
from apps.gateway.models import InferenceKey, TenantLimits
from apps.tenancy.tokens import TokenRevoked


@extend_schema_view(create=extend_schema(responses={201: IssuedInferenceKeySerializer}))
class InferenceKeyViewSet(ScopedModelViewSet):
    queryset = InferenceKey.objects.select_related("tenant").prefetch_related("services")
    serializer_class = InferenceKeySerializer
    filterset_fields = ["tenant__slug"]
    search_fields = ["name", "prefix"]
    ordering_fields = ["created", "expires_at", "last_used_at", "name"]
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def create(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        self.perform_create(serializer)
        body = IssuedInferenceKeySerializer(serializer.instance, context=self.get_serializer_context()).data
        return Response(body, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: InferenceKeySerializer})
    @action(detail=True, methods=["post"])
    def revoke(self, request, pk=None):
        """Revoke the key now and for good."""
        key = self.get_object()
        key = revoke_key(key, actor=request.user, via=AuditVia.API)
        return Response(InferenceKeySerializer(key, context=self.get_serializer_context()).data)

    @extend_schema(request=KeyRotationSerializer, responses={200: IssuedInferenceKeySerializer})
    @action(detail=True, methods=["post"])
    def rotate(self, request, pk=None):
        """A new secret (shown once) and a new expiry; the old secret stops working."""
        key = self.get_object()
        serializer = KeyRotationSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        try:
            plaintext = rotate_key(
                key, actor=request.user, via=AuditVia.API, expires_at=serializer.validated_data.get("expires_at")
            )
        except TokenRevoked as exc:
            raise Conflict(str(exc)) from exc
        except DjangoValidationError as exc:
            raise api_error(exc) from exc
        key.refresh_from_db()
        key.plaintext = plaintext
        return Response(IssuedInferenceKeySerializer(key, context=self.get_serializer_context()).data)


class TenantLimitsViewSet(ScopedModelViewSet):
    queryset = TenantLimits.objects.select_related("tenant")
    serializer_class = TenantLimitsSerializer
    filterset_fields = ["tenant__slug"]
    ordering_fields = ["created"]
