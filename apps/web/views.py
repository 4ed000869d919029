"""Operator dashboard and tenant pages: server-rendered, with htmx partials for the live parts."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.db.models import Count, Sum
from django.shortcuts import render

from apps.clusters.models import Cluster, GpuNode
from apps.serving.choices import Phase
from apps.serving.models import InferenceService


def fleet_summary(user) -> dict:
    """Clusters with GPUs by product (capacity and allocated), and the user's services by phase."""
    services = InferenceService.objects.for_user(user)
    by_phase = dict(services.values_list("phase").annotate(n=Count("id")).values_list("phase", "n"))
    gpus = (
        GpuNode.objects.filter(cluster__in=Cluster.objects.for_user(user))
        .values("cluster__name", "gpu_product")
        .annotate(nodes=Count("id"), capacity=Sum("allocatable"), allocated=Sum("allocated"))
        .order_by("cluster__name", "gpu_product")
    )
    return {
        "phases": [(phase.value, by_phase.get(phase.value, 0)) for phase in Phase],
        "service_total": sum(by_phase.values()),
        "gpus": list(gpus),
        "clusters": list(Cluster.objects.for_user(user).annotate(nodes=Count("gpu_nodes"))),
    }


@login_required
def home(request):
    """The fleet overview: what runs where, and in what state."""
    context = fleet_summary(request.user)
    context["services"] = InferenceService.objects.for_user(request.user).with_related()[:200]
    template = "web/partials/fleet.html" if request.htmx else "web/home.html"
    return render(request, template, context)
