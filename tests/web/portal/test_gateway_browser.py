"""The Inference keys and Usage pages in headless Chromium: a key created with the keyboard alone and
shown once, a bad limit refused at its field with the focus there, the usage charts drawn under the
Content-Security-Policy, filters used by keyboard, no sideways scrolling at 390 px, axe-core clean."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone
from playwright.sync_api import expect

from apps.gateway.models import InferenceKey, UsageHour, UsageRow
from tests.factories import InferenceServiceFactory
from tests.gateway.conftest import issue
from tests.web.portal.page_checks import page_width, serious_axe_violations
from tests.web.portal.test_portal_browser import tab_to

pytestmark = pytest.mark.browser
PHONE = {"width": 390, "height": 844}


def checked(page) -> None:
    width, wide = page_width(page)
    assert width <= 390, f"{page.url} is {width} px wide at 390 px: {wide}"
    assert serious_axe_violations(page) == []


def test_a_key_is_created_with_the_keyboard_alone_and_shown_once(browser_page, live_server, operator_a, tenant_a):
    InferenceServiceFactory(tenant=tenant_a, name="chat")
    page = browser_page(operator_a, viewport=PHONE)
    page.goto(live_server.url + reverse("web:inference-keys", args=["alpha"]))
    checked(page)

    tab_to(page, "#id_name")
    page.keyboard.type("support-bot")
    tab_to(page, "#id_services_0")
    page.keyboard.press("Space")
    tab_to(page, "#id_tpm")
    page.keyboard.type("20000")
    tab_to(page, "#key-form button[type=submit]")
    page.keyboard.press("Enter")

    issued = page.locator("#issued")
    expect(issued).to_be_visible(timeout=10000)
    assert page.evaluate("document.activeElement.id") == "issued"
    plaintext = page.locator("#issued-key").input_value()
    assert plaintext.startswith("sk-")
    expect(page.locator("#key-table")).to_contain_text("support-bot")
    expect(page.locator("#key-table")).to_contain_text("20,000 tok/min")
    key = InferenceKey.objects.get(name="support-bot")
    assert key.tpm == 20000 and [s.name for s in key.services.all()] == ["chat"]
    checked(page)

    page.reload()
    assert plaintext not in page.content()
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Rotate key support-bot").click()
    expect(page.locator("#issued")).to_be_visible()
    assert page.locator("#issued-key").input_value() not in ("", plaintext)


def test_a_bad_limit_is_shown_at_its_field_with_the_focus(browser_page, live_server, operator_a, tenant_a):
    page = browser_page(operator_a)
    page.goto(live_server.url + reverse("web:inference-keys", args=["alpha"]))
    page.locator("#id_name").fill("app")
    page.locator("#id_rpm").fill("0")
    page.get_by_role("button", name="Create key").click()

    expect(page.locator("#key-form")).to_contain_text("greater than or equal to 1")
    expect(page.locator("#id_rpm")).to_be_focused()
    expect(page.locator("#id_rpm")).to_have_attribute("aria-invalid", "true")
    assert not InferenceKey.objects.exists()


def test_the_usage_page_draws_its_charts_and_filters_by_keyboard(browser_page, live_server, owner_a, tenant_a):
    key, _ = issue(tenant_a, "app")
    InferenceKey.objects.filter(pk=key.pk).update(monthly_token_budget=10_000)
    now = timezone.now().replace(minute=0, second=0, microsecond=0)
    for hours, model in ((0, "chat"), (1, "chat"), (1, "sql-lora")):
        UsageHour.objects.create(hour=now - timedelta(hours=hours), tenant=tenant_a, key_id=key.pk, model=model,
                                 requests=5, errors=1, rate_limited=1, prompt_tokens=300, completion_tokens=100)
    UsageRow.objects.create(at=timezone.now(), tenant=tenant_a, key_id=key.pk, model="chat", status=200,
                            ttft_ms=42.0, duration_ms=90.0)
    page = browser_page(owner_a, viewport=PHONE)
    violations = []
    page.on("console", lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None)
    page.goto(live_server.url + reverse("web:usage", args=["alpha"]))

    for chart in ("chart-tokens-by-key", "chart-tokens-by-model", "chart-requests", "chart-ttft"):
        expect(page.locator(f"#{chart} .main-svg").first).to_be_visible(timeout=15000)
    expect(page.locator("#usage-by-model")).to_contain_text("sql-lora")
    expect(page.locator("#usage-budgets")).to_contain_text("12 %")
    assert violations == []
    checked(page)

    tab_to(page, "#usage-range")
    page.keyboard.press("ArrowDown")  # last 24h → last 7d
    tab_to(page, "#usage-filters button[type=submit]")
    page.keyboard.press("Enter")
    page.wait_for_url("**range=7d**")
    expect(page.locator("#usage-csv")).to_have_attribute("href", reverse("web:usage-csv", args=["alpha"])
                                                        + "?range=7d&key=&model=")


def test_the_service_pages_gateway_card_and_the_overviews_drift_warning(browser_page, live_server, owner_a,
                                                                         tenant_a):
    from tests.gateway.test_drift import engines, metered

    service = InferenceServiceFactory(tenant=tenant_a, name="chat")
    last_hour = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    engines(service, last_hour)
    metered(service, last_hour, 40_000, 10_000)
    UsageRow.objects.create(at=timezone.now(), tenant=tenant_a, service_id=service.pk, model="chat", status=200,
                            ttft_ms=42.0, duration_ms=90.0)
    page = browser_page(owner_a, viewport=PHONE)
    page.goto(live_server.url + reverse("web:service", args=["alpha", "chat"]) + "?tab=traffic")
    expect(page.locator("#gateway-drift .drift-warning")).to_contain_text("Drift over 1 %")
    expect(page.locator("#gateway-view")).to_contain_text("42.0 / 42.0 ms")
    width, wide = page_width(page)
    assert width <= 390, wide
    # The card's own elements (the rest of the service page is checked by its own tests).
    assert serious_axe_violations(page, "#gateway-drift") == []
    page.goto(live_server.url + reverse("web:overview", args=["alpha"]))
    expect(page.locator("#drift-warnings")).to_contain_text("chat")
    checked(page)
