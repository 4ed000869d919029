"""The hourly rollup of usage rows: recomputed whole for an hour, so running it twice (or after late rows
from a gateway's spool arrived) gives the same answer instead of counting twice."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import connection, transaction

from apps.gateway.models import UsageHour, UsageRow

# Only the two table names are interpolated (from model metadata); every value is a parameter.
_COLUMNS = ("hour, tenant_id, key_id, service_id, model, requests, errors, rate_limited, "
            "prompt_tokens, cached_tokens, completion_tokens")
_AGGREGATES = ("%s, tenant_id, key_id, service_id, model, count(*), count(*) FILTER (WHERE status >= 500), "
               "count(*) FILTER (WHERE status = 429), coalesce(sum(prompt_tokens), 0), "
               "coalesce(sum(cached_tokens), 0), coalesce(sum(completion_tokens), 0)")
_ROLLUP_SQL = (
    f"INSERT INTO {UsageHour._meta.db_table} ({_COLUMNS}) SELECT {_AGGREGATES} "  # noqa: S608
    f"FROM {UsageRow._meta.db_table} WHERE at >= %s AND at < %s GROUP BY tenant_id, key_id, service_id, model"
)


def hour_start(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def rollup_hour(moment: datetime) -> int:
    """Replace the rollup of the hour containing `moment`; returns how many rollup rows it holds now."""
    start = hour_start(moment)
    with transaction.atomic():
        UsageHour.objects.filter(hour=start).delete()
        with connection.cursor() as cursor:
            cursor.execute(_ROLLUP_SQL, [start, start, start + timedelta(hours=1)])
            return cursor.rowcount
