"""Reading and writing the stored series: figure ↔ column mapping, the one rule per column for merging
rows over time (rollups and coarser chart steps), and time-range reads for the page, API and autoscaler.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import models
from django.db.models import Avg, F, Func, Max, Q, Sum, Value
from django.utils import timezone

from apps.telemetry.choices import Resolution
from apps.telemetry.figures import Figures
from apps.telemetry.models import CANARY_ROLE, SERVICE_ROLE, STABLE_ROLE, SeriesPoint

# Figures field → column.
COLUMNS = {
    "ttft_p50_s": "ttft_p50",
    "ttft_p95_s": "ttft_p95",
    "ttft_p99_s": "ttft_p99",
    "itl_p50_s": "itl_p50",
    "itl_p95_s": "itl_p95",
    "kv_cache_usage": "kv_usage",
    "running": "running",
    "waiting": "waiting",
    "prefix_cache_hit_rate": "prefix_hit_rate",
    "prompt_tokens_per_s": "prompt_tps",
    "generation_tokens_per_s": "gen_tps",
    "preemptions": "preemptions",
    "success_rate": "success_rate",
    "cpu_hit_rate": "cpu_hit_rate",
    "cpu_usage": "cpu_usage",
    "cpu_load_tokens_per_s": "cpu_load_tps",
    "spec_acceptance_rate": "spec_accept_rate",
}
FIGURE_COLUMNS = tuple(COLUMNS.values())
SERIES_COLUMNS = (*FIGURE_COLUMNS, "ready_replicas")

# How rows are merged over time. Stored rows keep only quantiles, not buckets, so a longer period's
# latency is the worst interval's quantile in it (an upper bound, never an average of percentiles).
# Gauges and rates are averaged, preemptions (a count per interval) summed.
MERGE = {column: "max" for column in ("ttft_p50", "ttft_p95", "ttft_p99", "itl_p50", "itl_p95")}
MERGE |= {column: "avg" for column in ("kv_usage", "running", "waiting", "prefix_hit_rate", "prompt_tps", "gen_tps")}
MERGE |= {"success_rate": "avg", "preemptions": "sum", "ready_replicas": "avg"}
MERGE |= {column: "avg" for column in ("cpu_hit_rate", "cpu_usage", "cpu_load_tps", "spec_accept_rate")}
_ORM = {"max": Max, "avg": Avg, "sum": Sum}

MAX_POINTS = 720
RANGES = {"5m": 300, "15m": 900, "1h": 3600, "6h": 6 * 3600, "24h": 86400, "7d": 7 * 86400, "30d": 30 * 86400}


def point_values(figures: Figures | None) -> dict:
    """Column values of one row from Figures (all null when there were none)."""
    if figures is None:
        return dict.fromkeys(FIGURE_COLUMNS)
    data = figures.as_dict()
    return {column: data[key] for key, column in COLUMNS.items()}


class DateBin(Func):
    """PostgreSQL `date_bin(step, time, origin)`: the start of the step-long bucket holding `time`."""

    function = "date_bin"
    output_field = models.DateTimeField()


@dataclass(frozen=True)
class SeriesWindow:
    """Which stored rows answer a request: resolution, bucket step (seconds) and time range."""

    resolution: int
    step_s: int
    since: datetime
    until: datetime


def choose_window(since: datetime, until: datetime, step_s: int | None = None) -> SeriesWindow:
    """Raw rows while the range is within their retention (so the newest minutes are there before they are
    rolled up), else one-minute rollups; the step grows so a chart never gets more than MAX_POINTS points."""
    raw_kept = timezone.now() - timedelta(hours=settings.TELEMETRY_RAW_RETENTION_HOURS)
    span = max((until - since).total_seconds(), 1.0)
    natural = settings.TELEMETRY_SCRAPE_SECONDS
    floor = math.ceil(span / MAX_POINTS)
    step = max(step_s or 0, floor, 1)
    resolution = Resolution.RAW if since >= raw_kept else Resolution.MINUTE
    if resolution == Resolution.MINUTE:
        step = max(60, math.ceil(step / 60) * 60)
    elif step <= natural:
        step = natural
    return SeriesWindow(resolution, step, since, until)


def read_series(service_id: int, window: SeriesWindow, role: str = SERVICE_ROLE) -> dict:
    """{"time": [...], column: [...]} for one service (or pool) over the window, oldest first.

    A rollup window ends with the raw rows newer than the service's last rollup (the minutes not rolled
    up yet), binned the same way, so a week-long chart still moves.
    """
    rows = SeriesPoint.objects.filter(service_id=service_id, role=role, time__gte=window.since,
                                      time__lte=window.until)
    if window.resolution == Resolution.MINUTE:
        last = SeriesPoint.objects.filter(service_id=service_id, role=role, resolution=Resolution.MINUTE).aggregate(
            t=Max("time"))["t"]
        cutoff = last + timedelta(minutes=1) if last else window.since
        rows = rows.filter(Q(resolution=Resolution.MINUTE, time__lt=cutoff) | Q(resolution=Resolution.RAW,
                                                                                  time__gte=cutoff))
    else:
        rows = rows.filter(resolution=Resolution.RAW)
    natural = Resolution.MINUTE if window.resolution == Resolution.MINUTE else settings.TELEMETRY_SCRAPE_SECONDS
    if window.step_s > natural or window.resolution == Resolution.MINUTE:
        origin = Value(datetime(2000, 1, 1, tzinfo=UTC))
        rows = (
            rows.annotate(bucket=DateBin(Value(timedelta(seconds=window.step_s)), F("time"), origin))
            .values("bucket")
            .annotate(**{f"m_{c}": _ORM[MERGE[c]](c) for c in SERIES_COLUMNS})
            .order_by("bucket")
        )
        data = list(rows)
        out = {"time": [r["bucket"] for r in data]}
        out |= {c: [_finite(r[f"m_{c}"]) for r in data] for c in SERIES_COLUMNS}
        return out
    data = list(rows.order_by("time").values_list("time", *SERIES_COLUMNS))
    out = {"time": [r[0] for r in data]}
    out |= {c: [_finite(r[i + 1]) for r in data] for i, c in enumerate(SERIES_COLUMNS)}
    return out


def _finite(value):
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def latest_points(service_ids, since: datetime | None = None) -> dict[int, SeriesPoint]:
    """The newest raw whole-service row of each service (one query), optionally no older than `since`.

    Latency quantiles are null in an interval where no request got its first token (an idle or bursty
    service), so a null TTFT p95 is filled from the newest row since `since` that has one (one more query).
    """
    rows = SeriesPoint.objects.filter(service_id__in=service_ids, role=SERVICE_ROLE, resolution=Resolution.RAW)
    if since is not None:
        rows = rows.filter(time__gte=since)
    latest = {row.service_id: row for row in rows.order_by("service_id", "-time").distinct("service_id")}
    gaps = [sid for sid, row in latest.items() if row.ttft_p95 is None]
    if gaps:
        filled = (rows.filter(service_id__in=gaps, ttft_p95__isnull=False).order_by("service_id", "-time")
                  .distinct("service_id").values_list("service_id", "ttft_p95"))
        for service_id, value in filled:
            latest[service_id].ttft_p95 = value
    return latest


# --- Requests for a series: `since`, `step` and the payload the page and the API return ----------------

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
# ASCII digits only: `str.isdigit()` also accepts "²", which `int()` then refuses.
_DURATION = re.compile(r"([0-9]{1,12})([smhd]?)")
# Longer than any range that is kept, short enough that no date arithmetic overflows.
MAX_DURATION_S = 3650 * 86400


class BadSeriesQuery(ValueError):
    """A `since`, `until` or `step` that cannot be read; the message says what is accepted."""


def parse_duration(text: str, name: str) -> int:
    """Seconds from `300`, `300s`, `15m`, `2h` or `7d` (at most ten years)."""
    match = _DURATION.fullmatch(text.strip().lower())
    seconds = int(match[1]) * _UNITS[match[2] or "s"] if match else 0
    if seconds <= 0:
        raise BadSeriesQuery(f"{name} must be a positive duration such as 300, 90s, 15m, 2h or 7d")
    if seconds > MAX_DURATION_S:
        raise BadSeriesQuery(f"{name} must be a duration of at most {MAX_DURATION_S // 86400} days")
    return seconds


def parse_moment(text: str, name: str, now: datetime) -> datetime:
    """An ISO 8601 time (UTC when no offset is given) or a duration back from now (`15m`)."""
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        try:
            return now - timedelta(seconds=parse_duration(text, name))
        except BadSeriesQuery as exc:
            if "at most" in str(exc):
                raise
            raise BadSeriesQuery(f"{name} must be an ISO 8601 time or a duration back from now such as 15m") from None
    try:
        # In UTC, as the database compares it; a time near year 1 or 9999 may not exist there.
        return moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)
    except OverflowError:
        raise BadSeriesQuery(f"{name} is outside the range of times that can be stored") from None


def window_from_query(params, now: datetime | None = None) -> SeriesWindow:
    """The window a request asks for: `since` (default 15m), `until` (default now), `step` (optional)."""
    now = now or timezone.now()
    since = parse_moment(params.get("since") or "15m", "since", now)
    until = parse_moment(params["until"], "until", now) if params.get("until") else now
    if since >= until:
        raise BadSeriesQuery("since must be earlier than until")
    if until - since > timedelta(days=settings.TELEMETRY_ROLLUP_RETENTION_DAYS):
        raise BadSeriesQuery(f"since is more than {settings.TELEMETRY_ROLLUP_RETENTION_DAYS} days before until: "
                             f"at most {settings.TELEMETRY_ROLLUP_RETENTION_DAYS} days of series are kept")
    step = parse_duration(params["step"], "step") if params.get("step") else None
    return choose_window(since, until, step)


def role_from_query(params) -> str:
    """`role`: a pool of a multi-pool service, one revision during a canary rollout (`stable`, `canary`), or the
    whole service when left out."""
    from apps.serving.choices import PoolRole

    roles = [*PoolRole.values, STABLE_ROLE, CANARY_ROLE]
    role = params.get("role") or SERVICE_ROLE
    if role != SERVICE_ROLE and role not in roles:
        raise BadSeriesQuery(f"role must be one of {', '.join(roles)}, or left out")
    return role


def series_payload(service_id: int, window: SeriesWindow, role: str = SERVICE_ROLE) -> dict:
    """The JSON the service page charts and `GET /api/v1/services/{id}/metrics/` return."""
    data = read_series(service_id, window, role)
    return {
        "service": service_id,
        "role": role,
        "resolution": Resolution(window.resolution).name.lower(),
        "step": window.step_s,
        "since": window.since,
        "until": window.until,
        **data,
    }
