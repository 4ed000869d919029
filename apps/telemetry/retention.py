"""Retention and downsampling of the stored series, run by a periodic task (`workers.tasks.telemetry.compact`).

Raw rows (one per scrape cycle) are rolled up into one-minute rows once the minute has been over for a
full minute (late rows still land), with the merge rules of `series.MERGE`; raw rows older than
`TELEMETRY_RAW_RETENTION_HOURS` and rollups older than `TELEMETRY_ROLLUP_RETENTION_DAYS` are deleted.
Rolling up twice writes nothing new (the unique index turns repeats into no-ops).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Max, Min, OuterRef, Subquery
from django.utils import timezone

from apps.telemetry.choices import Resolution
from apps.telemetry.models import PodStat, RequestMixPoint, RevisionIncrement, ScrapeCycle, SeriesPoint
from apps.telemetry.series import MERGE, SERIES_COLUMNS

_SQL = {"max": "MAX({c})", "avg": "AVG({c})", "sum": "SUM({c})"}
STALE_POD_AFTER = timedelta(hours=1)


def _minute(moment: datetime) -> datetime:
    return moment.replace(second=0, microsecond=0)


def rollup(now: datetime | None = None) -> int:
    """Write one-minute rows for every whole minute not rolled up yet; returns the rows written."""
    now = now or timezone.now()
    until = _minute(now) - timedelta(minutes=1)
    raw = SeriesPoint.objects.filter(resolution=Resolution.RAW)
    last = SeriesPoint.objects.filter(resolution=Resolution.MINUTE).aggregate(t=Max("time"))["t"]
    since = last + timedelta(minutes=1) if last else raw.aggregate(t=Min("time"))["t"]
    if since is None or since >= until:
        return 0
    aggregates = []
    for column in SERIES_COLUMNS:
        expression = _SQL[MERGE[column]].format(c=column)
        if column == "ready_replicas":
            expression = f"ROUND({expression})"
        aggregates.append(expression)
    table = SeriesPoint._meta.db_table
    # Only constant names go into the text (the table, the columns, their merge functions); values are bound.
    sql = (
        f"INSERT INTO {table} (service_id, role, resolution, time, {', '.join(SERIES_COLUMNS)}) "  # noqa: S608
        f"SELECT service_id, role, %s, date_trunc('minute', time) AS minute, {', '.join(aggregates)} "
        f"FROM {table} WHERE resolution = %s AND time >= %s AND time < %s "
        "GROUP BY service_id, role, minute "
        "ON CONFLICT (service_id, role, resolution, time) DO NOTHING"
    )
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, [Resolution.MINUTE, Resolution.RAW, since, until])
        return cursor.rowcount


def prune(now: datetime | None = None) -> dict[str, int]:
    """Delete rows past their retention, pod figures of pods gone for an hour, and old cycle records
    (keeping each cluster's newest, whose running totals the `/metrics` counters continue from)."""
    now = now or timezone.now()
    raw_cutoff = now - timedelta(hours=settings.TELEMETRY_RAW_RETENTION_HOURS)
    rollup_cutoff = now - timedelta(days=settings.TELEMETRY_ROLLUP_RETENTION_DAYS)
    newest = ScrapeCycle.objects.filter(cluster_id=OuterRef("cluster_id")).order_by("-started_at").values("pk")[:1]
    counts = {
        "raw": SeriesPoint.objects.filter(resolution=Resolution.RAW, time__lt=raw_cutoff).delete()[0],
        "rollup": SeriesPoint.objects.filter(resolution=Resolution.MINUTE, time__lt=rollup_cutoff).delete()[0],
        "pods": PodStat.objects.filter(scraped_at__lt=now - STALE_POD_AFTER).delete()[0],
        "cycles": ScrapeCycle.objects.filter(started_at__lt=raw_cutoff)
        .exclude(pk=Subquery(newest)).delete()[0],
    }
    return counts


def compact(now: datetime | None = None) -> dict[str, int]:
    """Roll up, then prune: the periodic retention pass."""
    written = rollup(now)
    raw_cutoff = (now or timezone.now()) - timedelta(hours=settings.TELEMETRY_RAW_RETENTION_HOURS)
    mixes = RequestMixPoint.objects.filter(time__lt=raw_cutoff).delete()[0]
    revisions = RevisionIncrement.objects.filter(time__lt=raw_cutoff).delete()[0]
    return {"rolled_up": written, **prune(now), "request_mix": mixes, "revision_increments": revisions}
