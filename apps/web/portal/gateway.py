"""Portal pages of the gateway: inference keys (create with limits, the key shown once; rotate; revoke)
and usage (charts, errors and 429s, TTFT at the gateway, budgets, CSV export)."""

from __future__ import annotations

import csv
from datetime import timedelta

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.db import transaction
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_http_methods

from apps.core.audit import record_change
from apps.core.choices import AuditAction, AuditVia
from apps.core.ids import ascii_int
from apps.gateway.keys import revoke_key, rotate_key
from apps.gateway.models import InferenceKey
from apps.gateway.rollup import hour_start
from apps.gateway.usage import CSV_COLUMNS, UsageQuery, month_use, ttft_by_hour, usage
from apps.tenancy.tokens import TokenRevoked
from apps.web.forms.gateway import InferenceKeyForm
from apps.web.htmx import is_fragment, render_page
from apps.web.portal.scope import READ, WRITE, tenant_page

RANGES = {"24h": ("hour", timedelta(hours=24)), "7d": ("hour", timedelta(days=7)), "30d": ("day", timedelta(days=30))}


def _keys(request, tenant):
    keys = list(InferenceKey.objects.restrict(request.user).filter(tenant=tenant).prefetch_related("services")
                .order_by("revoked_at", "-created"))
    used = month_use(request.user, [key.pk for key in keys])
    for key in keys:
        key.month_used = used.get(key.pk, 0)
        budget = key.monthly_token_budget
        key.month_pct = min(100, round(100 * key.month_used / budget)) if budget else None
    return keys


def _keys_page(request, tenant, form=None, issued=None, status=200):
    context = {"tenant": tenant, "keys": _keys(request, tenant), "form": form or InferenceKeyForm(tenant=tenant),
               "issued": issued, "now": timezone.now()}
    return render_page(request, "portal/inference_keys.html", "portal/partials/inference_keys.html", context,
                       status=status)


@tenant_page(READ, write_methods_need=WRITE)
@require_http_methods(["GET", "POST"])
def inference_keys(request, tenant):
    """The tenant's inference keys (prefix, services, limits, the month's budget use) and, for owners and
    operators, a form that issues one."""
    if request.method == "GET":
        return _keys_page(request, tenant)
    form = InferenceKeyForm(request.POST, tenant=tenant)
    if not form.is_valid():
        return _keys_page(request, tenant, form=form, status=422)
    key = form.save(commit=False)
    key.created_by = request.user
    plaintext = key.new_secret(expires_at=key.expires_at)
    with transaction.atomic():
        key.save()
        form.save_m2m()
        record_change(actor=request.user, obj=key, action=AuditAction.CREATE, via=AuditVia.PORTAL)
    messages.success(request, f"Key {key.name} created. Copy it now: it is shown only once.")
    return _keys_page(request, tenant, issued={"key": key, "plaintext": plaintext})


@tenant_page(WRITE)
@require_http_methods(["POST"])
def inference_key_action(request, tenant, pk: int, action: str):
    """Rotate (a new key shown once, the old one stops at the gateway's next snapshot) or revoke."""
    if action not in ("rotate", "revoke"):
        raise Http404("No such action.")
    key = get_object_or_404(InferenceKey.objects.restrict(request.user).filter(tenant=tenant), pk=pk)
    issued = None
    if action == "rotate":
        try:
            plaintext = rotate_key(key, actor=request.user, via=AuditVia.PORTAL)
        except (TokenRevoked, ValidationError) as exc:
            messages.error(request, " ".join(getattr(exc, "messages", [str(exc)])))
        else:
            key.refresh_from_db()
            issued = {"key": key, "plaintext": plaintext}
            messages.success(request, f"Key {key.name} rotated. Copy the new key now: it is shown only once.")
    elif action == "revoke":
        revoke_key(key, actor=request.user, via=AuditVia.PORTAL)
        messages.success(request, f"Key {key.name} revoked; the gateway refuses it from its next snapshot.")
    if is_fragment(request) or issued:
        return _keys_page(request, tenant, issued=issued)
    return redirect(reverse("web:inference-keys", args=[tenant.slug]))


