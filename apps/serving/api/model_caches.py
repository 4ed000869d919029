"""API of the platform's model caches (`/api/v1/model-caches/`): staff keep a platform-wide model cached on a
cluster, once for every tenant whose catalog includes it, and on nodes' local disks within a per-node budget."""

from __future__ import annotations

from rest_framework import serializers

from apps.catalog.models import Model
from apps.clusters.models import Cluster
from apps.core.api.permissions import IsPlatformStaff
from apps.core.api.serializers import ValidatedModelSerializer
from apps.core.api.views import ScopedModelViewSet
from apps.serving.models import ModelCache


class ModelCacheSerializer(ValidatedModelSerializer):
    """A platform-wide model kept on a cluster (a private model is refused on `model`)."""

    cluster = serializers.SlugRelatedField(slug_field="name", queryset=Cluster.objects.all())
    model = serializers.PrimaryKeyRelatedField(queryset=Model.objects.all())
    unscoped_related_fields = ("cluster", "model")
    create_only_fields = ("cluster", "model")

    class Meta:
        model = ModelCache
        fields = ["id", "cluster", "model", "node_budget_gb", "created", "updated"]
        read_only_fields = ["created", "updated"]


class ModelCacheViewSet(ScopedModelViewSet):
    """Model caches: platform staff only."""

    queryset = ModelCache.objects.select_related("cluster", "model").order_by("cluster_id", "model_id")
    serializer_class = ModelCacheSerializer
    permission_classes = [*ScopedModelViewSet.permission_classes, IsPlatformStaff]
    ordering_fields = ["created"]
    filterset_fields = ["cluster__name"]
