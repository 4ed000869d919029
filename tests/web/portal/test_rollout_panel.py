"""The service page's Rollout panel: the canary strategy's steps, the rollout's state and its decisions as a
timeline (both revisions' TTFT p95 side by side, the reason in words), and pause / resume / promote / abort for
writers through the same actions as the API; headless Chromium for the keyboard flow and axe."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from datetime import timezone as fixed_zone

import pytest
from django.urls import reverse
from django.utils import timezone
from playwright.sync_api import expect

from apps.rollouts.controller import step_rollout
from apps.rollouts.models import Rollout
from apps.web.rollout_panel import rollout_window
from tests.rollouts.conftest import chat_rolling_out, meter
from tests.web.conftest import browser_page  # noqa: F401 (the Chromium fixture)
from tests.web.portal.page_checks import page_width, serious_axe_violations
from tests.web.portal.test_portal_browser import tab_to

STEADY = [100 + i % 50 for i in range(200)]  # p95 of 100…149 ms four times over: rank 190 of 200 is 147 ms


@pytest.fixture
def judged(tenant_a, cluster, catalog_a, owner_a):
    """chat with a canary strategy; revision 2 (a new runtime) rolling out, its first window passed: now at 50 %."""
    service = chat_rolling_out(tenant_a, cluster, catalog_a, owner_a)
    # The first window began two minutes ago (its minimum is one), so it is judged now.
    began = timezone.now() - timedelta(minutes=2)
    Rollout.objects.filter(service=service).update(step_started_at=began, window_started_at=began)
    meter(service, began, canary_pod="chat-r2-5c6d-xyz12", ttfts_ms=STEADY, stable_ttfts_ms=STEADY)
    step_rollout(Rollout.objects.get(service=service).pk)
    return service


def page_url(name="chat"):
    return reverse("web:service", args=["alpha", name])


def test_the_page_shows_the_steps_the_state_and_the_timeline(client, viewer_a, judged):
    client.force_login(viewer_a)
    html = client.get(page_url()).content.decode()
    assert "Canary strategy: 5 % → 50 % → 100 %" in html
    assert "Revision 1 → 2" in html and "at 50 % of the requests" in html
    assert "147 ms / 147 ms" in html  # both revisions' TTFT p95 in the window judged
    assert "advancing to 50 %." in html
    assert 'id="rollout-actions"' not in html  # viewers get no buttons


def test_a_refused_action_is_shown_in_the_panel(client, operator_a, judged):
    client.force_login(operator_a)
    url = reverse("web:rollout-action", args=["alpha", "chat", "resume"])
    response = client.post(url, HTTP_HX_REQUEST="true")
    assert response.status_code == 422
    assert "is running, not paused" in response.content.decode()
    assert Rollout.objects.get(service=judged).phase == "running"


def test_viewers_cannot_act(client, viewer_a, judged):
    client.force_login(viewer_a)
    response = client.post(reverse("web:rollout-action", args=["alpha", "chat", "abort"]))
    assert response.status_code in (403, 404)
    assert Rollout.objects.get(service=judged).phase == "running"


@pytest.mark.browser
def test_pause_and_resume_with_the_keyboard_and_see_them_on_the_timeline(browser_page, live_server,  # noqa: F811
                                                                         operator_a, judged):
    page = browser_page(operator_a, viewport={"width": 390, "height": 844})
    page.goto(live_server.url + page_url() + "?tab=changes")
    panel = page.locator("#rollout")
    expect(panel.locator("#rollout-phase")).to_have_text("Running")
    expect(panel.locator("#rollout-timeline")).to_contain_text("147 ms / 147 ms")

    tab_to(page, "#rollout-actions button", limit=200)
    expect(page.locator(":focus")).to_have_text("Pause")
    page.keyboard.press("Enter")
    expect(panel.locator("#rollout-phase")).to_have_text("Paused")
    expect(panel.locator("#rollout-timeline tbody tr").first).to_contain_text("Paused by oscar-operator at 50 %.")
    expect(page.locator("#messages")).to_contain_text("Paused: the rollout of revision 2 is paused.")

    tab_to(page, "#rollout-actions button", limit=200)
    expect(page.locator(":focus")).to_have_text("Resume")
    page.keyboard.press("Enter")
    expect(panel.locator("#rollout-phase")).to_have_text("Running")
    assert Rollout.objects.get(service=judged).phase == "running"

    width, wide = page_width(page)
    assert width <= 391, wide
    assert serious_axe_violations(page, "#rollout") == []


def test_the_rollout_window_in_words_names_the_day_once_unless_it_ends_on_another():
    start = datetime(2026, 12, 6, 23, 40, 12, tzinfo=UTC)
    assert rollout_window(start, None) == "the rollout's window, 2026-12-06 23:40 UTC to now"
    assert rollout_window(start, datetime(2026, 12, 6, 23, 58, tzinfo=UTC)) == \
        "the rollout's window, 2026-12-06 23:40 to 23:58 UTC"
    assert rollout_window(start, datetime(2026, 12, 7, 0, 20, tzinfo=UTC)) == \
        "the rollout's window, 2026-12-06 23:40 to 2026-12-07 00:20 UTC"
    # Another zone's times are said in UTC.
    paris = fixed_zone(timedelta(hours=1))
    assert rollout_window(datetime(2026, 12, 7, 0, 40, tzinfo=paris), None) == \
        "the rollout's window, 2026-12-06 23:40 UTC to now"
