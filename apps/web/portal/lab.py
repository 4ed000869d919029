"""The what-if lab page of a service: pick a load (recorded or an uploaded trace), fill alternatives, run them on a
worker, read the results (table, plots, Pareto) and apply one. Every write goes through `apps.whatif.runs` and
`apps.whatif.apply` (the API's functions), so the same validation decides and every change is audited."""

from __future__ import annotations

import json
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from apps.core.choices import AuditVia
from apps.core.ids import ascii_int
from apps.serving.actions import ServiceDeleting
from apps.web.forms.lab import LoadForm, TraceUploadForm, alternative_forms, attach_problems
from apps.web.htmx import is_fragment
from apps.web.portal.scope import READ, WRITE, tenant_page
from apps.web.portal.services import get_service
from apps.web.templatetags.figures import human_duration
from apps.whatif.advice import dismiss
from apps.whatif.apply import apply_scenario, gpu_prices, with_costs
from apps.whatif.models import Advice, Calibration, Run
from apps.whatif.runs import cancel_run, start_run, upload_trace
from apps.whatif.scenarios import ScenarioError, default_alternatives

RECENT_RUNS = 10
CALIBRATION_LABELS = {"ttft_p50_s": "TTFT p50 (s)", "ttft_p95_s": "TTFT p95 (s)", "itl_p95_s": "ITL p95 (s)",
                      "replicas": "Replicas (mean)", "gpu_hours": "GPU-hours"}


def lab_url(service, run: Run | None = None) -> str:
    url = reverse("web:lab", args=[service.tenant.slug, service.name])
    return f"{url}?run={run.pk}" if run is not None else url


def _prefilled(request, service) -> list[dict]:
    """Alternatives to fill the rows with: `?alternatives=<JSON list>` (an advice card's link), else the lab's
    defaults for this service."""
    raw = request.GET.get("alternatives")
    if raw:
        try:
            data = json.loads(raw)
        except ValueError:
            data = None
        if isinstance(data, list) and all(isinstance(a, dict) for a in data):
            return data[:8]
    try:
        return default_alternatives(service)
    except ScenarioError:
        return []


def _time_axis(result: dict | None, scenarios: list[dict]) -> dict:
    """What the time plots span: the whole load, from its start to its last request's arrival (`span_s`, longer
    when a scenario's timeline runs on while the last requests drain; at least a second, so a load of one request
    still has an axis), and that span in words."""
    duration = float((result or {}).get("duration_s") or 0)
    last = max((p["t"] for s in scenarios for p in s["timeline"]), default=0)
    return {"span_s": max(duration, last, 1.0), "span": f"the load's {human_duration(duration)}"}


def run_context(run: Run | None) -> dict:
    """The selected run's rows and plots (with costs from the current price table)."""
    if run is None:
        return {"run": None}
    scenarios = with_costs(run.result["scenarios"], gpu_prices()) if run.result else []
    chosen = ((run.result or {}).get("chosen") or {}).get("name") if run.search else None
    plots = {"scenarios": [{"name": s["name"], "t": [p["t"] for p in s["timeline"]],
                            "replicas": [p["replicas"] for p in s["timeline"]],
                            "ttft_p95": [p["ttft_p95_s"] for p in s["timeline"]],
                            "gpu_hours": s["gpu_hours"], "slo_attainment": s["slo_attainment"]}
                           for s in scenarios], "chosen": chosen, **_time_axis(run.result, scenarios)}
    for s in scenarios:  # a front row opens in the lab's form as an alternative to keep and edit
        keep = run.search and s["changes"]
        s["as_alternative"] = lab_url(run.service) + "?" + urlencode(
            {"alternatives": json.dumps([{"name": s["name"], **s["changes"]}])}) if keep else None
    found = Calibration.objects.filter(run=run).first()
    calibration = None if found is None else [
        (label, found.predicted.get(key), found.observed.get(key), found.errors_pct.get(key))
        for key, label in CALIBRATION_LABELS.items()]
    return {"run": run, "scenarios": scenarios, "plots": plots, "result": run.result, "calibration": calibration,
            "chosen": chosen}


def _selected(request, service) -> Run | None:
    runs = Run.objects.filter(service=service)
    chosen = ascii_int(request.GET.get("run"))
    if chosen is not None:
        return runs.filter(pk=chosen).first()
    return runs.order_by("-created").first()


def _page(request, tenant, service, *, load_form=None, upload_form=None, rows=None, problems=(), status=200,
          search_form=None):
    context = {
        "tenant": tenant, "service": service,
        "load_form": load_form or LoadForm(tenant=tenant),
        "search_form": search_form or LoadForm(tenant=tenant, prefix="search"),
        "upload_form": upload_form or TraceUploadForm(),
        "rows": rows if rows is not None else alternative_forms(initial=_prefilled(request, service)),
        "problems": list(problems),
        "runs": list(Run.objects.filter(service=service).select_related("trace").order_by("-created")[:RECENT_RUNS]),
        "calibrations": list(Calibration.objects.filter(service=service).order_by("-created")[:RECENT_RUNS]),
    }
    context |= run_context(_selected(request, service))
    return render(request, "portal/lab.html", context, status=status)


