"""The GPU quota page in headless Chromium: staff change a tenant's queue; a bad input is refused by the queue's
own rules (TenantQueue.clean(), the API's), with the reason beside the input, the focus on it, and nothing saved."""

from __future__ import annotations

import pytest
from django.urls import reverse
from playwright.sync_api import expect

from apps.tenancy.models import TenantQueue

pytestmark = pytest.mark.browser


def test_a_negative_quota_shows_why_at_its_input_and_takes_the_focus(browser_page, live_server, staff, tenant_a):
    queue = TenantQueue.objects.get(tenant=tenant_a)
    page = browser_page(staff)
    page.goto(live_server.url + reverse("web:queues", args=["alpha"]))
    page.get_by_label("Nominal GPUs, NVIDIA L4 24GB").fill("-2")
    page.get_by_role("button", name="Save queue").click()

    box = page.get_by_label("Nominal GPUs, NVIDIA L4 24GB")
    expect(box).to_be_focused()
    expect(box).to_have_attribute("aria-invalid", "true")
    cell = page.locator("td.field", has=box)
    expect(cell.locator(".errorlist")).to_be_visible()
    expect(cell.locator(".errorlist")).to_contain_text("l4-24gb: -2 is not a whole, non-negative number of GPUs.")
    queue.refresh_from_db()
    assert queue.nominal == {"*": 64}


def test_staff_save_a_borrowing_limit_and_the_page_shows_it(browser_page, live_server, staff, tenant_a, tenant_b):
    page = browser_page(staff)
    page.goto(live_server.url + reverse("web:queues", args=["alpha"]))
    TenantQueue.objects.filter(tenant=tenant_b).update(lending_limit={"*": 16})  # bravo lends 16 of its 64
    page.get_by_label("Borrowing limit, any GPU type").fill("8")
    page.get_by_label("Weight").fill("2")
    page.get_by_role("button", name="Save queue").click()

    expect(page.locator("#messages")).to_contain_text("saved")
    queue = TenantQueue.objects.get(tenant=tenant_a)
    assert (queue.borrowing_limit, queue.weight) == ({"*": 8}, 2)
