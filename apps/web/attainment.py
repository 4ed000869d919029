"""SLO attainment of a service as its users felt it: the share of the requests the gateway metered over a
window that met each objective, per request (not a percentile), as the benchmark and the what-if lab judge:

- TTFT budget: TTFT ≤ the allowance (the service's TTFT target, 2 s without one) + the request's own prefill
  time on an idle replica: its uncached prompt tokens over the replica's prefill rate from the capacity
  planner (`apps.autoscaling.evaluate.pool_rates`, the roofline kubesim's engines step by);
- TTFT absolute: TTFT ≤ the allowance;
- ITL: the request's mean inter-token time (duration − TTFT) / (output tokens − 1) ≤ the ITL target, over the
  requests with at least two output tokens (only with an ITL target).

TTFT here is the gateway's (what a client waits for), counted in SQL over the rows of the window.
"""

from __future__ import annotations

from datetime import timedelta

from django.db.models import Count, ExpressionWrapper, F, FloatField, Q
from django.utils import timezone

from apps.autoscaling.evaluate import pool_rates
from apps.gateway.models import UsageRow

WINDOW = timedelta(hours=1)
DEFAULT_ALLOWANCE_S = 2.0  # the signals' allowance without a TTFT target (apps.autoscaling.signals)


def slo_attainment(service, now=None) -> dict | None:
    """The last hour's attainment of the service's objectives at the gateway; None without answered requests."""
    targets = (service.autoscaling or {}).get("targets") or {}
    allowance = float(targets.get("ttft_p95_seconds") or DEFAULT_ALLOWANCE_S)
    itl = targets.get("itl_p95_seconds")
    pools = list(service.pools.all())
    pool = next((p for p in pools if p.role == "prefill"), pools[0] if pools else None)
    rates = pool_rates(service, pool) if pool is not None else None
    rows = UsageRow.objects.filter(tenant_id=service.tenant_id, service_id=service.pk, status=200,
                                   ttft_ms__isnull=False, at__gte=(now or timezone.now()) - WINDOW)
    counts = {"requests": Count("pk"), "abs_ok": Count("pk", filter=Q(ttft_ms__lte=allowance * 1000))}
    if rates is not None:
        budget = ExpressionWrapper(allowance * 1000 + (F("prompt_tokens") - F("cached_tokens"))
                                   * (1000.0 / rates.prefill_tokens_per_s), output_field=FloatField())
        counts["budget_ok"] = Count("pk", filter=Q(ttft_ms__lte=budget))
    if itl:
        within = ExpressionWrapper(F("ttft_ms") + (F("completion_tokens") - 1) * (float(itl) * 1000),
                                   output_field=FloatField())
        counts["itl_n"] = Count("pk", filter=Q(completion_tokens__gte=2))
        counts["itl_ok"] = Count("pk", filter=Q(completion_tokens__gte=2, duration_ms__lte=within))
    got = rows.aggregate(**counts)
    n = got["requests"]
    if not n:
        return None
    return {"requests": n, "allowance_s": allowance, "itl_target_s": itl,
            "ttft_abs": got["abs_ok"] / n,
            "ttft_budget": got["budget_ok"] / n if rates is not None else None,
            "itl": got["itl_ok"] / got["itl_n"] if itl and got["itl_n"] else None,
            "in_force": "budget" if rates is not None else "absolute"}
