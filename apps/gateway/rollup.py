"""The hourly rollup of usage rows, and their retention.

An hour's rollup is recomputed whole, so running it twice (or after late rows from a gateway's spool
arrived) gives the same answer instead of counting twice. `roll_up_recent` (beat, every
GATEWAY_ROLLUP_SECONDS) recomputes the current hour, the GATEWAY_ROLLUP_LATE_HOURS before it, and every
older hour holding rows but no rollup yet (after the workers were down); `prune` then deletes request rows
past TELEMETRY_RAW_RETENTION_HOURS and hourly rows past TELEMETRY_ROLLUP_RETENTION_DAYS (the telemetry
rules), never an hour of the current calendar month, whose budgets are counted from them.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Max, Min
from django.utils import timezone

from apps.gateway.models import UsageBatch, UsageHour, UsageRow

HOUR = timedelta(hours=1)
# Only the two table names are interpolated (from model metadata); every value is a parameter.
_COLUMNS = ("hour, tenant_id, key_id, service_id, model, batch, requests, errors, rate_limited, "
            "prompt_tokens, cached_tokens, completion_tokens, ttft_p50_ms, ttft_p95_ms")
_AGGREGATES = ("%s, tenant_id, key_id, service_id, model, batch_id IS NOT NULL, count(*), "
               "count(*) FILTER (WHERE status >= 500), "
               "count(*) FILTER (WHERE status = 429), coalesce(sum(prompt_tokens), 0), "
               "coalesce(sum(cached_tokens), 0), coalesce(sum(completion_tokens), 0), "
               "percentile_cont(0.5) WITHIN GROUP (ORDER BY ttft_ms), "
               "percentile_cont(0.95) WITHIN GROUP (ORDER BY ttft_ms)")
_ROLLUP_SQL = (
    f"INSERT INTO {UsageHour._meta.db_table} ({_COLUMNS}) SELECT {_AGGREGATES} "  # noqa: S608
    f"FROM {UsageRow._meta.db_table} WHERE at >= %s AND at < %s GROUP BY tenant_id, key_id, service_id, model, "
    "batch_id IS NOT NULL"
)


def hour_start(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def month_start(moment: datetime) -> datetime:
    return hour_start(moment).replace(day=1, hour=0)


def rollup_hour(moment: datetime) -> int:
    """Replace the rollup of the hour containing `moment`; returns how many rollup rows it holds now."""
    start = hour_start(moment)
    with transaction.atomic():
        UsageHour.objects.filter(hour=start).delete()
        with connection.cursor() as cursor:
            cursor.execute(_ROLLUP_SQL, [start, start, start + HOUR])
            return cursor.rowcount


def hours_to_roll_up(now: datetime) -> list[datetime]:
    """The current hour, the late-row margin before it, and older hours with rows but no rollup."""
    current = hour_start(now)
    first = current - settings.GATEWAY_ROLLUP_LATE_HOURS * HOUR
    # Never an hour whose rows retention may have pruned: recomputing it would erase its rollup.
    first = max(first, hour_start(now - timedelta(hours=settings.TELEMETRY_RAW_RETENTION_HOURS)) + HOUR)
    last_rolled = UsageHour.objects.aggregate(h=Max("hour"))["h"]
    unrolled = UsageRow.objects.filter(at__gte=last_rolled + HOUR) if last_rolled else UsageRow.objects.all()
    oldest = unrolled.filter(at__lt=first).aggregate(t=Min("at"))["t"]
    if oldest is not None:
        first = hour_start(oldest)
    hours = []
    while first <= current:
        hours.append(first)
        first += HOUR
    return hours


def prune(now: datetime) -> dict[str, int]:
    keep_from = month_start(now)
    # Request rows go only once their hour is rolled up (every hour before the current one is, by now).
    rows_cutoff = min(now - timedelta(hours=settings.TELEMETRY_RAW_RETENTION_HOURS), hour_start(now))
    hours_cutoff = min(now - timedelta(days=settings.TELEMETRY_ROLLUP_RETENTION_DAYS), keep_from)
    return {"usage_rows": UsageRow.objects.filter(at__lt=rows_cutoff).delete()[0],
            "usage_hours": UsageHour.objects.filter(hour__lt=hours_cutoff).delete()[0],
            # Markers a gateway's crash left behind (it deletes its own once their segment file is gone).
            "usage_batches": UsageBatch.objects.filter(
                at__lt=now - timedelta(days=settings.TELEMETRY_ROLLUP_RETENTION_DAYS)).delete()[0]}


def roll_up_recent(now: datetime | None = None) -> dict[str, int]:
    """The periodic pass: roll up what may have changed, then prune."""
    now = now or timezone.now()
    written = sum(rollup_hour(hour) for hour in hours_to_roll_up(now))
    return {"rolled_up": written, **prune(now)}
