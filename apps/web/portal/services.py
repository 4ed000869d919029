"""Portal pages of services: list with filters, the service page, create, edit (optimistic concurrency),
scale and delete. Writes go through `apps.serving.actions` (the same functions as the API), so the same
`clean()` decides what is valid and every change is audited and reconciled."""

from __future__ import annotations

import contextlib

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from apps.catalog.choices import DeploymentMode, EngineKind
from apps.core.choices import AuditVia
from apps.core.models import AuditEntry
from apps.gateway.drift import drift
from apps.gateway.usage import gateway_view
from apps.serving.actions import ServiceDeleting, StaleVersion, request_deletion, save_service
from apps.serving.choices import Phase
from apps.serving.models import POOL_SPEC_FIELDS, InferenceService
from apps.serving.rendering.spec import PoolSpec
from apps.serving.startup import panel as startup_panel
from apps.telemetry.series import RANGES
from apps.web.attainment import slo_attainment
from apps.web.forms.services import (
    ScaleForm,
    ServiceForm,
    form_values,
    pool_forms,
    rebase,
    sign_base,
    unsign_base,
)
from apps.web.htmx import is_fragment, render_page
from apps.web.portal.advice import advice_cards
from apps.web.portal.capacity_preview import capacity_context
from apps.web.portal.scope import READ, WRITE, tenant_page
from apps.web.portal.service_tabs import tab_context
from apps.web.revisions_panel import revisions_context
from apps.web.rollout_panel import rollout_context
from apps.web.scaling_panel import attainment_words, panel_context
from apps.web.services import series_response, status_context, with_latest
from apps.whatif.limits import answer_words, capacity_limits, latest_searches

FILTERS = ("q", "phase", "mode", "engine")


def tenant_services(tenant):
    return InferenceService.objects.filter(tenant=tenant).with_related()


def get_service(tenant, name: str) -> InferenceService:
    return get_object_or_404(tenant_services(tenant), name=name)


def service_url(service, view: str = "web:service") -> str:
    return reverse(view, args=[service.tenant.slug, service.name])


@tenant_page(READ)
def service_list(request, tenant):
    """The tenant's services with phase and current figures, filtered by name, phase, mode and engine."""
    services = tenant_services(tenant).order_by("name")
    chosen = {k: request.GET.get(k, "").strip() for k in FILTERS}
    if chosen["q"]:
        services = services.filter(name__icontains=chosen["q"])
    if chosen["phase"] in Phase.values:
        services = services.filter(phase=chosen["phase"])
    if chosen["mode"] in DeploymentMode.values:
        services = services.filter(deployment_mode=chosen["mode"])
    if chosen["engine"] in EngineKind.values:
        services = services.filter(runtime__engine=chosen["engine"])
    context = {"tenant": tenant, "services": with_latest(list(services[:500])), "filters": chosen,
               "filtered": any(chosen.values()), "phases": Phase.choices, "modes": DeploymentMode.choices,
               "engines": EngineKind.choices, "query": request.GET.urlencode()}
    return render_page(request, "portal/services.html", "portal/partials/service_rows.html", context)


@tenant_page(READ)
def service_detail(request, tenant, name: str):
    """A service's page: status, live charts, controls for writers and the playground when Ready."""
    service = get_service(tenant, name)
    context = status_context(service, request.user) | {"tenant": tenant}
    if is_fragment(request):
        return render(request, "portal/partials/service_status.html", {**context, "oob": True})
    context["refresh_ms"] = settings.TELEMETRY_SCRAPE_SECONDS * 1000
    context["ranges"] = list(RANGES)
    context["range"] = request.GET.get("range") if request.GET.get("range") in RANGES else "15m"
    context["roles"] = [p.role for p in context["pools"]] if len(context["pools"]) > 1 else []
    context["audit"] = AuditEntry.objects.for_object(service).select_related("actor")[:10]
    context["scaling"] = panel_context(service)
    context["startup"] = startup_panel(service)
    context["gateway_drift"] = drift([service.pk])[service.pk]
    context["kv_tier"] = (service.engine_settings or {}).get("kv_offload")
    context["gateway_view"] = gateway_view(service.pk)
    context |= revisions_context(service)
    context |= rollout_context(service)
    context["advice"] = advice_cards(service)
    slo = slo_attainment(service)
    context["capacity_limit"] = capacity_limits([service], {service.pk: slo}).get(service.pk)
    context["slo_words"] = attainment_words(slo)
    context |= tab_context(request)
    found = latest_searches([service.pk]).get(service.pk)
    context["search_answer"] = None if found is None else {"run": found, "words": answer_words(found)}
    return render(request, "portal/service_detail.html", context)


