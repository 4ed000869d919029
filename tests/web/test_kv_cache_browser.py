"""The service page's KV cache panel in headless Chromium at phone width: both tiers over time from the stored
series, following new rows without a reload; axe-core clean, nothing wider than the screen."""

from __future__ import annotations

import pytest
from django.urls import reverse
from playwright.sync_api import expect

from tests.factories import InferenceServiceFactory
from tests.gateway.reuse_rows import N, layout, make_service, send_rounds
from tests.polling import wait_for
from tests.web.conftest import point
from tests.web.portal.page_checks import page_width, serious_axe_violations

KV = "document.getElementById('chart-kv')"


@pytest.mark.browser
def test_the_kv_cache_panel_draws_both_tiers_and_follows_new_rows(browser_page, live_server, viewer_a, tenant_a):
    service = InferenceServiceFactory(tenant=tenant_a, name="chat", phase="Ready",
                                      engine_settings={"kv_offload": {"backend": "native", "size_gib": 16}})
    point(service, 20, kv_usage=0.9, cpu_usage=0.25, prefix_hit_rate=0.3, cpu_hit_rate=0.4, cpu_load_tps=1200.0,
          ready_replicas=1)
    page = browser_page(viewer_a, viewport={"width": 390, "height": 844})
    page.goto(live_server.url + reverse("web:service", args=[service.tenant.slug, service.name]) + "?tab=traffic")

    expect(page.locator("#kv-tier-setting")).to_contain_text("16 GiB of host memory per GPU (native)")
    # Polled from here: the page's Content-Security-Policy refuses Playwright's wait_for_function (eval).
    wait_for(lambda: page.evaluate(f"!!{KV}.data && {KV}.data[1].y.length === 1"), message="the first point")
    assert page.evaluate(f"{KV}.data.map(t => t.name)") == ["GPU tier used", "CPU tier used", "GPU hits",
                                                            "CPU tier hits"]
    # Shares are drawn in percent.
    assert page.evaluate(f"{KV}.data.map(t => t.y[0])") == pytest.approx([90, 25, 30, 40], rel=1e-6)
    assert page.evaluate("document.getElementById('chart-kv-loads').data[0].y") == [1200]
    page.evaluate("window.loadedOnce = true")

    point(service, 0, kv_usage=0.95, cpu_usage=0.5, prefix_hit_rate=0.2, cpu_hit_rate=0.6, cpu_load_tps=1800.0,
          ready_replicas=1)

    wait_for(lambda: page.evaluate(f"{KV}.data[1].y.length === 2"), message="the new row drawn")
    assert page.evaluate(f"{KV}.data[1].y") == pytest.approx([25, 50], rel=1e-6)
    assert page.evaluate(f"{KV}.data[3].y") == pytest.approx([40, 60], rel=1e-6)
    assert page.evaluate("window.loadedOnce") is True
    assert serious_axe_violations(page, "#kv-cache") == []
    width, wide = page_width(page)
    assert width <= 391 and wide == []


@pytest.mark.browser
def test_a_service_without_a_tier_says_so(browser_page, live_server, viewer_a, tenant_a):
    service = InferenceServiceFactory(tenant=tenant_a, name="plain", phase="Ready")
    page = browser_page(viewer_a)
    page.goto(live_server.url + reverse("web:service", args=[service.tenant.slug, service.name]) + "?tab=traffic")
    expect(page.locator("#kv-tier-setting")).to_contain_text("No CPU tier")


@pytest.mark.browser
def test_the_panel_says_what_more_cpu_memory_would_buy_and_splits_ttft_by_tier(browser_page, live_server, viewer_a,
                                                                               tenant_a):
    service = make_service(tenant_a)  # no tier; its prompts need 1.5 GPU caches (tests/gateway/reuse_rows.py)
    send_rounds(service, layout(service))
    page = browser_page(viewer_a, viewport={"width": 390, "height": 844})
    page.goto(live_server.url + reverse("web:service", args=[service.tenant.slug, service.name]) + "?tab=traffic")

    sentence = page.locator("#kv-cache #kv-reuse-sentence")
    expect(sentence).to_contain_text("GiB more CPU tier per GPU")
    # (N - P) / N = 96 % of the requests hit all but their last block, of over a thousand.
    expect(sentence).to_contain_text("would raise the hit rate from 0% to 96%")
    sizes = page.locator("#kv-reuse-sizes tbody tr")
    expect(sizes).to_have_count(4)
    expect(sizes.nth(0)).to_contain_text("now")
    expect(sizes.nth(0)).to_contain_text("none")
    expect(page.locator("#kv-ttft-by-tier tbody tr").filter(has_text="Miss")).to_contain_text(str(N))
    expect(page.locator("#kv-evictions")).to_contain_text("tokens/s from the GPU cache")
    expect(page.locator("#kv-evictions")).not_to_contain_text("CPU tier")  # the service has none
    assert serious_axe_violations(page, "#kv-cache") == []
    width, wide = page_width(page)
    assert width <= 391 and wide == []


@pytest.mark.browser
def test_without_traffic_the_panel_says_what_the_estimate_needs(browser_page, live_server, viewer_a, tenant_a):
    service = make_service(tenant_a)
    page = browser_page(viewer_a)
    page.goto(live_server.url + reverse("web:service", args=[service.tenant.slug, service.name]) + "?tab=traffic")
    expect(page.locator("#kv-reuse-sentence")).to_contain_text("No estimate yet: it needs at least 20 answered "
                                                               "requests through the gateway")
