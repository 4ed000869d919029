"""The service page in headless Chromium: the TTFT figure and chart follow new series rows without a reload."""

from __future__ import annotations

import os
import shutil

import pytest
from django.conf import settings
from django.db import connections
from django.test import Client
from django.urls import reverse
from playwright.sync_api import expect, sync_playwright

from apps.serving.models import InferenceService
from tests.factories import PASSWORD, InferenceServiceFactory
from tests.web.conftest import point

# Debian's chromium (installed by .ci/run and `make test`), or CHROMIUM=/path/to/chrome.
CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture
def browser_page(live_server, monkeypatch):
    # Playwright's sync API runs an event loop in this thread; the test still writes rows through the ORM.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context()

        def as_user(user):
            client = Client()
            assert client.login(username=user.username, password=PASSWORD)
            cookie = client.cookies[settings.SESSION_COOKIE_NAME]
            context.add_cookies([{"name": cookie.key, "value": cookie.value, "url": live_server.url}])
            return context.new_page()

        yield as_user
        browser.close()
        # Work done while Playwright's loop runs may open its own database connection; close it so the
        # test database can be dropped at the end of the run.
        connections.close_all()


@pytest.mark.browser
def test_ttft_figure_on_the_service_page_changes_without_a_reload(browser_page, live_server, viewer_a, tenant_a):
    service = InferenceServiceFactory(tenant=tenant_a, name="chat", phase="Ready")
    point(service, 20, ttft_p50=0.1, ttft_p95=0.2, kv_usage=0.3, ready_replicas=1)
    page = browser_page(viewer_a)

    page.goto(live_server.url + reverse("web:service", args=[service.tenant.slug, service.name]))
    expect(page.locator("#ttft-p95-now")).to_have_text("200.0 ms", timeout=15000)
    page.evaluate("window.loadedOnce = true")
    points_before = page.evaluate("document.getElementById('chart-ttft').data[1].y.length")

    point(service, 0, ttft_p50=0.3, ttft_p95=0.75, kv_usage=0.6, ready_replicas=2)

    expect(page.locator("#ttft-p95-now")).to_have_text("750.0 ms", timeout=15000)
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
    page.goto(live_server.url + reverse("web:service", args=[service.tenant.slug, service.name]))
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