@tenant_page(READ, write_methods_need=WRITE)
def lab(request, tenant, name: str):
    """GET: the lab page. POST: start a run from the load and the filled rows (422 with inline errors)."""
    service = get_service(tenant, name)
    if request.method != "POST":
        return _page(request, tenant, service)
    load_form = LoadForm(request.POST, tenant=tenant)
    rows = alternative_forms(request.POST)
    if not (load_form.is_valid() and all(r.is_valid() for r in rows)):
        return _page(request, tenant, service, load_form=load_form, rows=rows, status=422)
    filled = [(i, r) for i, r in enumerate(row for row in rows if row.filled())]
    try:
        run = start_run(service=service, trace=load_form.cleaned_data["trace"],
                        alternatives=[r.alternative() for _, r in filled], actor=request.user, via=AuditVia.PORTAL)
    except ValidationError as exc:
        errors = exc.message_dict
        problems = attach_problems(errors.pop("alternatives", []), filled)
        for field, texts in errors.items():
            load_form.add_error("trace" if field == "trace" else None, texts)
        return _page(request, tenant, service, load_form=load_form, rows=rows, problems=problems, status=422)
    messages.success(request, f"What-if run #{run.pk} started; its results appear below when a worker has "
                              "replayed it.")
    return redirect(lab_url(service, run))


@tenant_page(WRITE)
@require_POST
def lab_search(request, tenant, name: str):
    """Start a search for the cheapest configurations meeting the SLO on the chosen load (422 naming the field)."""
    service = get_service(tenant, name)
    load_form = LoadForm(request.POST, tenant=tenant, prefix="search")
    if load_form.is_valid():
        try:
            run = start_run(service=service, trace=load_form.cleaned_data["trace"], alternatives=None, search=True,
                            actor=request.user, via=AuditVia.PORTAL)
        except ValidationError as exc:
            for field, texts in exc.message_dict.items():
                load_form.add_error("trace" if field == "trace" else None, texts)
        else:
            messages.success(request, f"Search #{run.pk} started; its front appears below when a worker has "
                                      "replayed it.")
            return redirect(lab_url(service, run))
    return _page(request, tenant, service, search_form=load_form, status=422)


@tenant_page(WRITE)
@require_POST
def lab_upload(request, tenant, name: str):
    """Upload a trace for the tenant; a bad row is shown beside the file input, naming its line and column."""
    service = get_service(tenant, name)
    form = TraceUploadForm(request.POST, request.FILES)
    if form.is_valid():
        try:
            trace = upload_trace(tenant=tenant, name=form.cleaned_data["name"], fmt=form.cleaned_data["format"],
                                 data=form.cleaned_data["file"].read(settings.WHATIF_TRACE_MAX_BYTES + 1),
                                 actor=request.user, via=AuditVia.PORTAL)
        except ValidationError as exc:
            for field, texts in exc.message_dict.items():
                form.add_error(field if field in form.fields else None, texts)
        else:
            messages.success(request, f"Trace {trace.name} uploaded: {trace.requests} requests over "
                                      f"{trace.duration_s:.0f} s. Pick it as the load below.")
            return redirect(lab_url(service))
    return _page(request, tenant, service, upload_form=form, status=422)


@tenant_page(READ)
def lab_run(request, tenant, name: str, run_id: int):
    """The run's panel: status and progress while it runs (htmx polls it), results once it has finished."""
    service = get_service(tenant, name)
    run = get_object_or_404(Run.objects.filter(service=service), pk=run_id)
    if not is_fragment(request):
        return redirect(lab_url(service, run))
    return render(request, "portal/partials/lab_run.html", {"tenant": tenant, "service": service, **run_context(run)})


@tenant_page(WRITE)
@require_POST
def lab_cancel(request, tenant, name: str, run_id: int):
    service = get_service(tenant, name)
    run = get_object_or_404(Run.objects.filter(service=service), pk=run_id)
    try:
        cancel_run(run, actor=request.user, via=AuditVia.PORTAL)
        messages.success(request, f"What-if run #{run.pk} cancelled.")
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    return redirect(lab_url(service, run))


@tenant_page(WRITE)
@require_POST
def lab_apply(request, tenant, name: str, run_id: int):
    """Turn one alternative into a change of the service (validated and audited like an edit)."""
    service = get_service(tenant, name)
    run = get_object_or_404(Run.objects.filter(service=service), pk=run_id)
    scenario = request.POST.get("scenario", "")
    try:
        saved = apply_scenario(run, scenario, actor=request.user, via=AuditVia.PORTAL)
    except (ValidationError, ServiceDeleting) as exc:
        text = " ".join(exc.messages) if isinstance(exc, ValidationError) else str(exc)
        messages.error(request, f"{scenario!r} was not applied: {text}")
        return redirect(lab_url(service, run))
    messages.success(request, f"Applied {scenario!r} to {saved.name} (generation {saved.generation}); the change is "
                              "in the audit log and its pods roll now.")
    return redirect(reverse("web:service", args=[tenant.slug, saved.name]))


@tenant_page(WRITE)
@require_POST
def advice_dismiss(request, tenant, name: str, advice_id: int):
    service = get_service(tenant, name)
    advice = get_object_or_404(Advice.objects.filter(service=service), pk=advice_id)
    dismiss(advice, actor=request.user, via=AuditVia.PORTAL)
    messages.success(request, f"Advice dismissed: {advice.get_rule_display()}.")
    return redirect(reverse("web:service", args=[tenant.slug, service.name]) + "#advice")
