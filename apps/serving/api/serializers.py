"""Serializers of services: the whole spec (pools and adapters nested) is validated and saved at once."""

from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import serializers

from apps.catalog.models import Adapter, Model, Runtime
from apps.clusters.models import Cluster, unavailable_cluster_message
from apps.core.api.exceptions import api_error
from apps.core.api.serializers import AsciiPrimaryKeyRelatedField, PrimaryKeyListField, ValidatedModelSerializer
from apps.core.choices import AuditVia
from apps.serving.actions import save_service
from apps.serving.admission import admission_summary
from apps.serving.capacity import service_warnings
from apps.serving.choices import PoolRole
from apps.serving.disclosure import conditions_for
from apps.serving.models import EDITABLE_FIELDS, POOL_SPEC_FIELDS, STATUS_FIELDS, InferenceService, Pool
from apps.serving.rendering.spec import PoolSpec
from apps.serving.validation import MAX_ADAPTERS
from apps.tenancy.models import PriorityClass, Tenant


class PoolSerializer(serializers.ModelSerializer):
    class Meta:
        model = Pool
        fields = ["role", *POOL_SPEC_FIELDS, "ready_replicas"]
        read_only_fields = ["ready_replicas"]


class InferenceServiceSerializer(ValidatedModelSerializer):
    """A service with its pools. Send `version` (or an If-Match header) to guard against lost updates."""

    tenant = serializers.SlugRelatedField(slug_field="slug", queryset=Tenant.objects.all())
    # An unknown cluster gets the words of one the tenant may not use (model clean()), so names stay private.
    cluster = serializers.SlugRelatedField(
        slug_field="name", queryset=Cluster.objects.all(),
        error_messages={"does_not_exist": unavailable_cluster_message("{value}")},
    )
    model = AsciiPrimaryKeyRelatedField(queryset=Model.objects.all())
    runtime = AsciiPrimaryKeyRelatedField(queryset=Runtime.objects.all())
    adapters = PrimaryKeyListField(queryset=Adapter.objects.all(), max_length=MAX_ADAPTERS, required=False)
    pools = PoolSerializer(many=True)
    priority_class = serializers.SlugRelatedField(
        slug_field="name", queryset=PriorityClass.objects.all(), required=False, allow_null=True,
        help_text="The class the service runs at (at most the tenant's highest); null: the tenant's default. "
                  "Read back as the class it runs at.")
    admission = serializers.SerializerMethodField(
        help_text="Where the replicas stand with the tenant's queue: state admitted | waiting | preempted, and "
                  "the reason in words.")
    version = serializers.IntegerField(
        required=False, min_value=1, help_text="The version you read; a stale one gets 409."
    )
    warnings = serializers.SerializerMethodField(
        help_text="Capacity warnings: low KV-cache headroom, or a spec admitted earlier that no longer fits."
    )
    unscoped_related_fields = ("cluster", "priority_class")

    def get_fields(self):
        fields = super().get_fields()
        user = getattr(self.context.get("request"), "user", None)
        if user is not None:
            # Clusters no tenant of the user may use are looked up as missing ones: same status, same words.
            fields["cluster"].queryset = Cluster.objects.usable_by_user(user)
        return fields
    create_only_fields = ("tenant", "name")

    class Meta:
        model = InferenceService
        fields = ["id", *EDITABLE_FIELDS, "pools", "version", *STATUS_FIELDS, "warnings"]
        read_only_fields = [name for name in STATUS_FIELDS if name != "admission"]

    def to_representation(self, instance):
        data = super().to_representation(instance)
        request = self.context.get("request")
        if request is not None:
            data["conditions"] = conditions_for(request.user, data.get("conditions"))
        running = instance.tenant.priority_class_for(instance.priority_class) if instance.tenant_id else None
        data["priority_class"] = running.name if running else None
        return data

    def get_admission(self, instance) -> dict:
        return admission_summary(instance.admission)

    def get_warnings(self, instance) -> list[str]:
        return service_warnings(instance) if instance.pk else []

    def build_instance(self, attrs):
        spec = {k: v for k, v in attrs.items() if k not in ("pools", "adapters", "version")}
        return super().build_instance(spec)

    def full_clean(self, instance) -> None:
        """Deferred: `save_service` validates the whole spec under the tenant lock."""

    def _save(self, instance: InferenceService, validated_data: dict) -> InferenceService:
        pools = validated_data.get("pools")
        if pools is None:
            pool_specs = [
                PoolSpec(role=p.role, **{f: getattr(p, f) for f in POOL_SPEC_FIELDS}) for p in instance.pools.all()
            ]
        else:
            pool_specs = [PoolSpec(**p) for p in pools]
        adapters = validated_data.get("adapters")
        if adapters is None:
            adapters = list(instance.adapters.all()) if instance.pk else []
        for name, value in validated_data.items():
            if name not in ("pools", "adapters", "version"):
                setattr(instance, name, value)
        expected = self.context.get("expected_version", validated_data.get("version"))
        try:
            return save_service(
                instance,
                pools=pool_specs,
                adapters=adapters,
                actor=self.context["request"].user,
                via=AuditVia.API,
                expected_version=expected,
            )
        except DjangoValidationError as exc:
            raise api_error(exc) from exc

    def create(self, validated_data):
        return self._save(InferenceService(), validated_data)

    def update(self, instance, validated_data):
        return self._save(instance, validated_data)


class ScaleSerializer(serializers.Serializer):
    pool = serializers.ChoiceField(choices=PoolRole.choices, default=PoolRole.ENGINE)
    replicas = serializers.IntegerField(min_value=0)
    version = serializers.IntegerField(required=False, min_value=1, help_text="The version you read.")
