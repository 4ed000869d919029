"""Service pages shared by the fleet view and the tenant portal: the cross-tenant list, the status
context of one service (pods, events, history) and its chart data. The service page itself lives in
the portal (`apps.web.portal.services`); `/services/<id>/` redirects there.

Every lookup goes through `InferenceService.objects.restrict`, so another tenant's service is a 404.
"""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.decorators import login_required
from django.core.serializers.json import DjangoJSONEncoder
from django.http import JsonResponse
from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse
from django.utils import timezone

from apps.clusters.models import GpuNode
from apps.serving.admission import admission_summary
from apps.serving.capacity import service_warnings
from apps.serving.disclosure import conditions_for, run_message_for
from apps.serving.models import InferenceService, ReconcileRun, ServiceObservation
from apps.telemetry.models import PodStat
from apps.telemetry.series import (
    RANGES,
    BadSeriesQuery,
    latest_points,
    role_from_query,
    series_payload,
    window_from_query,
)
from apps.web.htmx import render_page
from apps.web.templatetags.figures import human_duration, ms

RECENT = timedelta(minutes=2)  # a series row older than this is no longer "now"


def visible_services(user):
    return InferenceService.objects.restrict(user)


def with_latest(services: list) -> list:
    """Attach each service's newest whole-service series row of the last RECENT minutes as `.latest`."""
    points = latest_points([s.pk for s in services], since=timezone.now() - RECENT)
    for service in services:
        service.latest = points.get(service.pk)
    return services


@login_required
def service_list(request):
    """Every service the user may see, with its phase and current figures."""
    services = with_latest(list(visible_services(request.user).with_related().order_by("tenant__slug", "name")[:500]))
    return render_page(request, "web/services.html", "web/partials/service_rows.html", {"services": services})


def pod_rows(service, observation: ServiceObservation | None) -> list[dict]:
    """Pods as the reconciler saw them (phase, node, GPUs), with the node's GPU product and the pod's
    latest scraped figures."""
    pods = list(observation.pods) if observation else []
    stats = {s.pod: s for s in PodStat.objects.filter(service=service)}
    nodes = {p.get("node") for p in pods if p.get("node")} | {s.node for s in stats.values() if s.node}
    products = dict(GpuNode.objects.filter(cluster_id=service.cluster_id, name__in=nodes)
                    .values_list("name", "gpu_product"))
    rows = []
    for pod in pods:
        stat = stats.pop(pod.get("name"), None)
        rows.append({**pod, "gpu_product": products.get(pod.get("node"), ""), "stat": stat})
    seen_at = observation.observed_at if observation else None
    for stat in stats.values():
        # Scraped after the reconciler's last look: a pod too new to be in it. Scraped before: a pod that
        # was gone when it looked (rolled, scaled in), whose last figures wait for retention; not shown.
        if seen_at is not None and stat.scraped_at <= seen_at:
            continue
        rows.append({"name": stat.pod, "role": stat.role, "phase": "Running", "ready": True, "node": stat.node,
                     "gpus": None, "gpu_product": products.get(stat.node, ""), "stat": stat})
    return rows


def own_events(service, observation: ServiceObservation | None, limit: int = 15) -> list[dict]:
    """The newest events about this service's objects, newest first. The observation may also hold events
    of other workloads in the tenant's namespace; every object of a service is named after it."""
    if observation is None:
        return []
    prefix = f"{service.name}-"
    ours = [e for e in observation.events
            if (name := str(e.get("object", "")).partition("/")[2]) == service.name or name.startswith(prefix)]
    return list(reversed(ours[-limit:]))


def status_context(service, user) -> dict:
    """What the status partial shows `user`: cluster errors are summarised for tenants (apps/serving/disclosure)."""
    observation = ServiceObservation.objects.filter(service=service).first()
    conditions = conditions_for(user, service.conditions)
    runs = list(ReconcileRun.objects.filter(service=service).order_by("-started_at")[:10])
    pools = list(service.pools.all())
    for run in runs:
        run.message = run_message_for(user, run.result, run.message)
    return {
        "service": service,
        "observation": observation,
        "conditions": conditions,
        "problems": [c for c in conditions if c.get("status") in (False, "False") and c.get("message")],
        "capacity_warnings": service_warnings(service),
        "admission": admission_summary(service.admission),
        "pools": pools,
        "desired_replicas": sum(p.replicas for p in pools),
        "observed_pools": {p["role"]: p for p in (observation.pools if observation else [])},
        "pods": pod_rows(service, observation),
        "events": own_events(service, observation),
        "drift": list(observation.drift) if observation else [],
        "runs": runs,
    }


@login_required
def service_redirect(request, pk: int):
    """The old address of a service page: its page in the tenant portal."""
    service = get_object_or_404(visible_services(request.user).select_related("tenant"), pk=pk)
    return redirect(reverse("web:service", args=[service.tenant.slug, service.name]))


@login_required
def service_series(request, pk: int):
    """The chart data of one service (or `role` pool) over `since`/`until` at `step`, as JSON."""
    return series_response(request, get_object_or_404(visible_services(request.user), pk=pk))


def series_response(request, service) -> JsonResponse:
    """One service's series for the `range` or `since`/`until`/`step`/`role` of the query, as JSON."""
    params = request.GET.copy()
    if params.get("range") in RANGES and not params.get("since"):
        params["since"] = f"{RANGES[params['range']]}s"
    try:
        window = window_from_query(params)
        role = role_from_query(params)
    except BadSeriesQuery as exc:
        return JsonResponse({"detail": str(exc)}, status=400)
    payload = series_payload(service.pk, window, role=role)
    payload["now"] = {"ttft_p95": now_figure(payload, "ttft_p95")}
    return JsonResponse(payload, encoder=DjangoJSONEncoder)


def now_figure(payload: dict, column: str) -> dict:
    """The "now" figure above the charts, read from the very series the chart draws (same window, role and
    step): the newest value of `column`. It is "now" when that point is within RECENT (or one step, for
    long ranges) of the window's end, as the lists' figures; an older one is named as the last, with its age;
    none in the window is "no data", as the chart then shows none."""
    fresh = max(RECENT.total_seconds(), payload["step"])
    for time, value in zip(reversed(payload["time"]), reversed(payload.get(column) or []), strict=False):
        if value is not None:
            ago = (payload["until"] - time).total_seconds()
            text = ms(value) if ago <= fresh else f"no data now (last {ms(value)}, {human_duration(ago)} ago)"
            return {"value": value, "time": time, "recent": ago <= fresh, "text": text}
    return {"value": None, "time": None, "recent": False, "text": "no data"}
