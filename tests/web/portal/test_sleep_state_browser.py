"""The service page's Sleep card in headless Chromium at phone width: a serverless service put to sleep says
since when, at which level and how long its wake takes; awake, it says what idle does. axe-core clean, nothing
wider than the screen."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.urls import reverse
from playwright.sync_api import expect

from apps.autoscaling.models import ScalingDecision
from tests.factories import InferenceServiceFactory
from tests.web.portal.page_checks import page_width, serious_axe_violations

POLICY = {"autoscaler": "builtin", "targets": {"waiting_requests_per_replica": 4},
          "scale_to_zero_after_seconds": 120, "when_idle": "auto", "wake_objective_seconds": 10}


def _service(tenant, name):
    return InferenceServiceFactory(tenant=tenant, name=name, phase="Ready", deployment_mode="serverless",
                                   autoscaling=POLICY, pools=[{"role": "engine", "replicas": 1, "min_replicas": 0,
                                                               "max_replicas": 2}])


@pytest.mark.browser
def test_the_sleep_card_says_since_when_and_how_long_the_wake_takes(browser_page, live_server, viewer_a, tenant_a):
    service = _service(tenant_a, "wakes")
    ScalingDecision.objects.create(
        service=service, pool="engine", time=datetime(2026, 12, 6, 21, 5, 7, tzinfo=UTC), current_replicas=1,
        desired_replicas=1, raw_recommendation=0, stabilized=0, limited=0, rule="idle_to_sleep", action="slept",
        reason="idle")
    page = browser_page(viewer_a, viewport={"width": 390, "height": 844})
    page.goto(live_server.url + reverse("web:service", args=[service.tenant.slug, service.name]))
    # Llama 8B in bf16 on one H100 SXM (the factory's): 16.06e9 B at 63e9 x 0.8 B/s = 0.32 s, + 0.5 s.
    expect(page.locator("#sleep-now")).to_have_text(
        "Asleep since 21:05:07 UTC (level 1); the next request wakes it in ~0.8 s. Its 1 GPU(s) stay reserved.")
    expect(page.locator("#sleep-wake")).to_have_text("A wake from level 1 takes ~0.8 s: copy 16.1 GB at 50.4 GB/s "
                                                     "+ 0.5 s.")
    assert serious_axe_violations(page, "#sleep-state") == []
    width, wide = page_width(page)
    assert width <= 391 and wide == []


@pytest.mark.browser
def test_awake_it_says_what_idle_does_and_a_deleting_service_has_no_card(browser_page, live_server, viewer_a,
                                                                         tenant_a):
    service = _service(tenant_a, "awake")
    plain = InferenceServiceFactory(tenant=tenant_a, name="plain", phase="Ready")
    page = browser_page(viewer_a)
    page.goto(live_server.url + reverse("web:service", args=[service.tenant.slug, service.name]))
    expect(page.locator("#sleep-now")).to_have_text("Awake. When idle: choose from the wake history "
                                                     "(wake objective 10 s).")
    page.goto(live_server.url + reverse("web:service", args=[plain.tenant.slug, plain.name]))
    expect(page.locator("h1")).to_be_visible()
    assert page.locator("#sleep-state").count() == 0
