"""Operator dashboard and tenant pages: server-rendered, with htmx partials for the live parts."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.db.models import Count, Sum
from django.shortcuts import render

from apps.clusters.models import Cluster, GpuNode
from apps.gateway.usage import at_the_door
from apps.rollouts.choices import ACTIVE_PHASES
from apps.rollouts.models import Rollout
from apps.serving.choices import Phase
from apps.serving.models import InferenceService
from apps.serving.queue_usage import cohorts
from apps.tenancy.models import Tenant
from apps.web.attainment import attainments, short_words
from apps.web.htmx import is_fragment
from apps.web.services import with_latest
from apps.whatif.limits import capacity_limits

TOP = 5


def fleet_summary(user) -> dict:
    """Clusters with GPUs by product (capacity and allocated), and the user's services by phase."""
    services = InferenceService.objects.restrict(user)
    by_phase = dict(services.values_list("phase").annotate(n=Count("id")).values_list("phase", "n"))
    gpus = (
        GpuNode.objects.restrict(user)
        .values("cluster__name", "gpu_product")
        .annotate(nodes=Count("id"), capacity=Sum("allocatable"), allocated=Sum("allocated"))
        .order_by("cluster__name", "gpu_product")
    )
    return {
        "phases": [(phase.value, by_phase.get(phase.value, 0)) for phase in Phase],
        "service_total": sum(by_phase.values()),
        "gpus": list(gpus),
        "clusters": list(Cluster.objects.restrict(user).annotate(nodes=Count("gpu_nodes"))),
        "cohorts": cohorts(Cluster.objects.usable_by_user(user).order_by("name"), None if user.is_staff
                           else set(Tenant.objects.restrict(user).values_list("slug", flat=True))),
    }


def fleet_figures(services: list) -> dict:
    """The services that need a look (newest rows): worst TTFT p95, highest KV-cache usage, and the
    longest queues (waiting, then running), and those whose prompts hit their KV cache's CPU tier, most first.
    Idle services (nothing cached, nothing queued) are left out."""
    live = [s for s in services if s.latest is not None]

    def ranked(key, active):
        return sorted((s for s in live if active(s.latest)), key=lambda s: key(s.latest), reverse=True)[:TOP]

    return {
        "worst_ttft": ranked(lambda p: p.ttft_p95, lambda p: p.ttft_p95 is not None),
        "highest_kv": ranked(lambda p: p.kv_usage, lambda p: bool(p.kv_usage)),
        "busiest_queues": ranked(lambda p: (p.waiting or 0, p.running or 0), lambda p: bool(p.waiting or p.running)),
        "cpu_tier_hits": ranked(lambda p: p.cpu_hit_rate, lambda p: bool(p.cpu_hit_rate)),
    }


@login_required
def home(request):
    """The fleet overview: what runs where, in what state, and which services are slow, full or queueing."""
    context = fleet_summary(request.user)
    services = with_latest(list(InferenceService.objects.restrict(request.user).with_related()[:200]))
    slo = attainments(services)
    limits = capacity_limits(services, slo)
    for service in services:
        service.slo = short_words(slo.get(service.pk))
        service.limit = limits.get(service.pk)
    context["services"] = services
    context |= fleet_figures(services)
    context["door"] = at_the_door(request.user)
    context["rollouts"] = list(Rollout.objects.restrict(request.user).filter(phase__in=ACTIVE_PHASES)
                               .select_related("service__tenant").order_by("step_started_at")[:TOP * 4])
    template = "web/partials/fleet.html" if is_fragment(request) else "web/home.html"
    return render(request, template, context)
