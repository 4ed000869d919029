"""The KV cache panel's "what would more CPU memory buy?" part: the service's reuse curve read at its CPU tier's
size and at ½×, 2× and 4×, and its measured TTFT by the tier each request's prefix was in
(apps/gateway/kv_reuse.py). Loaded by htmx after the page, since replaying the sample takes a moment."""

from __future__ import annotations

from django.shortcuts import render
from django.views.decorators.http import require_GET

from apps.gateway.kv_reuse import MIN_REQUESTS, SAMPLE_WINDOW, cached_service_reuse
from apps.web.portal.scope import READ, tenant_page
from apps.web.portal.services import get_service

TIER_NAMES = {"gpu": "GPU tier", "cpu": "CPU tier", "miss": "Miss (computed)"}


@tenant_page(READ)
@require_GET
def kv_reuse_panel(request, tenant, name: str):
    service = get_service(tenant, name)
    reuse = cached_service_reuse(service)
    tiers = [{"name": TIER_NAMES[k], **v} for k, v in reuse["ttft_by_tier"].items()] if reuse else []
    return render(request, "portal/partials/kv_reuse.html", {
        "reuse": reuse, "tiers": tiers, "min_requests": MIN_REQUESTS,
        "window_minutes": int(SAMPLE_WINDOW.total_seconds() // 60)})
