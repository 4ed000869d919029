"""The service page's queue card: what waits at the gateway's door for a service now (per band and tenant,
summed over the replicas' reports in Redis, gateway/door_report.py), how long requests let through waited
(p50/p95) and how many the door shed, by reason, over a chosen window (from the usage rows)."""

from __future__ import annotations

import logging
import math
from datetime import timedelta

import redis
from django.conf import settings
from django.db.models import Count
from django.utils import timezone

from apps.gateway.models import UsageRow
from apps.tenancy.models import Tenant
from gateway.door import QUEUE_FULL, QUEUE_TIMEOUT
from gateway.door_report import QUEUE_PREFIX
from gateway.fairness import BAND_NAMES, LOWEST_BAND

log = logging.getLogger(__name__)
WINDOWS = {"15m": timedelta(minutes=15), "1h": timedelta(hours=1), "24h": timedelta(hours=24)}
DEFAULT_WINDOW = "15m"
SHED_REASONS = (QUEUE_FULL, QUEUE_TIMEOUT)


class BadWindow(ValueError):
    pass


def window_of(value: str | None) -> str:
    """The window asked for, or the default; a value that is none of WINDOWS is refused, naming them."""
    if value in (None, ""):
        return DEFAULT_WINDOW
    if value not in WINDOWS:
        raise BadWindow(f"window must be one of {', '.join(WINDOWS)}, not {value[:20]!r}.")
    return value


def waiting_now(service_id: int) -> dict[tuple[int, str], int] | None:
    """Requests waiting at the gateways for the service per (band, tenant id), or None when that is not known
    (no gateway Redis configured, or it does not answer)."""
    if not settings.GATEWAY_REDIS_URL:
        return None
    found: dict[tuple[int, str], int] = {}
    try:
        client = redis.Redis.from_url(settings.GATEWAY_REDIS_URL, socket_timeout=1, socket_connect_timeout=1)
        for name in client.scan_iter(match=f"{QUEUE_PREFIX}{service_id}:*", count=1000):
            for field, count in client.hgetall(name).items():
                band, _, tenant = field.decode().partition("|")
                found[(int(band), tenant)] = found.get((int(band), tenant), 0) + int(count)
    except (redis.RedisError, ValueError) as exc:
        log.warning("the queue of service %s not read: %s", service_id, exc)
        return None
    return found


def band_label(band: int) -> str:
    if band <= LOWEST_BAND:
        return f"{band} ({' / '.join(BAND_NAMES)})"
    return str(band)


def nearest_rank(rows, fraction: float, count: int) -> float | None:
    """The queued time at `fraction` by nearest rank, read by the database at its offset."""
    if not count:
        return None
    index = max(0, min(count - 1, math.ceil(fraction * count) - 1))
    return rows.order_by("queued_ms").values_list("queued_ms", flat=True)[index]


def queue_card(service, window: str, now=None) -> dict:
    now = now or timezone.now()
    rows = UsageRow.objects.filter(service_id=service.pk, at__gte=now - WINDOWS[window])
    # Requests that waited and were not shed (a shed one's wait is its band's time-to-live, counted apart).
    queued = rows.filter(queued_ms__isnull=False).exclude(shed__in=SHED_REASONS)
    count = queued.count()
    shed = dict(rows.filter(shed__in=SHED_REASONS).values_list("shed").annotate(n=Count("id")).order_by())
    waiting = waiting_now(service.pk)
    names = dict(Tenant.objects.filter(pk__in={int(t) for _, t in waiting or {} if t.isdigit()})
                 .values_list("pk", "name"))
    return {
        "window": window, "windows": list(WINDOWS),
        "waiting": None if waiting is None else [
            {"band": band_label(band), "tenant": names.get(int(t), t) if t.isdigit() else t, "count": n}
            for (band, t), n in sorted(waiting.items(), key=lambda item: (-item[0][0], item[0][1]))],
        "waiting_total": sum((waiting or {}).values()),
        "queued": count,
        "p50_ms": nearest_rank(queued, 0.50, count), "p95_ms": nearest_rank(queued, 0.95, count),
        "shed": sorted(shed.items()), "shed_total": sum(shed.values()),
    }
