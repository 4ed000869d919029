"""The service page's tabs in Chromium: each reached by the keyboard alone (arrow keys, Home, End), the chosen tab
kept in the URL through a reload and the Back button, axe-core clean, and no sideways scrolling at 390 px; the first
tab answers whether the service is healthy and meets its SLO. SERVICE_PAGE_SCREENS=<dir> also saves a screenshot
of each tab at 1366 and 390 px there."""

from __future__ import annotations

import os
from datetime import timedelta
from urllib.parse import parse_qs, urlparse

import pytest
from django.urls import reverse
from django.utils import timezone
from playwright.sync_api import expect

from apps.gateway.models import UsageRow
from apps.web.portal.service_tabs import TABS
from tests.factories import InferenceServiceFactory
from tests.web.conftest import point
from tests.web.portal.page_checks import page_width, serious_axe_violations, tab_to

pytestmark = pytest.mark.browser
SLUGS = [slug for slug, _, _ in TABS]


@pytest.fixture
def chat(tenant_a):
    service = InferenceServiceFactory(
        tenant=tenant_a, name="chat", phase="Ready", ready_replicas=1,
        pools=[{"role": "engine", "replicas": 2, "min_replicas": 1, "max_replicas": 3, "gpu_type": "l4-24gb"}])
    for seconds_ago, ttft in ((240, 0.3), (120, 0.45), (5, 0.6)):
        point(service, seconds_ago, ttft_p50=ttft / 2, ttft_p95=ttft, kv_usage=0.4, ready_replicas=1, running=2)
    # Four answered requests in the last hour, three within the 2 s allowance.
    now = timezone.now()
    UsageRow.objects.bulk_create([
        UsageRow(at=now - timedelta(minutes=m), tenant=tenant_a, service_id=service.pk, model="chat", status=200,
                 ttft_ms=ttft, duration_ms=ttft + 100.0, completion_tokens=1)
        for m, ttft in ((1, 500.0), (2, 900.0), (3, 1500.0), (4, 2500.0))])
    return service


def shown_tab(page) -> str:
    """The tab whose panel is visible, checking that it is the one selected and the only one shown."""
    selected = page.locator("[role=tab][aria-selected=true]")
    expect(selected).to_have_count(1)
    slug = selected.get_attribute("data-tab")
    for other in SLUGS:
        panel = page.locator(f"#panel-{other}")
        expect(panel).to_be_visible() if other == slug else expect(panel).to_be_hidden()
    return slug


def url_tab(page) -> str | None:
    return (parse_qs(urlparse(page.url).query).get("tab") or [None])[0]


def test_every_tab_is_reached_by_keyboard_and_kept_in_the_url(browser_page, live_server, owner_a, chat):
    page = browser_page(owner_a)
    page.goto(live_server.url + reverse("web:service", args=["alpha", "chat"]))
    # The first screen: healthy, replicas ready against desired, and the SLO in words.
    expect(page.locator("#phase")).to_have_text("Ready")
    expect(page.locator("#ready-replicas")).to_have_text("1 of 2")
    expect(page.locator("#slo-words")).to_contain_text("SLO attainment, last hour at the gateway (4 requests)")
    expect(page.locator("#slo-words")).to_contain_text("TTFT within 2 s 75.0%")
    expect(page.locator("#slo-glance [data-now=ttft_p95]")).to_have_text("600 ms", timeout=15000)

    tab_to(page, "#tab-overview")  # the one tab in the Tab order
    assert shown_tab(page) == "overview" and url_tab(page) is None
    for slug in SLUGS[1:]:
        page.keyboard.press("ArrowRight")
        expect(page.locator(f"#tab-{slug}")).to_be_focused()
        assert shown_tab(page) == slug and url_tab(page) == slug
        assert serious_axe_violations(page) == [], slug
    page.keyboard.press("ArrowRight")  # past the last: back to the first
    expect(page.locator("#tab-overview")).to_be_focused()
    page.keyboard.press("End")
    assert shown_tab(page) == "playground"
    page.keyboard.press("Home")
    assert shown_tab(page) == "overview"
    page.keyboard.press("ArrowLeft")
    assert shown_tab(page) == "playground"
    # Tab leaves the tab list for the chosen panel's content.
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.closest('[role=tabpanel]').id") == "panel-playground"

    page.locator("#tab-cluster").click()
    assert url_tab(page) == "cluster"
    page.reload()
    assert shown_tab(page) == "cluster"
    expect(page.locator("#panel-cluster")).to_contain_text("Reconcile history")
    page.go_back()
    assert shown_tab(page) == "playground" and url_tab(page) == "playground"

    # A link to a panel's anchor alone shows the tab that holds it.
    page.goto(live_server.url + reverse("web:service", args=["alpha", "chat"]) + "#rollout")
    assert shown_tab(page) == "changes" and url_tab(page) == "changes"


