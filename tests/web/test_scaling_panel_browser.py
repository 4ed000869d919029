"""The Scaling panel in headless Chromium: new decisions appear (held ones folded into a count) and become
markers on the replica chart, without a reload."""

from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils import timezone
from playwright.sync_api import expect

from apps.autoscaling.models import PoolAutoscalerState
from apps.gateway.models import UsageRow
from tests.factories import InferenceServiceFactory
from tests.web.conftest import browser_page, point  # noqa: F401 (the Chromium fixture)
from tests.web.test_scaling_panel import BUILTIN, decide


@pytest.mark.browser
def test_the_scaling_panel_updates_without_a_reload(browser_page, live_server, viewer_a, tenant_a):  # noqa: F811
    service = InferenceServiceFactory(tenant=tenant_a, name="chat", phase="Ready", autoscaling=BUILTIN)
    point(service, 60, ready_replicas=1)
    point(service, 1, ready_replicas=2)
    decide(service, 50, current=1, desired=2, reason="waiting 9.0 per replica > target 4 (×2.25) → 2 replicas")
    page = browser_page(viewer_a)
    page.goto(live_server.url + reverse("web:service", args=[service.tenant.slug, service.name]) + "?tab=scaling")
    expect(page.locator("#scaling-timeline li")).to_have_count(1, timeout=30000)
    page.evaluate("window.loadedOnce = true")

    decide(service, 20, action="held", current=2, desired=2, reason="held at 2")
    decide(service, 10, action="held", current=2, desired=2, reason="held at 2")
    decide(service, 2, current=2, desired=4, reason="TTFT p95 3 s > target 2 s (×1.50) → 4 replicas")

    expect(page.locator("#scaling-timeline li")).to_have_count(3, timeout=30000)
    expect(page.locator("#scaling-timeline li").nth(0)).to_contain_text("2 → 4")
    expect(page.locator("#scaling-timeline li").nth(1)).to_contain_text("held ×2")
    assert page.evaluate("window.loadedOnce") is True  # the same document: no reload happened
    # The replica chart (under Traffic) picks the two scaling decisions up as markers at the counts they asked for.
    page.locator("#tab-traffic").click()
    page.wait_for_function(
        "() => { const d = document.getElementById('chart-replicas').data;"
        " return d && d.length === 2 && d[1].y.length === 2; }", timeout=30000)
    assert page.evaluate("document.getElementById('chart-replicas').data[1].y") == [2, 4]


@pytest.mark.browser
def test_the_replica_chart_shows_the_forecast_band_ahead_of_the_ready_replicas(browser_page, live_server,  # noqa: F811
                                                                              viewer_a, tenant_a):
    service = InferenceServiceFactory(tenant=tenant_a, name="chat", phase="Ready", autoscaling=BUILTIN)
    point(service, 60, ready_replicas=2)
    point(service, 1, ready_replicas=2)
    now = timezone.now().timestamp()
    # Forecasts made 45 s and 15 s ago for a cold start (30 s) ahead: due 15 s ago and 15 s from now.
    PoolAutoscalerState.objects.create(service=service, pool="engine", history={"forecast": {
        "level": 5200.0, "trend": 300.0, "band": [[now - 15, 2, 3, 4, True], [now + 15, 3, 4, 6, True]]}})
    decide(service, 15, current=2, desired=4, reason="forecast 6.2 req/s, 9000 prompt tokens/s in 30 s → 4 "
                                                     "replica(s) (cold start 28 s) → 4 replicas")
    page = browser_page(viewer_a)
    page.goto(live_server.url + reverse("web:service", args=[service.tenant.slug, service.name]) + "?tab=traffic")
    page.wait_for_function(
        "() => { const d = document.getElementById('chart-replicas').data;"
        " return d && d.some((t) => t.name === 'forecast (engine)'); }", timeout=30000)
    traces = page.evaluate("document.getElementById('chart-replicas').data.map((t) => [t.name, t.y, t.fill || ''])")
    by_name = {}
    for name, y, fill in traces:
        by_name.setdefault(name, []).append((y, fill))
    assert by_name["forecast (engine)"] == [([3, 4], "")]
    # The band: its upper edge, then its lower edge filled up to it.
    assert by_name["forecast (engine) band"] == [([4, 6], ""), ([2, 3], "tonexty")]
    assert by_name["decisions"] == [([4], "")]
    expect(page.locator("#scaling-timeline li").nth(0)).to_contain_text("forecast 6.2 req/s")
    # A request metered at the gateway since: the panel's next refresh reports the hour's attainment.
    UsageRow.objects.create(tenant=tenant_a, at=timezone.now(), service_id=service.pk, model="chat", status=200,
                            ttft_ms=400, duration_ms=1400, prompt_tokens=200, completion_tokens=11)
    expect(page.locator("#scaling-attainment")).to_contain_text(
        "SLO attainment, last hour at the gateway (1 request): TTFT within the budget", timeout=30000)
    # The forecast runs ahead of the replicas: its last point is later than the newest ready-replicas row.
    latest = page.evaluate("(() => { const d = document.getElementById('chart-replicas').data;"
                           " const f = d.find((t) => t.name === 'forecast (engine)');"
                           " return [Date.parse(f.x[f.x.length - 1]), Date.parse(d[0].x[d[0].x.length - 1])]; })()")
    assert latest[0] > latest[1]
