"""Serializers of the catalog."""

from __future__ import annotations

from rest_framework import serializers

from apps.catalog.models import Adapter, Model, Runtime
from apps.core.api.serializers import ValidatedModelSerializer
from apps.tenancy.models import Tenant


class CatalogEntrySerializer(ValidatedModelSerializer):
    tenant = serializers.SlugRelatedField(
        slug_field="slug",
        queryset=Tenant.objects.all(),
        required=False,
        allow_null=True,
        help_text="Tenant slug for a private entry; null for a platform-wide one (staff only).",
    )
    create_only_fields = ("tenant",)

    common_fields = ["id", "tenant", "name"]


class ModelSerializer(CatalogEntrySerializer):
    class Meta:
        model = Model
        fields = [
            *CatalogEntrySerializer.common_fields,
            "display_name",
            "source_uri",
            "license",
            "parameters_billions",
            "active_parameters_billions",
            "layers",
            "hidden_size",
            "attention_heads",
            "kv_heads",
            "head_dim",
            "max_context",
            "dtype",
            "kv_layout",
            "created",
            "updated",
        ]
        read_only_fields = ["created", "updated"]


class AdapterSerializer(CatalogEntrySerializer):
    class Meta:
        model = Adapter
        fields = [*CatalogEntrySerializer.common_fields, "base_model", "source_uri", "rank", "created", "updated"]
        read_only_fields = ["created", "updated"]


class RuntimeSerializer(CatalogEntrySerializer):
    default_args = serializers.ListField(child=serializers.CharField(), required=False)

    class Meta:
        model = Runtime
        fields = [
            *CatalogEntrySerializer.common_fields,
            "engine",
            "image",
            "tag",
            "default_args",
            "supported_modes",
            "created",
            "updated",
        ]
        read_only_fields = ["created", "updated"]
