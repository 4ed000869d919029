"""Signing in with the keyboard in headless Chromium, and the page a locked-out sign-in gets."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.factories import PASSWORD


@pytest.fixture
def page(browser_contexts):
    """A signed-out page at 390 px."""
    return browser_contexts(viewport={"width": 390, "height": 844}).new_page()


def sign_in(page, url: str, username: str, password: str) -> None:
    page.goto(url + "/login/")
    page.keyboard.press("Tab")  # the first field is reachable from the keyboard
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_label("Password").press("Enter")


@pytest.mark.browser
def test_repeated_failures_lead_to_the_paused_page_and_the_right_password_waits(page, live_server, owner_a):
    for _ in range(4):
        sign_in(page, live_server.url, "olivia-owner", "wrong")
        expect(page.get_by_text("Please enter a correct username and password")).to_be_visible()

    sign_in(page, live_server.url, "olivia-owner", "wrong")
    expect(page.get_by_role("heading", name="Sign-in paused")).to_be_visible()
    expect(page.get_by_role("alert")).to_contain_text("Try again in 15 minutes")

    sign_in(page, live_server.url, "olivia-owner", PASSWORD)
    expect(page.get_by_role("heading", name="Sign-in paused")).to_be_visible()
    page.get_by_role("link", name="Back to the sign-in page").focus()
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="Log in")).to_be_visible()
