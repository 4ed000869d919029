"""Filters that format telemetry figures for people: `{{ point.ttft_p95|ms }}`, `{{ point.kv_usage|pct }}`."""

from django import template

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
