"""The service page in headless Chromium shows capacity warnings and why an engine crash-loops."""

from __future__ import annotations

import pytest
from django.urls import reverse
from playwright.sync_api import expect

from apps.serving.models import InferenceService
from tests.factories import InferenceServiceFactory


@pytest.mark.browser
def test_low_headroom_and_a_crash_explanation_are_on_the_service_page(browser_page, live_server,
                                                                     viewer_a, tenant_a):
    # Llama 8B on one L4 at 16,384 tokens: 52,192 KV tokens at vLLM's 0.92, 3.19 sequences (fewer than 4).
    service = InferenceServiceFactory(tenant=tenant_a, name="tight", engine_settings={"max_model_len": 16384},
                                      pools=[{"role": "engine", "gpu_type": "l4-24gb"}])
    page = browser_page(viewer_a)
    page.goto(live_server.url + reverse("web:service", args=[service.tenant.slug, service.name]))
    warning = page.get_by_role("status").filter(has_text="Capacity")
    expect(warning).to_contain_text("Low headroom on the engine pool (1 × L4 (TP 1))")
    expect(warning).to_contain_text("3.19 sequences of max_model_len 16384")

    crash = "engine exited: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.64 GiB."
    InferenceService.objects.filter(pk=service.pk).update(phase="Failed", conditions=[
        {"type": "Healthy", "status": "False", "reason": "CrashLoop", "message": crash, "lastTransitionTime": ""}])
    expect(page.locator("#service-summary .advice")).to_contain_text(crash, timeout=15000)
