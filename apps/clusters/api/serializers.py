"""Serializers of clusters. Credentials are write-only: responses say only whether each is set."""

from __future__ import annotations

from rest_framework import serializers

from apps.clusters.models import Cluster, GpuNode, NodeModelVolume
from apps.core.api.serializers import ValidatedModelSerializer
from apps.tenancy.models import Tenant

CREDENTIAL_FIELDS = ("bearer_token", "kubeconfig", "ca_bundle")
NODE_MODEL_VOLUME_REFUSAL = ('"{input}" is not a way to reach the node\'s model copy: choose '
                             + ", ".join(NodeModelVolume.values) + ".")


class ClusterSerializer(ValidatedModelSerializer):
    bearer_token = serializers.CharField(
        write_only=True, required=False, allow_blank=True, style={"input_type": "password"}
    )
    kubeconfig = serializers.CharField(write_only=True, required=False, allow_blank=True)
    ca_bundle = serializers.CharField(write_only=True, required=False, allow_blank=True)
    has_bearer_token = serializers.SerializerMethodField()
    has_kubeconfig = serializers.SerializerMethodField()
    has_ca_bundle = serializers.SerializerMethodField()
    create_only_fields = ("name",)
    tenants = serializers.SlugRelatedField(
        slug_field="slug", many=True, required=False, queryset=Tenant.objects.all(),
        help_text="Tenants that may deploy here (besides every tenant, when open_to_all_tenants).",
    )

    class Meta:
        model = Cluster
        fields = [
            "id",
            "name",
            "description",
            "api_url",
            *CREDENTIAL_FIELDS,
            "has_bearer_token",
            "has_kubeconfig",
            "has_ca_bundle",
            "in_cluster",
            "insecure_simulator",
            "has_gateway",
            "kueue_installed",
            "prometheus_url",
            "api_server_cidrs",
            "model_egress_cidrs",
            "node_model_volume",
            "open_to_all_tenants",
            "tenants",
            "last_seen_at",
            "created",
            "updated",
        ]
        read_only_fields = ["last_seen_at", "created", "updated"]
        extra_kwargs = {"node_model_volume": {"error_messages": {"invalid_choice": NODE_MODEL_VOLUME_REFUSAL}}}

    def get_has_bearer_token(self, obj: Cluster) -> bool:
        return bool(obj.bearer_token)

    def get_has_kubeconfig(self, obj: Cluster) -> bool:
        return bool(obj.kubeconfig)

    def get_has_ca_bundle(self, obj: Cluster) -> bool:
        return bool(obj.ca_bundle)


class GpuNodeSerializer(serializers.ModelSerializer):
    cluster = serializers.SlugRelatedField(slug_field="name", read_only=True)

    class Meta:
        model = GpuNode
        fields = [
            "id",
            "cluster",
            "name",
            "gpu_product",
            "gpu_count",
            "allocatable",
            "allocated",
            "ready",
            "observed_at",
        ]
