"""Serializers of the gateway's keys and limits (a key's plaintext appears once: on create and rotate)."""

from __future__ import annotations

from django.utils import timezone
from rest_framework import serializers

from apps.core.api.serializers import ValidatedModelSerializer
from apps.gateway.models import InferenceKey, TenantLimits
from apps.serving.models import InferenceService
from apps.tenancy.models import Tenant

LIMIT_FIELDS = ["rpm", "tpm", "concurrency", "monthly_token_budget"]


def future(value):
    if value is not None and value <= timezone.now():
        raise serializers.ValidationError("The expiry must be in the future.")
    return value


class InferenceKeySerializer(ValidatedModelSerializer):
    tenant = serializers.SlugRelatedField(slug_field="slug", queryset=Tenant.objects.all())
    services = serializers.SlugRelatedField(
        slug_field="name", queryset=InferenceService.objects.all(), many=True, required=False,
        help_text="Service names of the key's tenant; empty means all of them.",
    )
    revoked = serializers.SerializerMethodField()
    create_only_fields = ("tenant",)

    class Meta:
        model = InferenceKey
        fields = ["id", "tenant", "name", "prefix", "services", *LIMIT_FIELDS, "priority", "expires_at", "revoked",
                  "revoked_at", "last_used_at", "created"]
        read_only_fields = ["prefix", "revoked_at", "last_used_at", "created"]
        extra_kwargs = {"expires_at": {
            "required": False,
            "help_text": "When the key stops working: in the future and at most TOKEN_MAX_DAYS after its secret "
                         "was issued (the default).",
        }}

    def get_revoked(self, instance) -> bool:
        return instance.is_revoked

    def get_fields(self):
        fields = super().get_fields()
        # Service names are unique per tenant only, so look them up in the key's tenant (another
        # tenant's service of the same name is never matched).
        tenant_slug = self.initial_data.get("tenant") if hasattr(self, "initial_data") else None
        tenant_id = self.instance.tenant_id if isinstance(self.instance, InferenceKey) else None
        relation = fields["services"].child_relation
        if tenant_id is not None:
            relation.queryset = relation.queryset.filter(tenant_id=tenant_id)
        elif isinstance(tenant_slug, str):
            relation.queryset = relation.queryset.filter(tenant__slug=tenant_slug)
        else:
            relation.queryset = relation.queryset.none()
        return fields

    def validate_expires_at(self, value):
        return future(value)

    def prepare_instance(self, instance) -> None:
        if not instance.issued_at:
            instance.issued_at = timezone.now()
        if instance.expires_at is None:
            instance.expires_at = instance.latest_expiry

    def create(self, validated_data):
        services = validated_data.pop("services", [])
        key = InferenceKey(**validated_data, created_by=self.context["request"].user)
        key.plaintext = key.new_secret(expires_at=validated_data.get("expires_at"))
        key.save()
        key.services.set(services)
        return key


class IssuedInferenceKeySerializer(InferenceKeySerializer):
    """The create and rotate response: the only time the plaintext key is returned."""

    key = serializers.CharField(source="plaintext", read_only=True, help_text="Shown once; store it now.")

    class Meta(InferenceKeySerializer.Meta):
        fields = [*InferenceKeySerializer.Meta.fields, "key"]


class KeyRotationSerializer(serializers.Serializer):
    expires_at = serializers.DateTimeField(
        required=False, help_text="The new expiry; by default TOKEN_MAX_DAYS from now, and never later."
    )

    def validate_expires_at(self, value):
        return future(value)


class TenantLimitsSerializer(ValidatedModelSerializer):
    tenant = serializers.SlugRelatedField(slug_field="slug", queryset=Tenant.objects.all())
    create_only_fields = ("tenant",)

    class Meta:
        model = TenantLimits
        fields = ["id", "tenant", *LIMIT_FIELDS, "max_priority", "fair_share_weight", "created", "updated"]
        read_only_fields = ["created", "updated"]
