"""The service page's "LoRA adapters on the pods" card in headless Chromium at phone width: each pod with the
adapters it holds and the engine's message for one it refused; a pod that could not be asked says so. axe-core
clean, nothing wider than the screen; a service with no run-time adapters has no card."""

from __future__ import annotations

import pytest
from django.urls import reverse
from playwright.sync_api import expect

from apps.serving.models import ServiceObservation
from tests.factories import InferenceServiceFactory
from tests.web.portal.page_checks import page_width, serious_axe_violations

REFUSAL = "Loading lora sql-v2 failed: No adapter found for /models/adapters/sql-v2"


@pytest.mark.browser
def test_each_pod_shows_what_it_holds_and_what_its_engine_refused(browser_page, live_server, viewer_a, tenant_a):
    service = InferenceServiceFactory(tenant=tenant_a, name="loras", phase="Ready")
    ServiceObservation.objects.create(service=service, adapters={
        "loras-7d9f-abcde": {"held": ["chat", "sql"]},
        "loras-7d9f-fghij": {"held": ["chat"], "refused": {"sql-v2": REFUSAL}},
        "loras-7d9f-klmno": {"error": "the engine could not be asked"},
    })
    page = browser_page(viewer_a, viewport={"width": 390, "height": 844})
    page.goto(live_server.url + reverse("web:service", args=[service.tenant.slug, service.name]) + "?tab=cluster")
    rows = page.locator("#pod-adapters tbody tr")
    expect(rows).to_have_count(3)
    expect(rows.nth(0)).to_have_text("loras-7d9f-abcde chat, sql –")
    expect(rows.nth(1)).to_have_text(f"loras-7d9f-fghij chat sql-v2: {REFUSAL}")
    expect(rows.nth(2)).to_have_text("loras-7d9f-klmno none the engine could not be asked")
    assert serious_axe_violations(page, "#pod-adapters") == []
    width, wide = page_width(page)
    assert width <= 391 and wide == []


@pytest.mark.browser
def test_a_service_without_run_time_adapters_has_no_card(browser_page, live_server, viewer_a, tenant_a):
    service = InferenceServiceFactory(tenant=tenant_a, name="plain", phase="Ready")
    ServiceObservation.objects.create(service=service)
    page = browser_page(viewer_a)
    page.goto(live_server.url + reverse("web:service", args=[service.tenant.slug, service.name]) + "?tab=cluster")
    expect(page.locator("h1")).to_be_visible()
    assert page.locator("#pod-adapters").count() == 0