def test_live_updates_reach_a_tab_while_another_is_shown(browser_page, live_server, viewer_a, chat):
    page = browser_page(viewer_a)
    page.goto(live_server.url + reverse("web:service", args=["alpha", "chat"]) + "?tab=traffic")
    expect(page.locator("#ttft-p95-now")).to_have_text("600 ms", timeout=15000)
    point(chat, 0, ttft_p50=0.4, ttft_p95=0.8, ready_replicas=1)
    expect(page.locator("#ttft-p95-now")).to_have_text("800 ms", timeout=15000)
    # The Overview's copy followed while hidden, and the status poll refreshed the hidden Cluster tab.
    page.keyboard.press("Tab")
    page.locator("#tab-overview").click()
    expect(page.locator("#slo-glance [data-now=ttft_p95]")).to_have_text("800 ms")
    chat.__class__.objects.filter(pk=chat.pk).update(phase="Failed")
    expect(page.locator("#phase")).to_have_text("Failed", timeout=15000)


@pytest.mark.parametrize("width,height", [(390, 844), (1366, 900)])
def test_each_tab_fits_the_screen(browser_page, live_server, owner_a, chat, width, height):
    page = browser_page(owner_a, viewport={"width": width, "height": height})
    screens = os.environ.get("SERVICE_PAGE_SCREENS")
    for slug in SLUGS:
        page.goto(live_server.url + reverse("web:service", args=["alpha", "chat"]) + f"?tab={slug}")
        assert shown_tab(page) == slug
        if width == 390:
            scroll_width, wide = page_width(page)
            assert scroll_width <= 390 and wide == [], (slug, scroll_width, wide)
        # The tab list stays on screen while the page scrolls.
        page.mouse.wheel(0, 1500)
        expect(page.locator("#service-tablist")).to_be_in_viewport()
        page.evaluate("window.scrollTo(0, 0)")
        if screens:
            page.wait_for_timeout(1500)  # the charts' first draw
            page.screenshot(path=os.path.join(screens, f"service-{slug}-{width}.png"), full_page=True)


def test_the_first_screen_loads_no_chart_library_and_a_tab_with_charts_loads_it_once(browser_page, live_server,
                                                                                      viewer_a, chat):
    # Plotly is 4.6 MB of script: the Overview shows its figures in words without it; the Traffic tab fetches it when
    # first shown and draws the series already read.
    page = browser_page(viewer_a)
    fetched = []
    page.on("request", lambda request: fetched.append(request.url))
    page.goto(live_server.url + reverse("web:service", args=["alpha", "chat"]))
    expect(page.locator("#slo-glance [data-now=ttft_p95]")).to_have_text("600 ms", timeout=15000)  # the series, read
    assert [url for url in fetched if "plotly.min.js" in url] == []
    assert page.evaluate("typeof Plotly") == "undefined"

    page.locator("#tab-traffic").click()
    page.locator("#chart-ttft .main-svg").first.wait_for(state="attached", timeout=15000)
    assert page.evaluate("document.getElementById('chart-ttft').data[1].y") == [300.0, 450.0, 600.0]  # p95, in ms
    page.locator("#tab-changes").click()
    page.locator("#tab-traffic").click()
    assert len([url for url in fetched if "plotly.min.js" in url]) == 1
