"""Portal pages of the tenant's private catalog: models (fillable from a pasted config.json), adapters
and runtimes. Platform-wide entries are listed read-only; private ones are created, changed and deleted
by writers. Validation is each model's `clean()`, as in the API and the admin."""

from __future__ import annotations

from django.contrib import messages
from django.db import transaction
from django.db.models import ProtectedError
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from apps.core.audit import record_change, snapshot
from apps.core.choices import AuditAction, AuditVia
from apps.web.forms.catalog import KINDS
from apps.web.portal.scope import READ, WRITE, tenant_page

TITLES = {"models": "Models", "adapters": "Adapters", "runtimes": "Runtimes"}


def _kind(kind: str):
    if kind not in KINDS:
        raise Http404
    return KINDS[kind], KINDS[kind]._meta.model


@tenant_page(READ)
def catalog(request, tenant, kind: str = "models"):
    """Private entries of one kind (editable by writers) and the platform-wide ones (read-only)."""
    _, model = _kind(kind)
    entries = model.objects.usable_by_tenant(tenant.pk).order_by("tenant_id", "name")
    return render(request, "portal/catalog.html", {
        "tenant": tenant, "kind": kind, "kinds": TITLES, "title": TITLES[kind],
        "private": [e for e in entries if e.tenant_id == tenant.pk],
        "shared": [e for e in entries if e.tenant_id is None],
    })


@tenant_page(WRITE)
@require_http_methods(["GET", "POST"])
def catalog_edit(request, tenant, kind: str, pk: int | None = None):
    """Create (no pk) or change a private entry; "Fill from config" reads a pasted config.json."""
    form_class, model = _kind(kind)
    instance = get_object_or_404(model.objects.filter(tenant=tenant), pk=pk) if pk else None
    data = request.POST if request.method == "POST" else None
    form = form_class(data, instance=instance, tenant=tenant)
    status = 200
    if data is not None and "fill" in data:
        facts = form.fill_from_config()
        if facts is not None:
            filled = data.copy()
            filled.update({name: value for name, value in facts.items()})
            form = form_class(None, instance=instance, tenant=tenant, initial=_as_initial(filled, form_class))
            messages.info(request, "Filled from config.json: " + ", ".join(sorted(facts)) + ". Check and save.")
        else:
            status = 422
    elif data is not None:
        if form.is_valid():
            before = snapshot(model.objects.get(pk=instance.pk)) if instance else None
            with transaction.atomic():
                entry = form.save()
                action = AuditAction.UPDATE if before else AuditAction.CREATE
                record_change(actor=request.user, obj=entry, action=action, via=AuditVia.PORTAL, before=before)
            messages.success(request, f"{model._meta.verbose_name.capitalize()} {entry.name} saved.")
            return redirect(reverse("web:catalog", args=[tenant.slug, kind]))
        status = 422
    return render(request, "portal/catalog_form.html",
                  {"tenant": tenant, "kind": kind, "title": TITLES[kind], "form": form, "entry": instance},
                  status=status)


def _as_initial(data, form_class) -> dict:
    """Submitted values as initial ones, so a filled form is shown unbound (no errors before saving)."""
    fields = [*form_class.base_fields]
    return {name: data.getlist(name) if name == "supported_modes" else data.get(name) for name in fields
            if name in data}


@tenant_page(WRITE)
@require_http_methods(["GET", "POST"])
def catalog_delete(request, tenant, kind: str, pk: int):
    """GET asks (a page with Delete and Cancel: no script, so the CSP has nothing to block); POST deletes the
    private entry, and one still used by a service or adapter is refused with the reason."""
    _, model = _kind(kind)
    entry = get_object_or_404(model.objects.filter(tenant=tenant), pk=pk)
    if request.method == "GET":
        return render(request, "portal/catalog_delete.html", {
            "tenant": tenant, "kind": kind, "title": TITLES[kind], "entry": entry,
            "noun": model._meta.verbose_name})
    try:
        with transaction.atomic():
            record_change(actor=request.user, obj=entry, action=AuditAction.DELETE, via=AuditVia.PORTAL,
                          before=snapshot(entry))
            entry.delete()
    except ProtectedError as exc:
        messages.error(request, f"{entry.name} is still used by {len(exc.protected_objects)} object(s); "
                                "remove those first.")
    else:
        messages.success(request, f"{entry.name} deleted.")
    return redirect(reverse("web:catalog", args=[tenant.slug, kind]))