def _query(request, tenant) -> tuple[str, UsageQuery]:
    chosen = request.GET.get("range") if request.GET.get("range") in RANGES else "24h"
    granularity, span = RANGES[chosen]
    end = hour_start(timezone.now()) + timedelta(hours=1)
    key = request.GET.get("key", "")
    return chosen, UsageQuery(start=end - span, end=end, granularity=granularity, tenant=tenant.slug,
                              key=ascii_int(key), model=request.GET.get("model") or None)


def _key_name(row) -> str:
    return row["key"] or f"key {row['key_id']}"


def _totals(rows, name_of) -> list[dict]:
    """Requests, tokens, errors and 429s per name (a key's or a model's), most tokens first."""
    totals: dict[str, dict] = {}
    for row in rows:
        name = name_of(row)
        total = totals.setdefault(name, {"name": name, "requests": 0, "tokens": 0, "errors": 0, "rate_limited": 0})
        total["requests"] += row["requests"]
        total["tokens"] += row["prompt_tokens"] + row["completion_tokens"]
        total["errors"] += row["errors"]
        total["rate_limited"] += row["rate_limited"]
    return sorted(totals.values(), key=lambda t: -t["tokens"])


def _chart(rows, ttft, chosen: str, query: UsageQuery) -> dict:
    """The charts' data, parallel arrays per usage row (static/js/usage-charts.js groups them), and the chosen range
    every chart spans (a bar is one period wide)."""
    step = timedelta(days=1) if query.granularity == "day" else timedelta(hours=1)
    return {"start": query.start.isoformat(), "end": query.end.isoformat(), "span": f"the last {chosen}",
            "step_ms": step // timedelta(milliseconds=1),
            "periods": [r["period"].isoformat() for r in rows], "keys": [_key_name(r) for r in rows],
            "models": [r["model"] for r in rows],
            "tokens": [r["prompt_tokens"] + r["completion_tokens"] for r in rows],
            **{name: [r[name] for r in rows] for name in ("requests", "errors", "rate_limited")},
            "ttft": [{"period": t["period"].isoformat(), "p50": t["p50"], "p95": t["p95"]} for t in ttft]}


@tenant_page(READ)
@require_http_methods(["GET"])
def usage_page(request, tenant):
    """Tokens and requests over time by key and by model, errors and 429s, TTFT at the gateway, budgets."""
    chosen, query = _query(request, tenant)
    rows = usage(request.user, query)
    context = {"tenant": tenant, "ranges": list(RANGES), "range": chosen, "query": query,
               "chart": _chart(rows, ttft_by_hour(request.user, query), chosen, query),
               "by_key": _totals(rows, _key_name), "by_model": _totals(rows, lambda r: r["model"]),
               "by_kind": _totals(rows, lambda r: "batch" if r["batch"] else "interactive"),
               "keys": [k for k in _keys(request, tenant) if k.monthly_token_budget or k.month_used],
               "all_keys": InferenceKey.objects.restrict(request.user).filter(tenant=tenant).order_by("name"),
               "models": sorted({r["model"] for r in rows} | ({query.model} if query.model else set()))}
    return render_page(request, "portal/usage.html", "portal/usage.html", context)


@tenant_page(READ)
@require_http_methods(["GET"])
def usage_csv(request, tenant):
    """The usage page's rows (same range and filters) as CSV, one row per period, key, service and model."""
    chosen, query = _query(request, tenant)
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="usage-{tenant.slug}-{chosen}.csv"'
    writer = csv.writer(response)
    writer.writerow(CSV_COLUMNS)
    for row in usage(request.user, query):
        writer.writerow([row["period"].isoformat() if name == "period" else row[name] for name in CSV_COLUMNS])
    return response
