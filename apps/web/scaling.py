"""The Scaling panel of a service page and the fleet's latest decisions: htmx partials, scoped like every
page (another tenant's service is a 404). The service page includes the panel; htmx refreshes it."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, render

from apps.serving.models import InferenceService
from apps.web.scaling_panel import latest_decisions, panel_context


@login_required
def scaling_panel(request, pk: int):
    service = get_object_or_404(InferenceService.objects.restrict(request.user), pk=pk)
    return render(request, "web/partials/scaling_panel.html", panel_context(service))


@login_required
def fleet_decisions(request):
    return render(request, "web/partials/fleet_decisions.html",
                  {"decisions": latest_decisions(request.user)})
