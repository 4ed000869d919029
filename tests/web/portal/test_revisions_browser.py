"""The Revisions panel in headless Chromium: after a runtime change the panel shows two revisions, a diff
of the two is chosen and shown with the keyboard alone, a rollback is confirmed with the keyboard and the
new current revision appears; axe-core clean and no sideways scrolling at 390 px."""

from __future__ import annotations

import pytest
from django.urls import reverse
from playwright.sync_api import expect

from apps.serving.models import InferenceService
from tests.web.conftest import browser_page  # noqa: F401 (the Chromium fixture)
from tests.web.portal.page_checks import page_width, serious_axe_violations
from tests.web.portal.test_portal_browser import tab_to

pytestmark = pytest.mark.browser


def test_see_a_runtime_change_compare_and_roll_back_with_the_keyboard(browser_page, live_server,  # noqa: F811
                                                                      owner_a, catalog_a, revised):
    page = browser_page(owner_a, viewport={"width": 390, "height": 844})
    page.goto(live_server.url + reverse("web:service", args=["alpha", "chat"]) + "?tab=changes")
    panel = page.locator("#revisions")
    expect(panel.locator("#revision-2")).to_contain_text("current")
    expect(panel.locator("#revision-2")).to_contain_text("vllm-next")

    # Compare 1 → 2 with the keyboard: From revision is 1 by default, To revision 2; Tab to Compare, Enter.
    tab_to(page, "#revision-diff-form select[name=from]", limit=200)
    expect(page.get_by_label("From revision")).to_have_value("1")
    tab_to(page, "#revision-diff-form button[type=submit]", limit=10)
    page.keyboard.press("Enter")
    expect(page.locator("#revision-diff")).to_contain_text("Revision 1 → 2")
    expect(page.locator("#revision-diff")).to_contain_text("vllm-shared")

    # Roll back to 1: Tab to its button, Enter, accept the confirmation.
    page.once("dialog", lambda dialog: dialog.accept())
    tab_to(page, "#revision-1 button[type=submit]", limit=200)
    page.keyboard.press("Enter")
    expect(panel.locator("#revision-3")).to_contain_text("current")
    expect(panel.locator("#revision-3")).to_contain_text("rollback to 1")
    expect(page.locator("#messages")).to_contain_text("Rolled back")
    assert InferenceService.objects.get(pk=revised.pk).runtime == catalog_a["runtime"]

    width, wide = page_width(page)
    assert width <= 391, wide
    assert serious_axe_violations(page, "#revisions") == []
