"""The service page's start-up line in headless Chromium at phone width: the modelled cold and warm start-ups and
the replicas' recorded phases, axe-core clean, nothing wider than the screen."""

from __future__ import annotations

import pytest
from django.urls import reverse
from playwright.sync_api import expect

from apps.serving.models import ServiceObservation
from tests.factories import InferenceServiceFactory, PoolFactory
from tests.web.portal.page_checks import page_width, serious_axe_violations


@pytest.mark.browser
def test_the_service_page_says_how_long_a_replica_takes_to_start(browser_page, live_server, viewer_a, tenant_a):
    service = InferenceServiceFactory(tenant=tenant_a, name="chat", phase="Ready", pools=[])
    PoolFactory(service=service, gpu_type="l4-24gb")
    ServiceObservation.objects.create(service=service, startups=[
        {"pod": "chat-6f9c-x2", "cache": "none", "phases": {"download": 80.3, "read": 8.0, "load": 0.6, "init": 20.0},
         "total_s": 108.9}])
    page = browser_page(viewer_a, viewport={"width": 390, "height": 844})
    page.goto(live_server.url + reverse("web:service", args=[service.tenant.slug, service.name]) + "?tab=scaling")

    # Llama 3.1 8B (16.06 GB) on an L4: 80.3 s download, 8.03 s read at 2 GB/s, 0.64 s over PCIe, 20 s init.
    expect(page.locator("#startup-line")).to_contain_text(
        "On L4: cold 1 m 49 s (download 16 GB at 200 MB/s), warm 29 s (read 16 GB at 2 GB/s, init 20 s); "
        "from a node holding the weights 24 s (read 16 GB at 5 GB/s).")
    row = page.locator("#startup tbody tr")
    expect(row).to_have_count(1)
    expect(row).to_contain_text("downloaded from the source")
    expect(row).to_contain_text("download 1 m 20 s, read 8.0 s, load 0.6 s, init 20.0 s")
    expect(row).to_contain_text("1 m 49 s")
    assert serious_axe_violations(page, "#startup") == []
    width, wide = page_width(page)
    assert width <= 391 and wide == []
