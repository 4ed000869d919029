"""The portal's Batches page: the tenant's batches with their progress (refreshed while any runs), a cancel for
owners and operators, the output and error files to download, and a form that starts a batch from a JSONL
file (run by the gateway's batch runner like one a client created through `/v1/batches`)."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from apps.gateway.batches import cancel_batch, start_batch
from apps.gateway.models import Batch, File, InferenceKey
from apps.web.forms.gateway import BatchForm
from apps.web.htmx import render_page
from apps.web.portal.scope import READ, WRITE, tenant_page

SHOWN = 50  # the newest batches on the page


def _batches(request, tenant) -> list[Batch]:
    batches = list(Batch.objects.restrict(request.user).filter(tenant=tenant)[:SHOWN])
    names = dict(InferenceKey.objects.restrict(request.user).filter(pk__in={b.key_id for b in batches})
                 .values_list("pk", "name"))
    for batch in batches:
        batch.key_name = names.get(batch.key_id, f"key {batch.key_id}")
    return batches


def _page(request, tenant, form=None, status=200):
    batches = _batches(request, tenant)
    context = {"tenant": tenant, "batches": batches, "running": any(b.active for b in batches),
               "form": form or BatchForm(tenant=tenant)}
    return render_page(request, "portal/batches.html", "portal/partials/batch_rows.html", context, status=status)


@tenant_page(READ, write_methods_need=WRITE)
@require_http_methods(["GET", "POST"])
def batches_page(request, tenant):
    """The tenant's batches and, for owners and operators, the form that starts one."""
    if request.method == "GET":
        return _page(request, tenant)
    form = BatchForm(request.POST, request.FILES, tenant=tenant)
    if not form.is_valid():
        return _page(request, tenant, form=form, status=422)
    batch = start_batch(key=form.cleaned_data["key"], endpoint=form.cleaned_data["endpoint"],
                        filename=form.cleaned_data["file"].name, content=form.content, lines=form.lines,
                        actor=request.user)
    messages.success(request, f"Batch {batch.id} queued: {batch.total} lines, run on spare capacity.")
    return redirect(reverse("web:batches", args=[tenant.slug]))


@tenant_page(WRITE)
@require_http_methods(["POST"])
def batch_cancel(request, tenant, batch_id: str):
    """Stop a batch: lines in flight finish, the rest are not sent; what is done stays downloadable."""
    batch = get_object_or_404(Batch.objects.restrict(request.user).filter(tenant=tenant), pk=batch_id)
    if cancel_batch(batch, actor=request.user):
        messages.success(request, f"Batch {batch.id} is being cancelled.")
    else:
        messages.error(request, f"Batch {batch.id} is already {batch.get_status_display().lower()}.")
    return redirect(reverse("web:batches", args=[tenant.slug]))


@tenant_page(READ)
@require_http_methods(["GET"])
def file_download(request, tenant, file_id: str):
    """A batch's input, output or error file, as stored."""
    stored = get_object_or_404(File.objects.restrict(request.user).filter(tenant=tenant), pk=file_id)
    response = HttpResponse(bytes(stored.content), content_type="application/jsonl")
    response["Content-Disposition"] = f'attachment; filename="{stored.id}.jsonl"'
    return response
