"""The service page in headless Chromium: the TTFT figure and chart follow new series rows without a reload."""

from __future__ import annotations

import pytest
from django.urls import reverse
from playwright.sync_api import expect

from apps.serving.models import InferenceService
from tests.factories import InferenceServiceFactory
from tests.web.conftest import point


@pytest.mark.browser
def test_ttft_figure_on_the_service_page_changes_without_a_reload(browser_page, live_server, viewer_a, tenant_a):
    service = InferenceServiceFactory(tenant=tenant_a, name="chat", phase="Ready")
    point(service, 20, ttft_p50=0.1, ttft_p95=0.2, kv_usage=0.3, ready_replicas=1)
    page = browser_page(viewer_a)

    page.goto(live_server.url + reverse("web:service", args=[service.tenant.slug, service.name]) + "?tab=traffic")
    expect(page.locator("#ttft-p95-now")).to_have_text("200 ms", timeout=15000)
    page.evaluate("window.loadedOnce = true")
    points_before = page.evaluate("document.getElementById('chart-ttft').data[1].y.length")

    point(service, 0, ttft_p50=0.3, ttft_p95=0.75, kv_usage=0.6, ready_replicas=2)

    expect(page.locator("#ttft-p95-now")).to_have_text("750 ms", timeout=15000)
    assert page.evaluate("window.loadedOnce") is True  # the same document: no reload happened
    assert page.evaluate("document.getElementById('chart-ttft').data[1].y") == pytest.approx(
        [200.0, 750.0], rel=1e-6)
    assert points_before == 1
    assert page.evaluate("document.getElementById('chart-replicas').data[0].y") == [1, 2]


@pytest.mark.browser
def test_the_range_selector_asks_for_a_longer_window(browser_page, live_server, viewer_a, tenant_a):
    service = InferenceServiceFactory(tenant=tenant_a, name="chat")
    point(service, 2 * 3600, ttft_p95=0.5)  # two hours ago: outside 15m, inside 6h
    point(service, 10, ttft_p95=0.25)
    page = browser_page(viewer_a)
    page.goto(live_server.url + reverse("web:service", args=[service.tenant.slug, service.name]) + "?tab=traffic")
    expect(page.locator("#series-note")).to_contain_text("1 points", timeout=15000)

    page.select_option("#range", "6h")

    expect(page.locator("#series-note")).to_contain_text("2 points", timeout=15000)


@pytest.mark.browser
def test_status_and_phase_follow_the_reconciler_without_a_reload(browser_page, live_server, viewer_a, tenant_a):
    service = InferenceServiceFactory(tenant=tenant_a, name="chat", phase="Deploying")
    page = browser_page(viewer_a)
    page.goto(live_server.url + reverse("web:service", args=[service.tenant.slug, service.name]))
    expect(page.locator("#phase")).to_have_text("Deploying")
    page.evaluate("window.loadedOnce = true")

    advice = "needs 2 × NVIDIA-L4 per replica; 0 of 4 L4 nodes have 2 free"
    InferenceService.objects.filter(pk=service.pk).update(phase="Failed", conditions=[
        {"type": "Schedulable", "status": "False", "reason": "Unschedulable", "message": advice,
         "lastTransitionTime": ""}])

    # The summary at the top arrives out of band with the status poll; the conditions table in place.
    expect(page.locator("#phase")).to_have_text("Failed", timeout=15000)
    expect(page.locator("#service-summary .advice")).to_contain_text(advice)
    expect(page.locator("#service-status")).to_contain_text("Unschedulable")
    assert page.evaluate("window.loadedOnce") is True
