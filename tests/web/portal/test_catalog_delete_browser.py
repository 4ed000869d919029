"""The catalog's Delete in headless Chromium under the Content-Security-Policy: it asks on a page of its own
(no script, so nothing for the policy to block), Cancel keeps the entry, Delete removes it, both reached by
keyboard; a name with quotes and markup is shown as text; no dialog, no violation, axe-core clean."""

from __future__ import annotations

import pytest
from django.urls import reverse
from playwright.sync_api import expect

from apps.catalog.models import Model
from tests.factories import ModelFactory
from tests.web.conftest import browser_page  # noqa: F401 (the Chromium fixture)
from tests.web.portal.page_checks import serious_axe_violations, tab_to
from tests.web.test_csp_browser import watched

pytestmark = pytest.mark.browser


def test_delete_asks_first_cancel_keeps_and_delete_removes(browser_page, live_server, owner_a):  # noqa: F811
    ModelFactory(tenant=owner_a.memberships.get().tenant, name="to-go")
    page = browser_page(owner_a)
    violations = watched(page, live_server)
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    catalog = live_server.url + reverse("web:catalog", args=["alpha", "models"])
    page.goto(catalog)

    tab_to(page, 'a[aria-label="Delete to-go"]')
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="Delete model to-go?")).to_be_visible()
    expect(page.get_by_text("This cannot be undone.")).to_be_visible()
    assert serious_axe_violations(page, "main") == []

    tab_to(page, "#delete-cancel")
    page.keyboard.press("Enter")
    expect(page.get_by_role("cell", name="to-go", exact=True)).to_be_visible()
    assert Model.objects.filter(name="to-go").exists()

    page.get_by_role("link", name="Delete to-go").click()
    tab_to(page, "#delete-confirm")
    page.keyboard.press("Enter")
    expect(page.get_by_text("to-go deleted.")).to_be_visible()
    expect(page.get_by_role("cell", name="to-go", exact=True)).to_have_count(0)
    assert not Model.objects.filter(name="to-go").exists()
    assert dialogs == [] and page.evaluate("window.__violations") == [] and violations == []


def test_a_name_with_quotes_and_markup_is_shown_as_text(browser_page, live_server, owner_a):  # noqa: F811
    # Not a valid name (names are DNS labels); a row written another way must still not become markup or script.
    name = """x'");alert(1)//<b id="injected">bold</b>"""
    entry = ModelFactory(tenant=owner_a.memberships.get().tenant, name=name)  # the factory skips full_clean()
    page = browser_page(owner_a)
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(live_server.url + reverse("web:catalog", args=["alpha", "models"]))

    page.get_by_role("link", name=f"Delete {name}").click()

    expect(page.get_by_role("heading", name=f"Delete model {name}?")).to_be_visible()
    assert page.locator("#injected").count() == 0 and dialogs == []
    page.get_by_role("button", name="Delete model").click()
    expect(page.get_by_text(f"{name} deleted.")).to_be_visible()
    assert not Model.objects.filter(pk=entry.pk).exists() and page.locator("#injected").count() == 0
