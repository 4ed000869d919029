"""Calibration: how far the lab's replay of a service's actual configuration over its recorded window was from
what the service's engines showed over the same window, kept per service so the operator sees how far to trust
the lab.

Observed figures come from the stored series (`telemetry.SeriesPoint`, raw rows of the whole service in the
window from the load's first arrival to its last):
- TTFT p50/p95 and ITL p95: the rows' interval quantiles, weighted by the requests each interval finished
  (`RequestMixPoint`; 1 where none was stored). Rows keep quantiles, not buckets, so this is an estimate of the
  window's quantile, not the quantile itself;
- replicas: the time-weighted mean of ready replicas; GPU-hours: ready replicas x GPUs each x each row's
  interval (replicas still loading their model are not counted, so cold starts cost less than they did).

Predicted figures are the "current" scenario's: its quantiles, its time-weighted mean of live replicas and its
GPU-hours. The error is (predicted - observed) / observed in percent, None where either side is missing.
"""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from apps.core.audit import record_change
from apps.core.choices import AuditAction
from apps.telemetry.choices import Resolution
from apps.telemetry.models import SERVICE_ROLE, RequestMixPoint, SeriesPoint
from apps.whatif.fit import Interval, fit
from apps.whatif.models import EngineFit
from apps.whatif.scenarios import base_roofline

FIGURES = ("ttft_p50_s", "ttft_p95_s", "itl_p95_s", "replicas", "gpu_hours")


def _weighted(pairs: list[tuple[float | None, float]]) -> float | None:
    pairs = [(v, w) for v, w in pairs if v is not None and w > 0]
    total = sum(w for _, w in pairs)
    return sum(v * w for v, w in pairs) / total if total else None


def observed(service, start, duration_s: float, gpus_per_replica: int) -> dict | None:
    """What the stored series showed from `start` for `duration_s`; None without two rows in it."""
    end = start + timedelta(seconds=max(duration_s, 1.0))
    rows = list(SeriesPoint.objects.filter(service_id=service.pk, role=SERVICE_ROLE, resolution=Resolution.RAW,
                                           time__gte=start, time__lte=end + timedelta(seconds=30))
                .order_by("time").values_list("time", "ttft_p50", "ttft_p95", "itl_p95", "ready_replicas"))
    if len(rows) < 2:
        return None
    weights = dict(RequestMixPoint.objects.filter(service_id=service.pk, time__in=[r[0] for r in rows])
                   .values_list("time", "requests"))
    spans = [(rows[i][0] - rows[i - 1][0]).total_seconds() for i in range(1, len(rows))]
    body = rows[1:]  # each row covers the interval since the one before it
    weight = [weights.get(r[0], 1.0) for r in body]
    held = sum(span * r[4] for span, r in zip(spans, body, strict=True))
    return {
        "ttft_p50_s": _weighted([(r[1], w) for r, w in zip(body, weight, strict=True)]),
        "ttft_p95_s": _weighted([(r[2], w) for r, w in zip(body, weight, strict=True)]),
        "itl_p95_s": _weighted([(r[3], w) for r, w in zip(body, weight, strict=True)]),
        "replicas": held / sum(spans),
        "gpu_hours": held * gpus_per_replica / 3600,
    }


def predicted(current: dict) -> dict:
    """The current configuration's replay, as the same figures."""
    timeline = current.get("timeline") or []
    replicas = sum(p["replicas"] for p in timeline) / len(timeline) if timeline else None
    return {"ttft_p50_s": current.get("ttft_p50_s"), "ttft_p95_s": current.get("ttft_p95_s"),
            "itl_p95_s": current.get("itl_p95_s"), "replicas": replicas, "gpu_hours": current.get("gpu_hours")}


def errors_pct(pred: dict, obs: dict) -> dict:
    out = {}
    for name in FIGURES:
        p, o = pred.get(name), obs.get(name)
        out[name] = None if p is None or not o else round((p - o) / o * 100, 1)
    return out


def rounded(figures: dict) -> dict:
    return {k: None if v is None else round(v, 4) for k, v in figures.items()}


def fit_engine(service, window: timedelta, until=None, *, apply: bool = False, actor=None, via="command"):
    """Fit the lab's step-time coefficients to the service's stored latencies of `window` (`apps.whatif.fit`)
    and keep the fit (audited); applied, the lab replays the service with it from then on. Raises FitError, or
    the lab's LoadError when the window has no recorded load."""
    from apps.whatif.lab import recorded_load  # the lab's module runs calibrations: imported when called

    until = until or timezone.now()
    since = until - window
    rows = SeriesPoint.objects.filter(service_id=service.pk, role=SERVICE_ROLE, resolution=Resolution.RAW,
                                      time__gt=since, time__lte=until, ready_replicas__gt=0)
    intervals = [Interval(itl, ttft, (running or 0.0) / ready, waiting or 0.0, hit or 0.0)
                 for itl, ttft, running, waiting, ready, hit in rows.values_list(
                     "itl_p50", "ttft_p50", "running", "waiting", "ready_replicas", "prefix_hit_rate")]
    load = recorded_load(service, window, until=until)
    prompts = sorted(r.prompt_tokens for r in load.requests)
    roof, chunk = base_roofline(service)
    found = fit(roof, chunk, intervals, sum(prompts) / len(prompts),
                sum(r.output_tokens for r in load.requests) / len(load.requests), prompts[len(prompts) // 2])
    with transaction.atomic():
        row = EngineFit.objects.create(
            service=service, window_start=since, window_end=until, coefficients=found.coefficients(), applied=apply,
            figures={"decode_samples": found.decode_samples, "prefill_samples": found.prefill_samples,
                     "itl_error_pct": found.itl_error_pct, "ttft_error_pct": found.ttft_error_pct,
                     "requests": len(load.requests)})
        record_change(actor=actor, obj=row, action=AuditAction.CREATE, via=via)
    return row

