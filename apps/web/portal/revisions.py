"""The service page's Revisions panel: every revision with what changed in words, the diff between any two
and a rollback button. Rolling back calls `apps.serving.actions.rollback`, the API's and the admin's path."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.shortcuts import redirect
from django.views.decorators.http import require_GET, require_POST

from apps.core.choices import AuditVia
from apps.serving.actions import ServiceDeleting, rollback
from apps.serving.models import Revision
from apps.serving.revisions import RollbackRefused
from apps.web.htmx import is_fragment, render_page
from apps.web.portal.scope import READ, WRITE, tenant_page
from apps.web.portal.services import get_service, service_url
from apps.web.revisions_panel import revisions_context

PANEL = "portal/partials/revisions.html"


@tenant_page(READ)
@require_GET
def revisions_panel(request, tenant, name: str):
    """The panel (htmx fragment), or the service page's panel alone; `?from=&to=` adds their diff."""
    service = get_service(tenant, name)
    context = revisions_context(service, request.GET) | {"tenant": tenant}
    status = 422 if context["diff_error"] else 200
    return render_page(request, "portal/revisions.html", PANEL, context, status=status)


@tenant_page(WRITE)
@require_POST
def revision_rollback(request, tenant, name: str, number: int):
    """Make revision `number` current again; refusals are shown in the panel beside the button."""
    service = get_service(tenant, name)
    error = ""
    try:
        new = rollback(service, number, actor=request.user, via=AuditVia.PORTAL)
    except Revision.DoesNotExist:
        error = f"This service has no revision {number}."
    except (RollbackRefused, ServiceDeleting) as exc:
        error = str(exc)
    except ValidationError as exc:
        error = f"Revision {number} is no longer valid: " + "; ".join(exc.messages)
    else:
        messages.success(request, f"Rolled back: {service.name} runs revision {number}'s spec again, as revision "
                                  f"{new.number}; its pods roll now.")
    if not is_fragment(request):
        if error:
            messages.error(request, error)
        return redirect(service_url(service) + "?tab=changes#revisions")
    context = revisions_context(service) | {"tenant": tenant, "rollback_error": error, "error_number": number}
    return render_page(request, "portal/revisions.html", PANEL, context, status=422 if error else 200)