@tenant_page(READ)
def service_series(request, tenant, name: str):
    return series_response(request, get_service(tenant, name))


def _save(request, form: ServiceForm, pools: list, instance: InferenceService | None):
    """Validate and save through `save_service`; on failure the errors end up on `form` and None returns."""
    if not (form.is_valid() and all(p.is_valid() for p in pools)):
        return None
    service = form.to_service()
    try:
        return save_service(
            service, pools=[p.spec() for p in pools], adapters=list(form.cleaned_data["adapters"]),
            actor=request.user, via=AuditVia.PORTAL,
            expected_version=form.cleaned_data.get("version") if instance else None,
        )
    except ValidationError as exc:
        form.attach_errors(exc.message_dict, pools)
    except ServiceDeleting as exc:
        form.add_error(None, str(exc))
    return None


def _form_page(request, tenant, form, pools, instance=None, stale=None, status=200):
    context = {"tenant": tenant, "form": form, "pools": pools, "service": instance, "stale": stale,
               "group_errors": getattr(form, "group_errors", {})}
    context |= capacity_context(form, pools)
    return render(request, "portal/service_form.html", context, status=status)


@tenant_page(WRITE)
@require_http_methods(["GET", "POST"])
def service_create(request, tenant):
    """A new service: the whole spec in one form, validated by the API's rules."""
    data = request.POST if request.method == "POST" else None
    form = ServiceForm(data, tenant=tenant, initial={"cluster": _default_cluster(tenant)})
    mode = (data or {}).get("deployment_mode") or DeploymentMode.STANDARD
    pools = pool_forms(data, mode=mode)
    if data is not None:
        service = _save(request, form, pools, None)
        if service is not None:
            messages.success(request, f"Service {service.name} created; it will be Ready in about a minute.")
            return redirect(service_url(service))
        return _form_page(request, tenant, form, pools, status=422)
    return _form_page(request, tenant, form, pools)


def _default_cluster(tenant):
    """The first cluster the tenant may use (never one it may not: its name would be shown)."""
    from apps.clusters.models import Cluster

    return Cluster.objects.usable_by_tenant(tenant.pk).order_by("name").first()


@tenant_page(WRITE)
@require_http_methods(["GET", "POST"])
def service_edit(request, tenant, name: str):
    """The same form on a stored service; a save based on an older version shows what changed meanwhile
    and offers to apply the user's values on top of the current version."""
    service = get_service(tenant, name)
    if service.is_deleting:
        messages.error(request, f"Service {service.name} is being deleted; it can no longer change.")
        return redirect(service_url(service))
    data = request.POST if request.method == "POST" else None
    form = ServiceForm(data, tenant=tenant, instance=service)
    mode = (data or {}).get("deployment_mode") or service.deployment_mode
    pools = pool_forms(data, mode=mode, service=service)
    if data is None:
        return _form_page(request, tenant, form, pools, instance=service)
    try:
        saved = _save(request, form, pools, service)
    except StaleVersion:
        return _stale_page(request, tenant, service, form, pools)
    if saved is not None:
        messages.success(request, f"Service {saved.name} updated (generation {saved.generation}); "
                                  "its pods roll to the new spec.")
        return redirect(service_url(saved))
    return _form_page(request, tenant, form, pools, instance=service, status=422)


def _stale_page(request, tenant, service, form, pools):
    """The user's edit is moved onto the current version (what they changed is kept, the rest follows
    what was saved meanwhile) and shown with the changes made meanwhile; saving again applies it."""
    current = get_service(tenant, service.name)
    base = unsign_base(form.data.get("base", "")) or {}
    merged, changed = rebase(form.data, base, form_values(current))
    since = form.cleaned_data.get("version") or 0
    changed_by = sorted({e.actor_repr or "system" for e in AuditEntry.objects.for_object(current)
                         if (e.after or {}).get("version", 0) > since})
    stale = {"changes": [(_label(k), before, after) for k, before, after in changed], "by": changed_by,
             "version": current.version}
    data = QueryDict(mutable=True)
    for name, value in merged.items():
        data.setlist(name, value if isinstance(value, list) else [value])
    data["version"], data["base"] = str(current.version), sign_base(current)
    form = ServiceForm(data, tenant=tenant, instance=current)
    form.is_valid()
    pools = pool_forms(data, mode=data.get("deployment_mode") or current.deployment_mode, service=current)
    return _form_page(request, tenant, form, pools, instance=current, stale=stale, status=409)


