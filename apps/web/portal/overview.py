"""The tenant's overview and audit pages: services with live figures, GPU quota per GPU type, GPU-hours,
the latest scaling decisions (each linking to its service's Scaling panel) and the latest audit entries."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.core.paginator import Paginator
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.dateparse import parse_date

from apps.core.models import AuditEntry
from apps.gateway.drift import warnings
from apps.serving.models import InferenceService
from apps.serving.queue_usage import tenant_rows
from apps.telemetry.usage import gpu_hours, gpus_by_type
from apps.tenancy.models import Tenant
from apps.web.htmx import render_page
from apps.web.portal.scope import READ, tenant_page
from apps.web.scaling_panel import tenant_decisions
from apps.web.services import with_latest


@tenant_page(READ)
def overview(request, tenant):
    """What the tenant runs and uses: polled by htmx every 5 s for the live parts."""
    services = with_latest(list(InferenceService.objects.filter(tenant=tenant).with_related().order_by("name")))
    gpus = gpus_by_type(tenant.pk)
    now = timezone.now()
    context = {
        "tenant": tenant, "services": services, "gpus": gpus,
        "gpus_at_max": sum(g["at_max"] for g in gpus), "gpus_ready": sum(g["ready"] for g in gpus),
        "gpu_quota": sum(queue.total_ceiling() for queue in tenant.queues.all()),
        "queue_rows": tenant_rows(tenant),
        "gpu_hours_day": gpu_hours(tenant.pk, now - timedelta(hours=24)),
        "gpu_hours_week": gpu_hours(tenant.pk, now - timedelta(days=7)),
        "decisions": tenant_decisions(tenant),
        "autoscaled": any(s.autoscaled_by_builtin for s in services),
        "audit": AuditEntry.objects.filter(tenant=tenant).select_related("content_type")[:8],
        "drift_warnings": drift_warnings(services),
    }
    return render_page(request, "portal/overview.html", "portal/partials/overview.html", context)


def drift_warnings(services) -> list[dict]:
    """The services whose gateway metering drifted over 1 % from their engines' counters (last 24 h)."""
    by_id = {s.pk: s for s in services}
    return [{"service": by_id[sid], "hours": hours, "latest": hours[-1]}
            for sid, hours in warnings(list(by_id)).items()]


def switch(request):
    """The tenant switcher's target: the chosen tenant's overview (404 for a tenant the user is not in)."""
    slug = request.GET.get("tenant", "")
    if not request.user.is_authenticated:
        return redirect(reverse("web:login"))
    if not Tenant.objects.restrict(request.user).filter(slug=slug).exists():
        from django.http import Http404

        raise Http404
    return redirect(reverse("web:overview", args=[slug]))


def _day(text: str, end: bool = False) -> datetime | None:
    day = parse_date(text or "")
    if day is None:
        return None
    moment = datetime.combine(day, datetime.max.time() if end else datetime.min.time())
    return timezone.make_aware(moment)


@tenant_page(READ)
def audit(request, tenant):
    """The tenant's audit entries, filtered by object, actor and date, with each change before → after."""
    entries = AuditEntry.objects.filter(tenant=tenant).select_related("content_type")
    filters = {k: request.GET.get(k, "").strip() for k in ("kind", "object", "actor", "since", "until")}
    kinds = sorted(set(entries.values_list("content_type__model", flat=True)))
    if filters["kind"]:
        entries = entries.filter(content_type__model=filters["kind"])
    if filters["object"]:
        entries = entries.filter(object_repr__icontains=filters["object"])
    if filters["actor"]:
        entries = entries.filter(actor_repr__icontains=filters["actor"])
    if since := _day(filters["since"]):
        entries = entries.filter(time__gte=since)
    if until := _day(filters["until"], end=True):
        entries = entries.filter(time__lte=until)
    page = Paginator(entries, 25).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    return render(request, "portal/audit.html", {"tenant": tenant, "page": page, "filters": filters, "kinds": kinds,
                                                  "query": query.urlencode(), "filtered": any(filters.values())})
