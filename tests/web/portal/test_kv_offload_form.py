"""The KV-cache CPU tier in the portal's service form: saved as `engine_settings.kv_offload`, shown again on
edit, and refused beside the input with the API's reason (headless Chromium for the refusal)."""

from __future__ import annotations

import pytest
from django.urls import reverse
from playwright.sync_api import expect

from apps.serving.models import InferenceService
from tests.web.portal.forms import service_post
from tests.web.portal.page_checks import start_service_form


def test_the_form_saves_the_tier_and_shows_it_again(client, operator_a, cluster, catalog_a):
    client.force_login(operator_a)
    data = service_post(model=catalog_a["model"], runtime=catalog_a["runtime"], kv_offload_backend="native",
                        kv_offload_size_gib="12")
    response = client.post(reverse("web:service-create", args=["alpha"]), data)
    assert response.status_code in (200, 302), response.content[:500]
    service = InferenceService.objects.get(tenant__slug="alpha", name="new-chat")
    assert service.engine_settings["kv_offload"] == {"backend": "native", "size_gib": 12.0}
    edit = client.get(reverse("web:service-edit", args=["alpha", "new-chat"]))
    form = edit.context["form"]
    assert (form["kv_offload_backend"].value(), form["kv_offload_size_gib"].value()) == ("native", 12.0)


def test_a_size_without_a_backend_is_off(client, operator_a, cluster, catalog_a):
    client.force_login(operator_a)
    data = service_post(model=catalog_a["model"], runtime=catalog_a["runtime"], kv_offload_size_gib="12")
    client.post(reverse("web:service-create", args=["alpha"]), data)
    assert "kv_offload" not in InferenceService.objects.get(name="new-chat").engine_settings


def test_the_capacity_check_shows_the_cpu_tier_in_tokens(client, operator_a, cluster, catalog_a):
    client.force_login(operator_a)
    data = service_post(model=catalog_a["model"], runtime=catalog_a["runtime"], kv_offload_backend="native",
                        kv_offload_size_gib="16")
    response = client.post(reverse("web:service-form-parts", args=["alpha"]), data, HTTP_HX_REQUEST="true")
    # Llama 3.1 8B, bf16, TP 1: 131,072 KV bytes per token, 2 MiB blocks; 16 GiB = 8,192 blocks = 131,072 tokens.
    assert response.context["capacity"]["rows"][0]["cpu_tier_tokens"] == 131_072
    assert "CPU-tier tokens" in response.content.decode()


@pytest.mark.browser
def test_hicache_on_a_vllm_runtime_shows_why_at_the_field(browser_page, live_server, operator_a, cluster, catalog_a):
    page = browser_page(operator_a)
    start_service_form(page, live_server.url, "tiered")
    page.get_by_label("KV-cache CPU tier").select_option(label="SGLang HiCache")
    page.get_by_label("CPU tier size (GiB per GPU)").fill("16")
    page.get_by_role("button", name="Create service").click()

    backend = page.get_by_label("KV-cache CPU tier")
    expect(backend).to_be_focused()
    expect(backend).to_have_attribute("aria-invalid", "true")
    error = page.locator(".field", has=backend).locator(".errorlist")
    expect(error).to_contain_text("backend 'hicache' is SGLang's HiCache; vllm takes native or lmcache")
    assert not InferenceService.objects.filter(name="tiered").exists()