def _label(key: str) -> str:
    """A form value's name for people: `pool-decode-replicas` → "decode pool: replicas"."""
    if key.startswith("pool-"):
        _, role, field = key.split("-", 2)
        return f"{role} pool: {field.replace('_', ' ')}"
    field = ServiceForm.base_fields.get(key)
    return str(field.label) if field is not None and field.label else key.replace("_", " ")


@tenant_page(WRITE)
@require_http_methods(["POST"])
def service_form_parts(request, tenant):
    """htmx: the pools fieldset for the chosen mode and the capacity check, as the form changes."""
    instance = None
    if request.POST.get("service"):
        instance = get_service(tenant, request.POST["service"])
    form = ServiceForm(request.POST, tenant=tenant, instance=instance)
    pools = pool_forms(request.POST, mode=request.POST.get("deployment_mode") or DeploymentMode.STANDARD,
                       service=instance)
    context = {"tenant": tenant, "form": form, "pools": pools, "service": instance, "oob": True,
               "group_errors": {}} | capacity_context(form, pools)
    return render(request, "portal/partials/form_parts.html", context)


@tenant_page(WRITE)
@require_http_methods(["GET", "POST"])
def service_scale(request, tenant, name: str):
    """Replicas, min and max of each pool; saved as a spec change like any other (quota checked)."""
    service = get_service(tenant, name)
    pools = list(service.pools.all())
    data = request.POST if request.method == "POST" else None
    forms_ = [ScaleForm(data, prefix=p.role, initial={f: getattr(p, f) for f in ScaleForm.base_fields})
              for p in pools]
    if data is not None and all(f.is_valid() for f in forms_):
        specs = [PoolSpec(role=p.role, **({f: getattr(p, f) for f in POOL_SPEC_FIELDS} | f.cleaned_data))
                 for p, f in zip(pools, forms_, strict=True)]
        try:
            save_service(service, pools=specs, adapters=list(service.adapters.all()), actor=request.user,
                         via=AuditVia.PORTAL, expected_version=_int(data.get("version")))
        except (StaleVersion, ServiceDeleting) as exc:
            messages.error(request, f"{exc} The form shows the current sizes now; apply yours again.")
            return redirect(reverse("web:service-scale", args=[tenant.slug, service.name]))
        except ValidationError as exc:
            by_role = {p.role: f for p, f in zip(pools, forms_, strict=True)}
            for problem in exc.message_dict.get("pools", []):
                where, _, message = problem.partition(": ")
                role, _, field = where.partition(".")
                form = by_role.get(role)
                if form is not None and field in form.fields:
                    form.add_error(field, message)
                else:
                    forms_[0].add_error(None, problem)
        else:
            if service.autoscaled_by_builtin:
                # The built-in autoscaler owns replicas: the form moved its bounds (save_service kept the count).
                bounds = ", ".join(f"{s.role} min {s.min_replicas}, max {s.max_replicas}" for s in specs)
                messages.success(request, f"Scaling {service.name}: {bounds}; the built-in autoscaler sets the "
                                          f"replicas within these bounds.")
            else:
                sizes = ", ".join(f"{s.role} {s.replicas} (min {s.min_replicas}, max {s.max_replicas})" for s in specs)
                messages.success(request, f"Scaling {service.name}: {sizes}.")
            return redirect(service_url(service))
    return render(request, "portal/service_scale.html",
                  {"tenant": tenant, "service": service, "rows": list(zip(pools, forms_, strict=True))},
                  status=422 if data is not None else 200)


def _int(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


@tenant_page(WRITE)
@require_http_methods(["GET", "POST"])
def service_delete(request, tenant, name: str):
    """Delete after typing the service's name; the service shows Deleting until its objects are gone."""
    service = get_service(tenant, name)
    error = ""
    if request.method == "POST":
        if request.POST.get("confirm", "").strip() != service.name:
            error = f"Type {service.name} exactly to confirm."
        else:
            # Already on its way out is the outcome the user asked for.
            with contextlib.suppress(ServiceDeleting):
                request_deletion(service, actor=request.user, via=AuditVia.PORTAL)
            messages.success(request, f"Service {service.name} is being deleted; it disappears once its "
                                      "Kubernetes objects are gone.")
            return redirect(reverse("web:tenant-services", args=[tenant.slug]))
    return render(request, "portal/service_delete.html", {"tenant": tenant, "service": service, "error": error},
                  status=422 if error else 200)
