"""API of tenant queues and priority classes (`/api/v1/tenant-queues/`, `/api/v1/priority-classes/`).

The records are tenancy's; their API lives here because a queue names a cluster, and tenancy imports no
clusters module. Staff write both; members read their tenants' queues and the classes their tenants may use.
"""

from __future__ import annotations

from rest_framework import serializers

from apps.clusters.models import Cluster, unavailable_cluster_message
from apps.core.api.serializers import ValidatedModelSerializer
from apps.core.api.views import ScopedModelViewSet
from apps.tenancy.filtersets import TenantQueueFilterSet
from apps.tenancy.models import PriorityClass, Tenant, TenantQueue


class PriorityClassSerializer(ValidatedModelSerializer):
    """A class of the catalog: a Kueue WorkloadPriorityClass and a pod PriorityClass on the clusters."""

    class Meta:
        model = PriorityClass
        fields = ["id", "name", "value", "preemption_policy", "description", "created", "updated"]
        read_only_fields = ["created", "updated"]


class TenantQueueSerializer(ValidatedModelSerializer):
    """A tenant's queue: nominal GPUs per GPU type ("*": any type), limits and weight, in a cohort."""

    tenant = serializers.SlugRelatedField(slug_field="slug", queryset=Tenant.objects.all())
    # A cluster the caller's tenants may not use is answered like a missing one (names stay private).
    cluster = serializers.SlugRelatedField(
        slug_field="name", queryset=Cluster.objects.all(), required=False, allow_null=True,
        error_messages={"does_not_exist": unavailable_cluster_message("{value}")},
        help_text="null: the tenant's queue on every cluster without a queue of its own.")
    weight = serializers.DecimalField(max_digits=6, decimal_places=2, coerce_to_string=False, required=False,
                                      help_text="Fair sharing weight (default 1).")
    unscoped_related_fields = ("cluster",)
    create_only_fields = ("tenant", "cluster")

    class Meta:
        model = TenantQueue
        fields = ["id", "tenant", "cluster", "cohort", "nominal", "borrowing_limit", "lending_limit", "weight",
                  "created", "updated"]
        read_only_fields = ["created", "updated"]

    def get_fields(self):
        fields = super().get_fields()
        user = getattr(self.context.get("request"), "user", None)
        if user is not None:
            fields["cluster"].queryset = Cluster.objects.usable_by_user(user)
        return fields


class PriorityClassViewSet(ScopedModelViewSet):
    """Priority classes: staff change them; others read the classes their tenants may use."""

    queryset = PriorityClass.objects.all()
    serializer_class = PriorityClassSerializer
    search_fields = ["name", "description"]
    ordering_fields = ["value", "name"]
    filterset_fields = ["name", "preemption_policy"]

    def get_queryset(self):
        return self.queryset.usable_by_user(self.request.user)


class TenantQueueViewSet(ScopedModelViewSet):
    """Tenant queues: staff change them; members read their tenants' queues."""

    queryset = TenantQueue.objects.select_related("tenant", "cluster")
    serializer_class = TenantQueueSerializer
    filterset_class = TenantQueueFilterSet
    search_fields = ["tenant__slug", "cohort"]
    ordering_fields = ["created", "cohort"]
