"""Serializers of tenancy: tenants, memberships and API tokens (the token plaintext appears once)."""

from __future__ import annotations

from django.utils import timezone
from rest_framework import serializers
from rest_framework.exceptions import PermissionDenied

from apps.core.access import is_platform_staff, token_tenant_id
from apps.core.api.serializers import ValidatedModelSerializer
from apps.tenancy.models import NO_SUCH_USER, ApiToken, Membership, PriorityClass, Tenant, addable_users


# Named by the API; their choices are the whole catalog (class names are no secret), and only staff set them.
def class_field(help_text: str):
    return serializers.SlugRelatedField(slug_field="name", queryset=PriorityClass.objects.all(), required=False,
                                        allow_null=True, help_text=help_text)


class TenantSerializer(ValidatedModelSerializer):
    max_priority_class = class_field("The highest class the tenant's services may run at (staff set it); "
                                     "null: any class.")
    default_priority_class = class_field("The class of services that name none (staff set it); null: the "
                                         "platform default.")
    hf_token = serializers.CharField(
        write_only=True, required=False, allow_blank=True, style={"input_type": "password"},
        help_text="A Hugging Face access token for private or gated models and adapters (write-only; empty clears "
        "it). Engines get it as HF_TOKEN.")
    has_hf_token = serializers.SerializerMethodField()
    create_only_fields = ("slug",)
    unscoped_related_fields = ("max_priority_class", "default_priority_class")
    STAFF_FIELDS = ("max_priority_class_id", "default_priority_class_id")

    class Meta:
        model = Tenant
        fields = ["id", "slug", "name", "description", "max_priority_class", "default_priority_class", "hf_token",
                  "has_hf_token", "created", "updated"]
        read_only_fields = ["created", "updated"]

    def get_has_hf_token(self, obj: Tenant) -> bool:
        return bool(obj.hf_token)

    def check_write_permission(self, instance) -> None:
        super().check_write_permission(instance)
        user = self.context["request"].user
        changed = self.instance is None or any(
            getattr(instance, f) != getattr(self.instance, f) for f in self.STAFF_FIELDS)
        if changed and not is_platform_staff(user):
            raise PermissionDenied("Only platform staff set a tenant's priority classes and GPU quota.")


class MembershipSerializer(ValidatedModelSerializer):
    tenant = serializers.SlugRelatedField(slug_field="slug", queryset=Tenant.objects.all())
    user = serializers.SlugRelatedField(slug_field="username", queryset=addable_users(),
                                        error_messages={"does_not_exist": NO_SUCH_USER})
    unscoped_related_fields = ("user",)
    create_only_fields = ("tenant", "user")

    class Meta:
        model = Membership
        fields = ["id", "tenant", "user", "role", "created"]
        read_only_fields = ["created"]


class ApiTokenSerializer(ValidatedModelSerializer):
    """Tokens belong to the requesting user; `revoked: true` revokes (irreversibly)."""

    tenant = serializers.SlugRelatedField(
        slug_field="slug", queryset=Tenant.objects.all(), required=False, allow_null=True
    )
    user = serializers.CharField(source="user.username", read_only=True)
    revoked = serializers.BooleanField(required=False, help_text="Set true to revoke; revocation is final.")
    create_only_fields = ("tenant",)

    class Meta:
        model = ApiToken
        fields = [
            "id",
            "name",
            "prefix",
            "user",
            "tenant",
            "expires_at",
            "revoked",
            "revoked_at",
            "last_used_at",
            "created",
        ]
        read_only_fields = ["prefix", "revoked_at", "last_used_at", "created"]
        extra_kwargs = {"expires_at": {
            "required": False,
            "help_text": "When the token stops working: in the future and at most TOKEN_MAX_DAYS after its secret "
                         "was issued (the default on create). It cannot be removed.",
        }}

    def to_representation(self, instance):
        data = super().to_representation(instance)
        data["revoked"] = instance.is_revoked
        return data

    def validate_revoked(self, value: bool) -> bool:
        if not value and self.instance is not None and self.instance.is_revoked:
            raise serializers.ValidationError("A revoked token cannot be restored; issue a new one.")
        return value

    def validate_expires_at(self, value):
        if value is not None and value <= timezone.now():
            raise serializers.ValidationError("The expiry must be in the future.")
        return value

    def build_instance(self, attrs):
        revoked = attrs.pop("revoked", None)
        instance = super().build_instance(attrs)
        if revoked is not None:
            attrs["revoked"] = revoked
        return instance

    def check_write_permission(self, instance) -> None:
        super().check_write_permission(instance)
        bound = token_tenant_id(self.context["request"].user)
        if bound is not None and instance.tenant_id != bound:
            # A tenant-bound token may not mint a token that reaches beyond its tenant.
            raise PermissionDenied("A tenant-bound token can only manage tokens of the same tenant.")

    def prepare_instance(self, instance) -> None:
        if instance.user_id is None:
            instance.user = self.context["request"].user
        if instance.expires_at is None:
            instance.expires_at = instance.latest_expiry

    def create(self, validated_data):
        validated_data.pop("revoked", None)
        token = ApiToken(
            user=self.context["request"].user, tenant=validated_data.get("tenant"), name=validated_data.get("name", "")
        )
        token.plaintext = token.new_secret(expires_at=validated_data.get("expires_at"))
        token.save()
        return token

    def update(self, instance, validated_data):
        if validated_data.pop("revoked", False) and not instance.is_revoked:
            instance.revoked_at = timezone.now()
        return super().update(instance, validated_data)


class ApiTokenRotationSerializer(serializers.Serializer):
    expires_at = serializers.DateTimeField(
        required=False, help_text="The new expiry; by default TOKEN_MAX_DAYS from now, and never later."
    )

    def validate_expires_at(self, value):
        if value <= timezone.now():
            raise serializers.ValidationError("The expiry must be in the future.")
        return value


class IssuedApiTokenSerializer(ApiTokenSerializer):
    """The create response: the only time the plaintext token is returned."""

    token = serializers.CharField(source="plaintext", read_only=True, help_text="Shown once; store it now.")

    class Meta(ApiTokenSerializer.Meta):
        fields = [*ApiTokenSerializer.Meta.fields, "token"]
