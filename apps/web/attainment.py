"""SLO attainment of services as their users felt it: the share of the requests the gateway metered over the
last hour that met each objective, per request (not a percentile), as the benchmark and the what-if lab judge:

- TTFT budget: TTFT ≤ the allowance (the service's TTFT target, 2 s without one) + the request's own prefill
  time on an idle replica: its uncached prompt tokens over the replica's prefill rate from the capacity
  planner (`apps.autoscaling.evaluate.pool_rates`, the roofline kubesim's engines step by);
- TTFT absolute: TTFT ≤ the allowance;
- ITL: the request's mean inter-token time (duration − TTFT) / (output tokens − 1) ≤ the ITL target, over the
  requests with at least two output tokens (only with an ITL target).

TTFT here is the gateway's (what a client waits for). One grouped query for any number of services: each
service's allowance, prefill time per token and ITL target enter it as CASE expressions on its id.
"""

from __future__ import annotations

from datetime import timedelta

from django.db.models import Case, Count, F, FloatField, Q, Value, When
from django.utils import timezone

from apps.autoscaling.evaluate import pool_rates
from apps.gateway.models import UsageRow

WINDOW = timedelta(hours=1)
DEFAULT_ALLOWANCE_S = 2.0  # the signals' allowance without a TTFT target (apps.autoscaling.signals)


def objectives(service) -> dict:
    """The service's allowance and ITL target (seconds) and its replica's prefill time per token (None: unknown)."""
    targets = (service.autoscaling or {}).get("targets") or {}
    pools = list(service.pools.all())
    pool = next((p for p in pools if p.role == "prefill"), pools[0] if pools else None)
    rates = pool_rates(service, pool) if pool is not None else None
    itl = targets.get("itl_p95_seconds")
    return {"allowance_s": float(targets.get("ttft_p95_seconds") or DEFAULT_ALLOWANCE_S),
            "itl_target_s": float(itl) if itl else None,
            "s_per_token": 1.0 / rates.prefill_tokens_per_s if rates is not None else None}


def _by_service(per: dict[int, dict], key: str, scale: float = 1000.0) -> Case:
    whens = [When(service_id=sid, then=Value(o[key] * scale)) for sid, o in per.items() if o[key] is not None]
    return Case(*whens, default=Value(None), output_field=FloatField())


def attainments(services, now=None) -> dict[int, dict]:
    """{service id: {requests, allowance_s, itl_target_s, ttft_budget, ttft_abs, itl, in_force}} over the last
    hour, for the services with answered requests (figures None where their objective is unknown)."""
    per = {s.pk: objectives(s) for s in services}
    if not per:
        return {}
    tenants = {s.tenant_id for s in services}
    allowance, per_token, itl = (_by_service(per, "allowance_s"), _by_service(per, "s_per_token"),
                                 _by_service(per, "itl_target_s"))
    budget = allowance + (F("prompt_tokens") - F("cached_tokens")) * per_token
    rows = (UsageRow.objects.filter(tenant_id__in=tenants, service_id__in=list(per), status=200,
                                    ttft_ms__isnull=False, at__gte=(now or timezone.now()) - WINDOW)
            .values("service_id")
            .annotate(requests=Count("pk"), abs_ok=Count("pk", filter=Q(ttft_ms__lte=allowance)),
                      budget_ok=Count("pk", filter=Q(ttft_ms__lte=budget)),
                      itl_n=Count("pk", filter=Q(completion_tokens__gte=2)),
                      itl_ok=Count("pk", filter=Q(completion_tokens__gte=2,
                                                  duration_ms__lte=F("ttft_ms") + (F("completion_tokens") - 1) * itl))))
    out = {}
    for r in rows:
        o, n = per[r["service_id"]], r["requests"]
        known = o["s_per_token"] is not None
        out[r["service_id"]] = {
            "requests": n, "allowance_s": o["allowance_s"], "itl_target_s": o["itl_target_s"],
            "ttft_abs": r["abs_ok"] / n, "ttft_budget": r["budget_ok"] / n if known else None,
            "itl": r["itl_ok"] / r["itl_n"] if o["itl_target_s"] and r["itl_n"] else None,
            "in_force": "budget" if known else "absolute"}
    return out


def slo_attainment(service, now=None) -> dict | None:
    """The last hour's attainment of one service's objectives at the gateway; None without answered requests."""
    return attainments([service], now).get(service.pk)


def short_words(a: dict | None) -> str:
    """A fleet table cell: the TTFT attainment in force, then ITL's; '' without requests."""
    if a is None:
        return ""
    ttft = (f"TTFT {a['ttft_budget']:.1%} (budget)" if a["ttft_budget"] is not None
            else f"TTFT {a['ttft_abs']:.1%} (within {a['allowance_s']:g} s)")
    return ttft + (f", ITL {a['itl']:.1%}" if a["itl"] is not None else "") + f" of {a['requests']}"
