"""Failed portal requests reach the person in headless Chromium: a 422 swaps the form with its errors and
moves focus to the invalid field; a refusal (403) shows an announced alert that takes the focus. One bad
input per form (member, token, service, catalog entry, scale): the reason is visible beside the field, the
field has the focus, and nothing changed."""

from __future__ import annotations

import pytest
from django.urls import reverse
from playwright.sync_api import expect

from apps.catalog.models import Runtime
from apps.serving.models import InferenceService
from apps.tenancy.models import Membership
from tests.web.portal.page_checks import start_service_form

pytestmark = pytest.mark.browser


def test_adding_a_member_without_an_account_shows_why_at_the_field(browser_page, live_server, owner_a):
    page = browser_page(owner_a)
    page.goto(live_server.url + reverse("web:members", args=["alpha"]))
    page.get_by_label("User").fill("nobody-xyz")
    page.get_by_role("button", name="Add member").click()

    expect(page.locator("#member-form")).to_contain_text("No user 'nobody-xyz'; they need an account")
    expect(page.locator("#member-form [name=user]")).to_be_focused()
    expect(page.locator("#member-form [name=user]")).to_have_attribute("aria-invalid", "true")


def test_a_token_name_of_spaces_shows_why_at_the_field(browser_page, live_server, operator_a):
    page = browser_page(operator_a)
    page.goto(live_server.url + reverse("web:tokens", args=["alpha"]))
    page.locator("#id_name").fill("   ")
    page.get_by_role("button", name="Create token").click()

    expect(page.locator("#token-form .errorlist")).to_be_visible()
    expect(page.locator("#id_name")).to_be_focused()


def test_a_refused_request_shows_an_alert_that_takes_the_focus(browser_page, live_server, owner_a, tenant_a):
    page = browser_page(owner_a)
    page.goto(live_server.url + reverse("web:members", args=["alpha"]))
    alert = page.locator("#request-error")
    expect(alert).to_be_hidden()
    # The owner's role is taken away while the page is open: the server now answers 403.
    Membership.objects.filter(user=owner_a, tenant=tenant_a).update(role="viewer")
    page.get_by_label("User").fill("someone")
    page.get_by_role("button", name="Add member").click()

    expect(alert).to_be_visible()
    expect(alert).to_have_attribute("role", "alert")
    expect(alert).to_contain_text("You are not allowed to do this here.")
    expect(alert).to_be_focused()


DNS_LABEL = "Use a DNS-1123 label: lower-case letters, digits and '-'"


def test_a_service_name_with_spaces_shows_why_at_the_field(browser_page, live_server, operator_a, cluster, catalog_a):
    page = browser_page(operator_a)
    start_service_form(page, live_server.url, "Chat Bot")
    page.get_by_role("button", name="Create service").click()

    name = page.locator("#id_name")
    expect(name).to_be_focused()
    expect(name).to_have_attribute("aria-invalid", "true")
    expect(page.locator(".field", has=name).locator(".errorlist")).to_be_visible()
    expect(page.locator(".field", has=name).locator(".errorlist")).to_contain_text(DNS_LABEL)
    assert not InferenceService.objects.exists()


def test_a_catalog_name_with_spaces_shows_why_at_the_field(browser_page, live_server, operator_a):
    page = browser_page(operator_a)
    page.goto(live_server.url + reverse("web:catalog-create", args=["alpha", "runtimes"]))
    page.get_by_label("Name", exact=True).fill("My vLLM")
    page.get_by_label("Image").fill("vllm/vllm-openai")
    page.get_by_label("Tag").fill("v0.33.0")
    page.locator("#catalog-form").get_by_role("button", name="Save").click()

    name = page.get_by_label("Name", exact=True)
    expect(name).to_be_focused()
    expect(name).to_have_attribute("aria-invalid", "true")
    error = page.locator("#catalog-form .field", has=name).locator(".errorlist")
    expect(error).to_be_visible()
    expect(error).to_contain_text(DNS_LABEL)
    assert not Runtime.objects.filter(tenant__slug="alpha").exists()


def test_replicas_above_the_maximum_show_why_at_the_field(browser_page, live_server, operator_a, service_a):
    page = browser_page(operator_a)
    page.goto(live_server.url + reverse("web:service-scale", args=["alpha", "chat"]))
    page.get_by_label("Replicas").fill("9")  # the pool's max is 4
    page.get_by_role("button", name="Apply").click()

    replicas = page.get_by_label("Replicas")
    expect(replicas).to_be_focused()
    expect(replicas).to_have_attribute("aria-invalid", "true")
    error = page.locator(".field", has=replicas).locator(".errorlist")
    expect(error).to_be_visible()
    expect(error).to_contain_text("replicas (9) must not exceed max_replicas (4).")
    service_a.refresh_from_db()
    assert (service_a.pools.get().replicas, service_a.generation) == (1, 1)
