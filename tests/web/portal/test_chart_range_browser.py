"""Time charts span the range the person chose, drawn by their JavaScript in Chromium: one hour of usage in the last
24 hours is one hour-wide bar in a 24-hour axis (not a bar across the chart with ticks a millisecond apart), and a
chart with one point or none says so under it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse
from django.utils import timezone
from playwright.sync_api import expect

from apps.gateway.models import UsageHour
from tests.factories import InferenceServiceFactory
from tests.web.conftest import point

pytestmark = pytest.mark.browser


def axis(page, chart_id: str) -> tuple[datetime, datetime, list[str]]:
    """The chart's x-axis range as drawn, and its tick labels as shown."""
    start, end = page.evaluate(f"document.getElementById('{chart_id}')._fullLayout.xaxis.range")
    ticks = page.evaluate(f"[...document.querySelectorAll('#{chart_id} .xtick text')].map(t => t.textContent)")
    return parse(start), parse(end), ticks


def parse(plotly_time: str) -> datetime:
    # Plotly writes dates as "2026-12-06 21:00" or with seconds and fractions; the axis is UTC.
    return datetime.fromisoformat(plotly_time).replace(tzinfo=UTC)


def test_one_hour_of_usage_is_drawn_in_the_chosen_24_hours(browser_page, live_server, owner_a, tenant_a):
    hour = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=3)
    UsageHour.objects.create(hour=hour, tenant=tenant_a, model="chat", requests=4, prompt_tokens=200,
                             completion_tokens=50)
    page = browser_page(owner_a)
    page.goto(live_server.url + reverse("web:usage", args=["alpha"]))
    expect(page.locator("#chart-tokens-by-key .xtick text").first).to_be_visible()

    # The range ends after the current hour and starts 24 hours before that.
    end = timezone.now().replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    start, drawn_end, ticks = axis(page, "chart-tokens-by-key")
    assert (start, drawn_end) == (end - timedelta(hours=24), end)
    assert len(ticks) >= 4 and not any("." in t for t in ticks), ticks  # hours, not fractions of a second
    # The bar covers its hour: one hour of the axis' 24, about 1/24 of the plot's width.
    bar = page.locator("#chart-tokens-by-key .bars path").first.bounding_box()
    plot = page.locator("#chart-tokens-by-key .nsewdrag").first.bounding_box()
    assert bar["width"] == pytest.approx(plot["width"] / 24, rel=0.1)
    expect(page.locator("#chart-tokens-by-key-note")).to_have_text(
        "One point in the last 24h: too few to draw a line; the chart still spans the last 24h.")

    page.select_option("#usage-range", "7d")
    page.locator("#usage-filters button[type=submit]").click()
    expect(page.locator("#usage-range")).to_have_value("7d")
    start, drawn_end, _ = axis(page, "chart-requests")
    assert drawn_end - start == timedelta(days=7)


def test_service_charts_span_the_chosen_range_and_say_when_they_have_one_point(
        browser_page, live_server, viewer_a, tenant_a):
    service = InferenceServiceFactory(tenant=tenant_a, name="chat")
    point(service, 10, ttft_p50=0.1, ttft_p95=0.2, ready_replicas=1)
    page = browser_page(viewer_a)
    page.goto(live_server.url + reverse("web:service", args=["alpha", "chat"]) + "?tab=traffic")
    expect(page.locator("#chart-ttft-note")).to_have_text(
        "One point in the last 15m: too few to draw a line; the chart still spans the last 15m.", timeout=15000)
    start, end, _ = axis(page, "chart-ttft")
    assert end - start == pytest.approx(timedelta(minutes=15), abs=timedelta(seconds=1))
    assert abs(end - timezone.now()) < timedelta(seconds=30)
    # The KV charts have no figure at all.
    expect(page.locator("#chart-kv-loads-note")).to_have_text("No data in the last 15m.")

    page.select_option("#range", "6h")
    expect(page.locator("#chart-ttft-note")).to_contain_text("the last 6h", timeout=15000)
    start, end, _ = axis(page, "chart-ttft")
    assert end - start == pytest.approx(timedelta(hours=6), abs=timedelta(seconds=1))
