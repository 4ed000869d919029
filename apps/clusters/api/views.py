"""API views of clusters: platform staff only (other users get 403 on every route)."""

from rest_framework import viewsets

from apps.clusters.api.serializers import ClusterSerializer, GpuNodeSerializer
from apps.clusters.models import Cluster, GpuNode
from apps.core.api.permissions import IsPlatformStaff
from apps.core.api.views import ASCII_PK, ScopedModelViewSet


class ClusterViewSet(ScopedModelViewSet):
    queryset = Cluster.objects.all()
    serializer_class = ClusterSerializer
    permission_classes = [*ScopedModelViewSet.permission_classes, IsPlatformStaff]
    search_fields = ["name", "description", "api_url"]
    ordering_fields = ["name", "created"]
    filterset_fields = ["insecure_simulator", "has_gateway"]


class GpuNodeViewSet(viewsets.ReadOnlyModelViewSet):
    """Observed GPU nodes (written by the inventory worker)."""

    lookup_value_regex = ASCII_PK
    queryset = GpuNode.objects.select_related("cluster")
    serializer_class = GpuNodeSerializer
    permission_classes = [IsPlatformStaff]
    search_fields = ["name", "gpu_product"]
    ordering_fields = ["name", "allocatable", "allocated"]
    filterset_fields = ["cluster__name", "gpu_product"]

    def get_queryset(self):
        return self.queryset.restrict(self.request.user)
