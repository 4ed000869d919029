"""The Rollout panel's chart: both revisions' TTFT p95 over the rollout, from the scraper's per-revision series
(`stable`, `canary` rows), one line each, in headless Chromium; it follows new rows without a reload, and the
latest figures are in words beside it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone
from playwright.sync_api import expect

from apps.rollouts.models import Rollout
from apps.web.rollout_panel import rollout_chart
from tests.polling import wait_for
from tests.rollouts.conftest import chat_rolling_out
from tests.web.conftest import browser_page, point  # noqa: F401 (the Chromium fixture)
from tests.web.portal.page_checks import page_width, serious_axe_violations

CHART = "document.getElementById('chart-rollout-ttft')"


@pytest.fixture
def rolling_out(tenant_a, cluster, catalog_a, owner_a):
    """chat with a canary strategy, revision 2 (a new runtime) running beside revision 1."""
    service = chat_rolling_out(tenant_a, cluster, catalog_a, owner_a)
    # It began two minutes ago; the rows below are from within it.
    Rollout.objects.filter(service=service).update(created=timezone.now() - timedelta(minutes=2))
    return service


def test_the_chart_data_holds_each_revisions_own_rows_only(rolling_out):
    rollout = Rollout.objects.get(service=rolling_out)
    point(rolling_out, 20, role="stable", ttft_p95=0.150)
    point(rolling_out, 20, role="canary", ttft_p95=0.310)
    point(rolling_out, 20, role="", ttft_p95=0.158)  # the whole service: on the service's chart, not this one
    point(rolling_out, 10, role="stable", ttft_p95=0.140)
    stable, canary = rollout_chart(rollout)["sides"]
    assert (stable["name"], stable["ttft_p95_ms"], stable["latest"]) == (
        "revision 1 (stable)", [150.0, 140.0], "revision 1 (stable) 140 ms")
    assert (canary["name"], canary["ttft_p95_ms"], canary["latest"]) == (
        "revision 2 (canary)", [310.0], "revision 2 (canary) 310 ms")


@pytest.mark.browser
def test_both_revisions_ttft_are_drawn_side_by_side_and_follow_new_rows(browser_page, live_server,  # noqa: F811
                                                                        viewer_a, rolling_out):
    point(rolling_out, 20, role="stable", ttft_p95=0.150)
    point(rolling_out, 20, role="canary", ttft_p95=0.310)
    page = browser_page(viewer_a, viewport={"width": 1280, "height": 900})
    page.goto(live_server.url + reverse("web:service", args=["alpha", "chat"]) + "?tab=changes")

    expect(page.locator("#rollout-ttft-now")).to_have_text(
        "TTFT p95 now (scraped from the engines): revision 1 (stable) 150 ms; revision 2 (canary) 310 ms.")
    # Polled: the page's Content-Security-Policy refuses Playwright's wait_for_function (eval).
    wait_for(lambda: page.evaluate(f"!!{CHART}.data"), message="the rollout chart")
    assert page.evaluate(f"{CHART}.data.map(t => t.name)") == ["revision 1 (stable)", "revision 2 (canary)"]
    assert page.evaluate(f"{CHART}.data.map(t => t.y)") == [[150], [310]]
    expect(page.locator("#chart-rollout-ttft .legendtext")).to_have_text(["revision 1 (stable)",
                                                                         "revision 2 (canary)"])
    page.evaluate("window.loadedOnce = true")

    point(rolling_out, 0, role="canary", ttft_p95=0.290)
    wait_for(lambda: page.evaluate(f"{CHART}.data[1].y.length === 2"), timeout=20, message="the new canary row")
    assert page.evaluate(f"{CHART}.data[1].y") == [310, 290]
    expect(page.locator("#rollout-ttft-now")).to_contain_text("revision 2 (canary) 290 ms")
    assert page.evaluate("window.loadedOnce") is True
    assert serious_axe_violations(page, "#rollout") == []


@pytest.mark.browser
def test_the_rollout_panel_and_its_chart_fit_a_phone(browser_page, live_server, viewer_a, rolling_out):  # noqa: F811
    point(rolling_out, 20, role="stable", ttft_p95=0.150)
    point(rolling_out, 20, role="canary", ttft_p95=0.310)
    page = browser_page(viewer_a, viewport={"width": 390, "height": 844})
    page.goto(live_server.url + reverse("web:service", args=["alpha", "chat"]) + "?tab=changes")

    expect(page.locator("#rollout-ttft-now")).to_contain_text("revision 2 (canary) 310 ms")
    wait_for(lambda: page.evaluate(f"!!{CHART}.data"), message="the rollout chart")
    assert page.evaluate(f"{CHART}.getBoundingClientRect().right") <= 391
    width, wide = page_width(page)
    assert width <= 391 and wide == []
    assert serious_axe_violations(page, "#rollout") == []
