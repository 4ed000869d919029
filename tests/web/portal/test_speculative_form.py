"""Speculative decoding in the portal's service form: a draft model that is not in the tenant's catalog is
refused beside its input with the API's reason, the focus on it, and nothing saved (headless Chromium)."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from apps.serving.models import InferenceService
from tests.web.portal.page_checks import start_service_form


@pytest.mark.browser
def test_a_draft_model_outside_the_catalog_shows_why_at_the_field(browser_page, live_server, operator_a, cluster,
                                                                    catalog_a):
    page = browser_page(operator_a)
    start_service_form(page, live_server.url, "drafted")
    page.get_by_label("Speculative decoding").select_option(label="Draft model")
    page.get_by_label("Speculative model").fill("someone/own-draft")
    page.get_by_label("Speculative tokens").fill("4")
    page.get_by_role("button", name="Create service").click()

    draft = page.get_by_label("Speculative model")
    expect(draft).to_be_focused()
    expect(draft).to_have_attribute("aria-invalid", "true")
    error = page.locator(".field", has=draft).locator(".errorlist")
    expect(error).to_contain_text("'someone/own-draft' is not a model of the catalog this tenant may use")
    assert not InferenceService.objects.filter(name="drafted").exists()
