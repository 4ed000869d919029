"""The "TTFT p95 now" figure above the charts comes from the chart's own series: the newest value when it
is recent, the last one named with its age when it is not, and "no data" when the chart has none; a lone
point on a chart is drawn as a marker, so the chart never looks empty while the header shows a figure."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse
from playwright.sync_api import expect

from apps.web.services import now_figure
from tests.factories import InferenceServiceFactory
from tests.web.conftest import point

UNTIL = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


def payload(step, *rows):
    """A series payload ending at UNTIL; rows are (seconds before UNTIL, ttft_p95)."""
    return {"step": step, "until": UNTIL, "time": [UNTIL - timedelta(seconds=s) for s, _ in rows],
            "ttft_p95": [v for _, v in rows]}


def test_the_newest_recent_value_is_now():
    figure = now_figure(payload(5, (30, 0.2), (10, 0.0951), (5, None)), "ttft_p95")
    assert (figure["value"], figure["recent"], figure["text"]) == (0.0951, True, "95.1 ms")


def test_an_old_value_is_named_as_the_last_with_its_age():
    figure = now_figure(payload(5, (630, 0.095), (60, None), (5, None)), "ttft_p95")
    assert (figure["recent"], figure["text"]) == (False, "no data now (last 95.0 ms, 10m ago)")


def test_a_long_range_counts_the_last_bucket_as_now():
    # A 30-day chart in one-hour buckets: the last bucket starts up to an hour before the window's end.
    assert now_figure(payload(3600, (7200, 1.5), (3000, 0.25)), "ttft_p95")["text"] == "250 ms"


def test_no_value_in_the_window_is_no_data():
    assert now_figure(payload(5, (20, None), (5, None)), "ttft_p95")["text"] == "no data"
    assert now_figure(payload(5), "ttft_p95") == {"value": None, "time": None, "recent": False, "text": "no data"}


@pytest.mark.browser
def test_a_woken_serverless_service_shows_its_lone_point_and_no_current_figure(browser_page, live_server, viewer_a,
                                                                              tenant_a):
    service = InferenceServiceFactory(tenant=tenant_a, name="serverless", phase="Ready")
    point(service, 630, ttft_p95=0.095, ready_replicas=1)  # one request answered while awake, 10m30s ago
    point(service, 600, ready_replicas=1)
    point(service, 20, ready_replicas=0)  # scaled to zero since: rows without a latency
    page = browser_page(viewer_a)
    page.goto(live_server.url + reverse("web:service", args=["alpha", "serverless"]) + "?tab=traffic")
    expect(page.locator("#ttft-p95-now")).to_have_text("no data now (last 95.0 ms, 10m ago)", timeout=15000)
    p95 = page.evaluate("document.getElementById('chart-ttft').data[1]")
    assert p95["name"] == "p95" and p95["y"][0] == pytest.approx(95.0)
    assert p95["marker"]["size"] == [7, 0, 0]  # the lone value is drawn; the empty rows are not


@pytest.mark.browser
def test_a_service_without_figures_says_no_data(browser_page, live_server, viewer_a, tenant_a):
    InferenceServiceFactory(tenant=tenant_a, name="quiet", phase="Ready")
    page = browser_page(viewer_a)
    page.goto(live_server.url + reverse("web:service", args=["alpha", "quiet"]) + "?tab=traffic")
    expect(page.locator("#series-note")).to_contain_text("0 points", timeout=15000)
    expect(page.locator("#ttft-p95-now")).to_have_text("no data")
