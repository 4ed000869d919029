"""Usage as people read it, shared by `GET /api/v1/usage/`, the portal's Usage page and its CSV export:
the hourly rollup grouped by hour or day and by tenant, key, service and model, scoped by the one access
rule; TTFT percentiles at the gateway from the request rows; and each key's budget use this month."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db.models import Aggregate, Count, F, FloatField, Q, Sum, Value
from django.db.models.functions import TruncDay, TruncHour
from django.utils import timezone

from apps.gateway.models import InferenceKey, UsageHour, UsageRow
from apps.gateway.rollup import hour_start, month_start
from apps.serving.models import InferenceService

GRANULARITIES = ("hour", "day")
DEFAULT_RANGE = {"hour": timedelta(hours=24), "day": timedelta(days=30)}
MAX_RANGE = {"hour": timedelta(days=31), "day": timedelta(days=400)}
COUNTS = ("requests", "errors", "rate_limited", "prompt_tokens", "cached_tokens", "completion_tokens")
CSV_COLUMNS = ("period", "tenant", "key_id", "key", "service_id", "service", "model", "batch", *COUNTS,
               "ttft_p50_ms", "ttft_p95_ms")


class Percentile(Aggregate):
    """PostgreSQL's percentile_cont(fraction) WITHIN GROUP (ORDER BY expression); nulls are skipped."""

    function = "percentile_cont"
    template = "%(function)s(%(fraction)s) WITHIN GROUP (ORDER BY %(expressions)s)"
    output_field = FloatField()

    def __init__(self, expression, fraction: float, **extra):
        super().__init__(expression, fraction=float(fraction), **extra)


@dataclass(frozen=True)
class UsageQuery:
    start: datetime
    end: datetime
    granularity: str = "hour"
    tenant: str | None = None
    key: int | None = None
    service: int | None = None
    model: str | None = None

    @classmethod
    def default(cls, granularity: str = "hour", **filters) -> UsageQuery:
        end = hour_start(timezone.now()) + timedelta(hours=1)  # the current hour included
        return cls(start=end - DEFAULT_RANGE[granularity], end=end, granularity=granularity, **filters)

    def problems(self) -> dict[str, str]:
        """What is wrong with the query, by parameter name (empty when it can run)."""
        if self.granularity not in GRANULARITIES:
            return {"granularity": f"One of {', '.join(GRANULARITIES)}."}
        if self.start >= self.end:
            return {"from": "'from' must be before 'to'."}
        if self.end - self.start > MAX_RANGE[self.granularity]:
            return {"from": f"At most {MAX_RANGE[self.granularity].days} days at granularity {self.granularity}."}
        return {}

    def filtered(self, queryset, time_field: str):
        queryset = queryset.filter(**{f"{time_field}__gte": self.start, f"{time_field}__lt": self.end})
        for name, lookup in (("tenant", "tenant__slug"), ("key", "key_id"), ("service", "service_id"),
                             ("model", "model")):
            value = getattr(self, name)
            if value is not None:
                queryset = queryset.filter(**{lookup: value})
        return queryset


