"""Drift: the tokens the gateway metered for a service, hour by hour, against the tokens its engines
counted themselves (vLLM's `vllm:prompt_tokens_total` + `vllm:generation_tokens_total`, SGLang's
equivalents), as telemetry stores them: per-second rates of those counters' increments in one-minute
rows, so a minute's tokens are (prompt_tps + gen_tps) × 60.

Engines counting more than the gateway means traffic that bypassed it (someone calling an engine
directly) or metering that was lost; the gateway counting more means engine counters that were not
scraped. Only whole hours are compared (both rollups are final by then), and only hours whose minutes the
engine telemetry covers almost entirely; a gap over WARN_RATIO of the engines' count is a warning.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db.models import Count, F, FloatField, Sum
from django.db.models.functions import Coalesce, TruncHour
from django.utils import timezone

from apps.gateway.models import UsageHour
from apps.gateway.rollup import hour_start
from apps.telemetry.choices import Resolution
from apps.telemetry.models import SERVICE_ROLE, SeriesPoint

WARN_RATIO = 0.01
MIN_TOKENS = 1000  # below this in an hour, a gap of a few tokens is not worth a warning
MIN_COVERAGE = 0.95  # the share of an hour's minutes with engine figures needed to judge it


@dataclass(frozen=True)
class HourDrift:
    hour: datetime
    metered: int
    engine: int
    coverage: float  # minutes of the hour with engine figures / 60

    @property
    def gap(self) -> int:
        return self.engine - self.metered

    @property
    def ratio(self) -> float | None:
        return self.gap / self.engine if self.engine else None

    @property
    def judged(self) -> bool:
        return self.coverage >= MIN_COVERAGE and max(self.engine, self.metered) >= MIN_TOKENS

    @property
    def warning(self) -> bool:
        return self.judged and abs(self.gap) > WARN_RATIO * max(self.engine, self.metered)


def drift(service_ids, *, hours: int = 24, now: datetime | None = None) -> dict[int, list[HourDrift]]:
    """Per service, the last `hours` whole hours with any tokens metered or counted, oldest first."""
    ids = list(service_ids)
    end = hour_start(now or timezone.now())
    start = end - timedelta(hours=hours)
    metered = {(row["service_id"], row["hour"]): row["tokens"] for row in
               UsageHour.objects.filter(service_id__in=ids, hour__gte=start, hour__lt=end)
               .values("service_id", "hour").annotate(tokens=Sum(F("prompt_tokens") + F("completion_tokens")))
               .order_by()}
    per_minute = (Coalesce("prompt_tps", 0.0, output_field=FloatField())
                  + Coalesce("gen_tps", 0.0, output_field=FloatField())) * 60
    engine = {(row["service_id"], row["hour"]): (row["tokens"], row["minutes"]) for row in
              SeriesPoint.objects.filter(service_id__in=ids, role=SERVICE_ROLE, resolution=Resolution.MINUTE,
                                         time__gte=start, time__lt=end)
              .annotate(hour=TruncHour("time", tzinfo=UTC)).values("service_id", "hour")
              .annotate(tokens=Sum(per_minute), minutes=Count("pk")).order_by()}
    result: dict[int, list[HourDrift]] = {service_id: [] for service_id in ids}
    for service_id, hour in sorted(set(metered) | set(engine), key=lambda pair: (pair[0], pair[1])):
        tokens, minutes = engine.get((service_id, hour), (0.0, 0))
        result[service_id].append(HourDrift(hour=hour, metered=int(metered.get((service_id, hour), 0)),
                                            engine=round(tokens or 0), coverage=min(1.0, minutes / 60)))
    return result


def warnings(service_ids, **options) -> dict[int, list[HourDrift]]:
    """Only the services with a drift warning, and only their hours that warn."""
    found = {sid: [h for h in hours if h.warning] for sid, hours in drift(service_ids, **options).items()}
    return {sid: hours for sid, hours in found.items() if hours}
