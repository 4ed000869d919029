"""The service form's "When idle" choice in headless Chromium: a sleep asked of a service that never goes idle is
refused with the API's words beside the select, the focus on it, nothing saved; and the form still fits 390 px."""

from __future__ import annotations

import pytest
from django.urls import reverse
from playwright.sync_api import expect

from tests.web.portal.test_autoscaling_form import tuned  # noqa: F401 (a fixture)

pytestmark = pytest.mark.browser


def test_sleep_on_a_service_that_never_goes_idle_shows_why_at_the_select(browser_page, live_server, owner_a,
                                                                          tuned):  # noqa: F811
    from apps.serving.models import InferenceService

    page = browser_page(owner_a, viewport={"width": 390, "height": 844})
    page.goto(live_server.url + reverse("web:service-edit", args=["alpha", "tuned"]))
    page.get_by_label("When idle").select_option(label="Sleep (keep the GPUs, wake in seconds)")
    page.get_by_role("button", name="Save changes").click()

    select = page.get_by_label("When idle")
    expect(select).to_be_focused()
    expect(select).to_have_attribute("aria-invalid", "true")
    expect(page.get_by_text("when_idle applies to serverless services only (they are the ones that go idle).")
           ).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    assert "when_idle" not in InferenceService.objects.get(pk=tuned["id"]).autoscaling
