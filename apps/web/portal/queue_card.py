"""The service page's queue card (apps/gateway/queue_card.py), loaded and refreshed by htmx."""

from __future__ import annotations

from django.shortcuts import render
from django.views.decorators.http import require_GET

from apps.gateway.queue_card import WINDOWS, BadWindow, queue_card, window_of
from apps.web.portal.scope import READ, tenant_page
from apps.web.portal.services import get_service

BODY = "portal/partials/_queue_card_body.html"


@tenant_page(READ)
@require_GET
def queue_card_panel(request, tenant, name: str):
    service = get_service(tenant, name)
    try:
        window = window_of(request.GET.get("window"))
    except BadWindow as exc:
        return render(request, BODY, {"tenant": tenant, "service": service, "error": str(exc),
                                      "card": {"window": None, "windows": list(WINDOWS)}}, status=400)
    return render(request, BODY, {"tenant": tenant, "service": service, "card": queue_card(service, window)})
