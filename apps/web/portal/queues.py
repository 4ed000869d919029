"""The portal page of a tenant's GPU queues and priority classes: members read them; platform staff change a
queue's quotas, limits, cohort and weight (the rules are `TenantQueue.clean()`, the API's)."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.shortcuts import get_object_or_404
from django.views.decorators.http import require_http_methods

from apps.core.access import is_platform_staff
from apps.core.audit import record_change, snapshot
from apps.core.choices import AuditAction, AuditVia
from apps.tenancy.models import PriorityClass, TenantQueue
from apps.web.forms.queues import QueueForm
from apps.web.htmx import render_page
from apps.web.portal.scope import READ, tenant_page


def _queue_page(request, tenant, bound: QueueForm | None = None, status: int = 200):
    queues = TenantQueue.objects.filter(tenant=tenant).select_related("cluster")
    editable = is_platform_staff(request.user)
    forms = [bound if bound is not None and bound.queue.pk == q.pk else QueueForm(queue=q) for q in queues]
    context = {"tenant": tenant, "editable": editable, "forms": forms,
               "classes": PriorityClass.objects.usable_by_tenant(tenant),
               "running_default": tenant.priority_class_for(None)}
    return render_page(request, "portal/queues.html", "portal/partials/queues.html", context, status=status)


@tenant_page(READ)
@require_http_methods(["GET"])
def queues(request, tenant):
    """The tenant's queues (nominal GPUs per type, limits, cohort, weight) and the classes it may use."""
    return _queue_page(request, tenant)


@tenant_page(READ)
@require_http_methods(["POST"])
def queue_edit(request, tenant, pk: int):
    """Change one queue of the tenant (platform staff only: tenants do not set their own quota)."""
    if not is_platform_staff(request.user):
        raise PermissionDenied("Only platform staff change a tenant's GPU quota.")
    queue = get_object_or_404(TenantQueue.objects.filter(tenant=tenant), pk=pk)
    before = snapshot(queue)
    form = QueueForm(request.POST, queue=queue)
    if form.is_valid():
        changed = form.apply()
        try:
            changed.full_clean()
        except ValidationError as exc:
            form.attach_errors(exc.message_dict)
        else:
            with transaction.atomic():
                changed.save()
                record_change(actor=request.user, obj=changed, action=AuditAction.UPDATE, via=AuditVia.PORTAL,
                              before=before)
            messages.success(request, f"Queue {changed} saved.")
            return _queue_page(request, tenant)
    queue.refresh_from_db()  # the page shows what is stored beside the refused input
    return _queue_page(request, tenant, bound=form, status=422)
