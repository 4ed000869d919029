"""Failed portal requests reach the person in headless Chromium: a 422 swaps the form with its errors and
moves focus to the invalid field; a refusal (403) shows an announced alert that takes the focus."""

from __future__ import annotations

import pytest
from django.urls import reverse
from playwright.sync_api import expect

from apps.tenancy.models import Membership

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
