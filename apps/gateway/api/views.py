"""API views of the gateway: inference keys (create, list, revoke, rotate) and tenant limits."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.decorators import action
from rest_framework.response import Response

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
from apps.tenancy.api.secrets import SecretShownOnceMixin, shown_once_schema


@shown_once_schema(IssuedInferenceKeySerializer, KeyRotationSerializer,
                   "A new secret (shown once) and a new expiry; the old secret stops working.")
class InferenceKeyViewSet(SecretShownOnceMixin, ScopedModelViewSet):
    queryset = InferenceKey.objects.select_related("tenant").prefetch_related("services")
    serializer_class = InferenceKeySerializer
    issued_serializer_class = IssuedInferenceKeySerializer
    rotation_serializer_class = KeyRotationSerializer
    rotate_secret = staticmethod(rotate_key)
    filterset_fields = ["tenant__slug"]
    search_fields = ["name", "prefix"]
    ordering_fields = ["created", "expires_at", "last_used_at", "name"]
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    @extend_schema(request=None, responses={200: InferenceKeySerializer})
    @action(detail=True, methods=["post"])
    def revoke(self, request, pk=None):
        """Revoke the key now and for good."""
        key = revoke_key(self.get_object(), actor=request.user, via=AuditVia.API)
        return Response(InferenceKeySerializer(key, context=self.get_serializer_context()).data)


class TenantLimitsViewSet(ScopedModelViewSet):
    queryset = TenantLimits.objects.select_related("tenant")
    serializer_class = TenantLimitsSerializer
    filterset_fields = ["tenant__slug"]
    ordering_fields = ["created"]