def usage(user, query: UsageQuery) -> list[dict]:
    """One row per period and (tenant, key, service, model, batch or interactive) with the counts, the key's and
    service's names where the user may see them, and TTFT p50/p95 (hourly rows only: percentiles do not add up)."""
    rows = query.filtered(UsageHour.objects.restrict(user), "hour")
    period = F("hour") if query.granularity == "hour" else TruncDay("hour", tzinfo=UTC)
    percentiles = ({"ttft_p50_ms": Sum("ttft_p50_ms"), "ttft_p95_ms": Sum("ttft_p95_ms")}
                   if query.granularity == "hour" else
                   {"ttft_p50_ms": Value(None, FloatField()), "ttft_p95_ms": Value(None, FloatField())})
    rows = list(
        rows.annotate(period=period, tenant_slug=F("tenant__slug"))
        .values("period", "tenant_slug", "key_id", "service_id", "model", "batch")
        .annotate(**{name: Sum(name) for name in COUNTS}, **percentiles)
        .order_by("period", "tenant_slug", "key_id", "service_id", "model", "batch")
    )
    keys = dict(InferenceKey.objects.restrict(user).filter(pk__in={r["key_id"] for r in rows})
                .values_list("pk", "name"))
    services = dict(InferenceService.objects.restrict(user).filter(pk__in={r["service_id"] for r in rows})
                    .values_list("pk", "name"))
    return [{"period": r["period"], "tenant": r["tenant_slug"], "key_id": r["key_id"], "key": keys.get(r["key_id"]),
             "service_id": r["service_id"], "service": services.get(r["service_id"]), "model": r["model"],
             "batch": r["batch"], **{name: r[name] for name in COUNTS}, "ttft_p50_ms": r["ttft_p50_ms"],
             "ttft_p95_ms": r["ttft_p95_ms"]}
            for r in rows]


def ttft_by_hour(user, query: UsageQuery) -> list[dict]:
    """TTFT p50/p95 at the gateway per hour over every request in the query (from the request rows, so
    only as far back as they are kept)."""
    rows = query.filtered(UsageRow.objects.restrict(user), "at").filter(ttft_ms__isnull=False)
    return list(rows.annotate(period=TruncHour("at", tzinfo=UTC)).values("period")
                .annotate(p50=Percentile("ttft_ms", 0.5), p95=Percentile("ttft_ms", 0.95)).order_by("period"))


def month_use(user, key_ids, now: datetime | None = None) -> dict[int, int]:
    """Tokens each key used this calendar month (UTC), from the hourly rollup (as fresh as its last pass)."""
    start = month_start(now or timezone.now())
    totals = (UsageHour.objects.restrict(user).filter(key_id__in=list(key_ids), hour__gte=start).values("key_id")
              .annotate(prompt=Sum("prompt_tokens"), completion=Sum("completion_tokens")).order_by())
    return {row["key_id"]: row["prompt"] + row["completion"] for row in totals}


def gateway_view(service_id: int, now: datetime | None = None) -> dict | None:
    """A service as the gateway saw it over the last 24 hours: requests, 5xx, 429s (hourly rollup) and TTFT
    p50/p95 at the door (request rows); None when no request came through the gateway."""
    now = now or timezone.now()
    since = now - timedelta(hours=24)
    counts = UsageHour.objects.filter(service_id=service_id, hour__gte=hour_start(since)).aggregate(
        requests=Sum("requests"), errors=Sum("errors"), rate_limited=Sum("rate_limited"))
    ttft = UsageRow.objects.filter(service_id=service_id, at__gte=since, ttft_ms__isnull=False).aggregate(
        p50=Percentile("ttft_ms", 0.5), p95=Percentile("ttft_ms", 0.95))
    if not counts["requests"] and ttft["p50"] is None:
        return None
    return {**{name: value or 0 for name, value in counts.items()}, "ttft_p50_ms": ttft["p50"],
            "ttft_p95_ms": ttft["p95"]}


NOW_MINUTES = 5


def at_the_door(user, minutes: int = NOW_MINUTES) -> dict:
    """The gateway's last `minutes` as `user` may see them (staff: every tenant), from the request rows:
    requests per second, 429s, 5xx, and the latency the gateway added (p50/p95 of forwarded requests)."""
    since = timezone.now() - timedelta(minutes=minutes)
    figures = UsageRow.objects.restrict(user).filter(at__gte=since).aggregate(
        requests=Count("id"), rate_limited=Count("id", filter=Q(status=429)),
        errors=Count("id", filter=Q(status__gte=500)),
        added_p50_ms=Percentile("added_ms", 0.5), added_p95_ms=Percentile("added_ms", 0.95))
    return {**figures, "minutes": minutes, "per_second": figures["requests"] / (minutes * 60)}
