"""Time charts span the range the person chose, drawn by their JavaScript in Chromium: one hour of usage in the last
24 hours is one hour-wide bar in a 24-hour axis (not a bar across the chart with ticks a millisecond apart), and a
chart with one point or none says so under it. The rollout's chart spans the rollout's own window and the what-if
lab's time plots the whole load, each saying so in words."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse
from django.utils import timezone
from playwright.sync_api import expect

from apps.gateway.models import UsageHour
from apps.rollouts.models import Rollout
from apps.whatif.models import Run, RunStatus
from tests.factories import InferenceServiceFactory
from tests.polling import wait_for
from tests.rollouts.conftest import chat_rolling_out
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


def test_the_rollout_chart_spans_the_rollouts_window_and_says_when_it_has_one_point(
        browser_page, live_server, viewer_a, tenant_a, cluster, catalog_a, owner_a):
    service = chat_rolling_out(tenant_a, cluster, catalog_a, owner_a)
    began = (timezone.now() - timedelta(hours=2)).replace(microsecond=0)
    Rollout.objects.filter(service=service).update(created=began)
    point(service, 30, role="stable", ttft_p95=0.150)  # one row of one revision, 30 s ago
    page = browser_page(viewer_a)
    page.goto(live_server.url + reverse("web:service", args=["alpha", "chat"]) + "?tab=changes")

    # Polled: the page's Content-Security-Policy refuses Playwright's wait_for_function (eval).
    wait_for(lambda: page.evaluate("!!document.getElementById('chart-rollout-ttft').data"), message="the chart")
    # Two hours from the rollout's start to now, not a sliver around the one point.
    start, end, ticks = axis(page, "chart-rollout-ttft")
    assert abs(start - began) < timedelta(seconds=1), (start, began)
    assert abs(end - timezone.now()) < timedelta(seconds=30)
    assert not any("." in t for t in ticks), ticks
    window = f"the rollout's window, {began:%Y-%m-%d %H:%M} UTC to now"
    expect(page.locator("#chart-rollout-ttft-note")).to_have_text(
        f"One point in {window}: too few to draw a line; the chart still spans {window}.")
    expect(page.locator("#rollout-chart-span")).to_have_text(f"The chart spans {window}.")

    # A rollout that is over: the axis ends where it ended, and the words say when (the one row is after it).
    began, ended = datetime(2026, 11, 30, 9, 15, tzinfo=UTC), datetime(2026, 11, 30, 10, 45, tzinfo=UTC)
    Rollout.objects.filter(service=service).update(created=began, finished_at=ended)
    window = "the rollout's window, 2026-11-30 09:15 to 10:45 UTC"
    expect(page.locator("#rollout-chart-span")).to_have_text(f"The chart spans {window}.", timeout=15000)
    expect(page.locator("#chart-rollout-ttft-note")).to_have_text(f"No data in {window}.")
    start, end, _ = axis(page, "chart-rollout-ttft")
    assert abs(start - began) < timedelta(seconds=1) and abs(end - ended) < timedelta(seconds=1), (start, end)


def finished_run(service, *, duration_s: float, timeline: list[tuple[float, int, float]]) -> Run:
    """A finished what-if run of two scenarios with the same `timeline` (t in s, replicas, TTFT p95 in s)."""
    def scenario(name):
        return {"name": name, "gpu_type": "l4-24gb", "gpu_hours": 0.5, "slo_attainment": 0.9, "tokens": 1000,
                "changes": {}, "timeline": [{"t": t, "replicas": n, "ttft_p95_s": p} for t, n, p in timeline]}
    return Run.objects.create(service=service, cpu_budget_s=30, status=RunStatus.SUCCEEDED,
                              result={"scenarios": [scenario("current"), scenario("two replicas")],
                                      "requests": 40, "duration_s": duration_s, "source": "trace hour"})


def lab_axis(page, chart_id: str) -> list[float]:
    return page.evaluate(f"document.getElementById('{chart_id}')._fullLayout.xaxis.range")


def test_the_labs_time_plots_span_the_whole_load_and_say_when_they_have_one_point(
        browser_page, live_server, owner_a, tenant_a):
    service = InferenceServiceFactory(tenant=tenant_a, name="chat")
    # An hour of load whose timeline was only kept for its first two periods: the plots still span the hour.
    run = finished_run(service, duration_s=3600, timeline=[(0, 1, 0.2), (300, 2, 0.3)])
    page = browser_page(owner_a)
    lab = live_server.url + reverse("web:lab", args=["alpha", "chat"])
    page.goto(f"{lab}?run={run.pk}")
    expect(page.locator("#chart-lab-replicas .xtick text").first).to_be_visible()
    for chart in ("chart-lab-replicas", "chart-lab-ttft"):
        assert lab_axis(page, chart) == [0, 60]
        expect(page.locator(f"#{chart}-note")).to_be_hidden()

    one = finished_run(service, duration_s=150, timeline=[(0, 1, 0.2)])
    page.goto(f"{lab}?run={one.pk}")
    expect(page.locator("#chart-lab-ttft-note")).to_have_text(
        "One point in the load's 2m30s: too few to draw a line; the chart still spans the load's 2m30s.")
    assert lab_axis(page, "chart-lab-ttft") == [0, 2.5]

    none = finished_run(service, duration_s=150, timeline=[])
    page.goto(f"{lab}?run={none.pk}")
    expect(page.locator("#chart-lab-replicas-note")).to_have_text("No data in the load's 2m30s.")
    assert lab_axis(page, "chart-lab-replicas") == [0, 2.5]
