"""The playground in headless Chromium: an inference key the gateway could never receive (here Cyrillic letters,
which no HTTP header carries) is refused beside the key's input, which is marked invalid, described by the
message and focused; nothing is sent, no violation of the Content-Security-Policy, axe-core clean."""

from __future__ import annotations

import pytest
from django.urls import reverse
from playwright.sync_api import expect

from apps.gateway.models import UsageRow
from apps.serving.models import InferenceService
from tests.web.conftest import browser_page  # noqa: F401 (the Chromium fixture)
from tests.web.portal.page_checks import serious_axe_violations
from tests.web.test_csp_browser import watched

pytestmark = pytest.mark.browser


def test_a_key_outside_ascii_is_refused_at_its_field(browser_page, live_server, operator_a, service_a):  # noqa: F811
    InferenceService.objects.filter(pk=service_a.pk).update(phase="Ready", ready_replicas=1,
                                                             endpoint="http://chat.tenant-alpha.svc:8000")
    page = browser_page(operator_a)
    violations = watched(page, live_server)
    page.goto(live_server.url + reverse("web:service", args=["alpha", "chat"]) + "?tab=playground")

    page.get_by_label("Inference key").fill("sk-\u043a\u043b\u044e\u0447")
    page.get_by_role("button", name="Send").click()

    key = page.get_by_label("Inference key")
    message = page.locator("#pg-key-error")
    expect(message).to_be_visible()
    expect(message).to_have_text("The inference key holds characters outside ASCII; inference keys are letters, "
                                 "digits, '-' and '_' (copy it again from the Inference keys page).")
    expect(key).to_have_attribute("aria-invalid", "true")
    expect(key).to_be_focused()
    assert "pg-key-error" in key.get_attribute("aria-describedby").split()
    expect(page.locator("#pg-meta")).to_have_text("Not sent: see the inference key.")
    assert serious_axe_violations(page, "#playground") == []
    assert page.evaluate("window.__violations") == [] and violations == []
    assert not UsageRow.objects.exists()
