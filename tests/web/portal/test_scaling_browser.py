"""The autoscaling parts of the portal in headless Chromium: an owner sets a builtin policy in the service
form with the keyboard alone and the API shows it; the service page with its Scaling panel and the Overview
with decisions are axe-core clean and do not scroll sideways at 390 px."""

from __future__ import annotations

import json
import urllib.request
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone
from playwright.sync_api import expect

from apps.autoscaling.models import PoolAutoscalerState, ScalingDecision
from apps.serving.models import InferenceService
from tests.factories import issue_token
from tests.web.portal.page_checks import page_width, serious_axe_violations
from tests.web.portal.test_portal_browser import tab_to

pytestmark = pytest.mark.browser


def type_into(page, label: str, text: str) -> None:
    """Tab to the input labelled `label`, clear it and type, keys only."""
    input_id = page.get_by_label(label, exact=True).get_attribute("id")
    tab_to(page, f"#{input_id}", limit=120)
    page.keyboard.press("Control+A")
    page.keyboard.type(text)


def test_an_owner_sets_a_builtin_policy_with_the_keyboard_and_the_api_shows_it(browser_page, live_server, owner_a,
                                                                               tenant_a, service_a):
    page = browser_page(owner_a)
    page.goto(live_server.url + reverse("web:service-edit", args=["alpha", "chat"]))
    tab_to(page, "#id_autoscaler", limit=120)
    page.keyboard.type("Built")  # a select's type-ahead picks "Built-in (LLM signals)"
    expect(page.get_by_label("Autoscaler", exact=True)).to_have_value("builtin")
    type_into(page, "Target waiting requests per replica", "5")
    type_into(page, "Target KV-cache usage (0–1)", "0.85")
    type_into(page, "Target TTFT p95 (seconds)", "1.5")
    type_into(page, "Scale-down stabilization window (seconds)", "120")
    type_into(page, "Max", "3")
    tab_to(page, "#service-form button[type=submit]", limit=120)
    page.keyboard.press("Enter")
    expect(page.locator("#messages")).to_contain_text("Service chat updated")
    expect(page.locator("#scaling-autoscaler")).to_have_text("builtin")

    _, plaintext = issue_token(owner_a, tenant_a, name="check")
    request = urllib.request.Request(f"{live_server.url}/api/v1/services/{service_a.pk}/",
                                     headers={"Authorization": f"Bearer {plaintext}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        body = json.loads(response.read())
    spec = body["autoscaling"]
    targets = {"waiting_requests_per_replica": 5, "kv_cache_usage": 0.85, "ttft_p95_seconds": 1.5}
    assert spec["autoscaler"] == "builtin" and spec["targets"] == targets
    assert spec["pools"] == {"engine": {"targets": targets}}  # one pool: every service-wide target applies
    assert spec["behavior"]["scale_down"]["stabilization_window_s"] == 120
    assert spec["behavior"]["scale_up"]["stabilization_window_s"] == 0  # Kubernetes' default, written out
    assert [(p["role"], p["min_replicas"], p["max_replicas"]) for p in body["pools"]] == [("engine", 1, 3)]


def test_a_bad_target_shows_clean_s_error_beside_its_box(browser_page, live_server, owner_a, service_a):
    page = browser_page(owner_a)
    page.goto(live_server.url + reverse("web:service-edit", args=["alpha", "chat"]))
    page.get_by_label("Autoscaler", exact=True).select_option("builtin")
    page.get_by_label("Target KV-cache usage (0–1)").fill("1.5")
    page.get_by_role("button", name="Save changes").click()
    box = page.get_by_label("Target KV-cache usage (0–1)")
    expect(box).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#service-form")).to_contain_text("targets.kv_cache_usage must be a number in (0, 1]")
    assert InferenceService.objects.get(pk=service_a.pk).autoscaling == {"autoscaler": "none"}


@pytest.fixture
def scaled_world(service_a):
    """service_a Ready and scaled by the built-in autoscaler, with scaled, held and blocked decisions."""
    InferenceService.objects.filter(pk=service_a.pk).update(
        phase="Ready", endpoint="http://chat.tenant-alpha.svc.cluster.local:8000", ready_replicas=2,
        autoscaling={"autoscaler": "builtin", "targets": {"waiting_requests_per_replica": 4},
                     "pools": {"engine": {"targets": {"waiting_requests_per_replica": 4}}}})
    now = timezone.now()
    rows = [("scaled", 1, 4, "waiting 14.2 per replica > target 4 (×3.55) → 4 replicas; limited by scale-up policy "
                             "+4 pods / 15 s"),
            ("held", 4, 4, "held at 4 (scale-down stabilization 300 s)"),
            ("blocked", 4, 6, "GPU quota exceeded: 8 of 8 GPUs of tenant alpha in use; needed 2 more")]
    for i, (action, current, desired, reason) in enumerate(rows):
        ScalingDecision.objects.create(
            service=service_a, pool="engine", time=now - timedelta(seconds=60 - 10 * i), current_replicas=current,
            desired_replicas=desired, raw_recommendation=desired, stabilized=desired, limited=desired,
            rule="metric", action=action, reason=reason)
    PoolAutoscalerState.objects.create(service=service_a, pool="engine", evaluations=12, unchanged=9, cold_start_s=8)
    return service_a


def _pages():
    return [reverse("web:overview", args=["alpha"]), reverse("web:service", args=["alpha", "chat"]) + "?tab=scaling"]


def test_the_overview_links_a_decision_to_the_scaling_panel(browser_page, live_server, viewer_a, scaled_world):
    page = browser_page(viewer_a)
    page.goto(live_server.url + reverse("web:overview", args=["alpha"]))
    expect(page.locator("#decisions")).to_contain_text("GPU quota exceeded")
    page.get_by_role("link", name="chat engine scaling").first.click()
    page.wait_for_url("**/t/alpha/services/chat/?tab=scaling#scaling")
    expect(page.locator("#scaling")).to_contain_text("waiting 14.2 per replica > target 4")


def test_scaling_pages_do_not_scroll_sideways_at_390_px(browser_page, live_server, owner_a, scaled_world):
    page = browser_page(owner_a, viewport={"width": 390, "height": 844})
    for url in _pages():
        page.goto(live_server.url + url)
        page.wait_for_load_state("networkidle")
        expect(page.locator("#decisions, #scaling .decision").first).to_be_visible()
        width, wide = page_width(page)
        assert width <= 390, f"{url} is {width} px wide at a 390 px viewport: {wide}"


def test_axe_finds_no_serious_or_critical_violation_on_the_scaling_pages(browser_page, live_server, owner_a,
                                                                          scaled_world):
    page = browser_page(owner_a)
    problems = {}
    for url in _pages():
        page.goto(live_server.url + url)
        page.wait_for_load_state("networkidle")
        expect(page.locator("#decisions, #scaling .decision").first).to_be_visible()
        serious = serious_axe_violations(page)
        if serious:
            problems[url] = serious
    assert not problems, problems
