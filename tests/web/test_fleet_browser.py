"""The fleet page in headless Chromium at phone width, with every card filled: the gateway's figures, a
rollout under way, the latest figures of a service. Nothing wider than the screen; axe-core clean."""

from __future__ import annotations

import pytest
from django.urls import reverse
from playwright.sync_api import expect

from tests.factories import InferenceServiceFactory
from tests.web.conftest import point
from tests.web.portal.page_checks import page_width, serious_axe_violations
from tests.web.test_fleet_gateway import row
from tests.web.test_fleet_rollouts import rollout


@pytest.mark.browser
def test_the_fleet_page_fits_a_phone_with_every_card_filled(browser_page, live_server, owner_a, tenant_a):
    service = InferenceServiceFactory(tenant=tenant_a, name="a-rather-long-service-name-for-a-phone",
                                      phase="Ready")
    point(service, 10, ttft_p95=0.42, kv_usage=0.7, ready_replicas=2)
    rollout(service, step=1, reason="Window 2 of step 2: TTFT p95 of the canary within 10 % of the stable.")
    for added in (1.0, 2.0, 10.0):
        row(tenant_a, 30, added_ms=added)
    row(tenant_a, 40, status=429)

    page = browser_page(owner_a, viewport={"width": 390, "height": 844})
    page.goto(live_server.url + reverse("web:home"))

    expect(page.locator("#door-rate")).to_have_text("4 (0.01/s)")
    expect(page.locator("#door-429")).to_have_text("1")
    expect(page.locator("#rollouts-now")).to_contain_text("2 of 3, 25 % to the canary")
    expect(page.locator("#fleet-figures")).to_contain_text("a-rather-long-service-name-for-a-phone")
    assert serious_axe_violations(page, "main") == []
    width, wide = page_width(page)
    assert width <= 391 and wide == []
