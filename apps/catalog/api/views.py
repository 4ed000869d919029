"""API views of the catalog: every signed-in user reads the platform-wide entries and their tenants'."""

from apps.catalog.api.serializers import AdapterSerializer, ModelSerializer, RuntimeSerializer
from apps.catalog.filtersets import AdapterFilterSet, ModelFilterSet, RuntimeFilterSet
from apps.catalog.models import Adapter, Model, Runtime
from apps.core.api.views import ScopedModelViewSet


class ModelViewSet(ScopedModelViewSet):
    queryset = Model.objects.select_related("tenant")
    serializer_class = ModelSerializer
    filterset_class = ModelFilterSet
    search_fields = ["name", "display_name", "source_uri"]
    ordering_fields = ["name", "parameters_billions", "max_context", "created"]


class AdapterViewSet(ScopedModelViewSet):
    queryset = Adapter.objects.select_related("tenant", "base_model")
    serializer_class = AdapterSerializer
    filterset_class = AdapterFilterSet
    search_fields = ["name", "source_uri"]
    ordering_fields = ["name", "rank", "created"]


class RuntimeViewSet(ScopedModelViewSet):
    queryset = Runtime.objects.select_related("tenant")
    serializer_class = RuntimeSerializer
    filterset_class = RuntimeFilterSet
    search_fields = ["name", "image", "tag"]
    ordering_fields = ["name", "engine", "created"]
