"""The service page's Rollout panel: the running rollout, its decisions as a timeline, and pause / resume /
promote now / abort for writers, through `apps.rollouts.actions.act` (the API's path, audited)."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect
from django.views.decorators.http import require_GET, require_POST

from apps.core.choices import AuditVia
from apps.rollouts.actions import ACTIONS, InvalidRolloutState, act
from apps.web.htmx import is_fragment, render_page
from apps.web.portal.scope import READ, WRITE, tenant_page
from apps.web.portal.services import get_service, service_url
from apps.web.rollout_panel import rollout_context

PANEL = "portal/partials/rollout.html"
LIVE = "portal/partials/rollout_live.html"  # the state and the timeline, which the panel refreshes
DONE = {"pause": "Paused", "resume": "Resumed", "promote": "Promoted", "abort": "Aborted"}


@tenant_page(READ)
@require_GET
def rollout_panel(request, tenant, name: str):
    service = get_service(tenant, name)
    context = rollout_context(service) | {"tenant": tenant, "service": service}
    part = LIVE if request.GET.get("part") == "live" else PANEL
    return render_page(request, "portal/rollout.html", part, context)


@tenant_page(WRITE)
@require_POST
def rollout_action(request, tenant, name: str, action: str):
    """Apply the action; a refusal (the rollout's state does not allow it) is shown in the panel."""
    if action not in ACTIONS:
        raise Http404(f"No rollout action {action!r}.")
    service = get_service(tenant, name)
    error = ""
    try:
        rollout = act(service, action, actor=request.user, via=AuditVia.PORTAL)
    except InvalidRolloutState as exc:
        error = str(exc)
    else:
        messages.success(request, f"{DONE[action]}: the rollout of revision {rollout.to_revision} is {rollout.phase}.")
    if not is_fragment(request):
        if error:
            messages.error(request, error)
        return redirect(service_url(service) + "?tab=changes#rollout")
    context = rollout_context(service) | {"tenant": tenant, "service": service, "rollout_error": error}
    return render_page(request, "portal/rollout.html", PANEL, context, status=422 if error else 200)
