"""Filters that format telemetry figures for people: `{{ point.ttft_p95|ms }}`, `{{ point.kv_usage|pct }}`."""

from django import template
from django.utils import timezone
from django.utils.dateparse import parse_datetime

register = template.Library()
DASH = "–"


@register.filter
def ms(seconds):
    """Seconds as milliseconds (one decimal under 100 ms); a dash when there is no figure."""
    if seconds is None or seconds == "":
        return DASH
    value = float(seconds) * 1000
    return f"{value:.1f} ms" if value < 100 else f"{value:,.0f} ms"


@register.filter
def pct(ratio):
    """A 0-1 ratio as a percentage; a dash when there is no figure."""
    if ratio is None or ratio == "":
        return DASH
    return f"{float(ratio) * 100:.1f} %"


@register.filter
def num(value):
    """A count or rate with at most one decimal; a dash when there is no figure."""
    if value is None or value == "":
        return DASH
    value = float(value)
    return f"{value:,.0f}" if value.is_integer() or abs(value) >= 100 else f"{value:,.1f}"


@register.filter
def get_item(mapping, key):
    """`mapping[key]`, or None: for dicts keyed by a variable (pool role)."""
    return (mapping or {}).get(key)


def human_duration(seconds: float) -> str:
    """A duration as kubectl prints ages ("45s", "2m30s", "5h", "3d4h"), from apimachinery's HumanDuration."""
    if seconds < 0:
        return "0s"
    s = int(seconds)
    minutes, hours, days = s // 60, s // 3600, s // 86400
    if s < 120:
        return f"{s}s"
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    if hours < 24 * 365 * 2:
        return f"{days}d"
    years = days // 365
    return f"{years}y{days % 365}d" if hours < 24 * 365 * 8 and days % 365 else f"{years}y"


@register.filter
def age(when, now=None):
    """How long ago an ISO 8601 time (or datetime) was, as kubectl's LAST SEEN column; a dash without one."""
    moment = parse_datetime(when) if isinstance(when, str) else when
    if moment is None:
        return DASH
    return human_duration(((now or timezone.now()) - moment).total_seconds())
