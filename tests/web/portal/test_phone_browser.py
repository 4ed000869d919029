"""Tables on a 390 px phone, in headless Chromium: every list becomes one card per row, with the first row's
Phase and Ready on screen (labelled, inside the viewport, not clipped by a scroll box), nothing reachable
only by sideways scrolling, the Scaling panel's caption whole, "Latest changes" rows using the full width,
and axe-core clean at that width."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from apps.autoscaling.models import ScalingDecision
from apps.core.audit import record_change, snapshot
from apps.serving.models import InferenceService, ServiceObservation
from tests.factories import issue_token
from tests.web.portal.page_checks import serious_axe_violations

pytestmark = pytest.mark.browser
PHONE = {"width": 390, "height": 844}

# What the page shows in the first row of the column headed `name` of table `table`: its label, and whether
# its box lies inside the viewport and inside every ancestor that could clip it.
CELL = """([table, name]) => {
  const t = document.querySelector(table);
  const heads = [...t.tHead.rows[0].cells].map(c => c.textContent.trim());
  const cell = t.tBodies[0].rows[0].cells[heads.indexOf(name)];
  const r = cell.getBoundingClientRect();
  let clipped = false;
  for (let a = cell.parentElement; a && a !== document.body; a = a.parentElement) {
    const s = getComputedStyle(a);
    if (s.overflowX !== 'visible') { const b = a.getBoundingClientRect(); clipped ||= r.left < b.left || r.right > b.right + 1; }
  }
  return {text: cell.textContent.trim(), label: getComputedStyle(cell, '::before').content,
          visible: r.width > 0 && r.height > 0 && getComputedStyle(cell).visibility === 'visible',
          inside: r.left >= 0 && r.right <= innerWidth, clipped};
}"""
# Boxes whose content is wider than the box: what a person could only reach by scrolling sideways.
SIDEWAYS = """() => [...document.querySelectorAll('main *')].filter(e => {
  const s = getComputedStyle(e);
  return (s.overflowX === 'auto' || s.overflowX === 'scroll') && e.scrollWidth > e.clientWidth + 1;
}).map(e => e.tagName + '#' + e.id + '.' + e.className)"""


@pytest.fixture
def phone_world(tenant_a, service_a, owner_a, catalog_a):
    before = snapshot(service_a)
    InferenceService.objects.filter(pk=service_a.pk).update(phase="Ready", ready_replicas=1)
    service_a.refresh_from_db()
    record_change(actor=owner_a, obj=service_a, action="update", via="portal", before=before)
    issue_token(owner_a, tenant_a, name="ci-deploy")
    now = timezone.now()
    ServiceObservation.objects.create(service=service_a, observed_at=now, events=[
        {"type": "Normal", "reason": "Started", "object": "Pod/chat-abc-1", "count": 1,
         "message": "Started container engine", "time": (now - timedelta(minutes=4)).isoformat()}],
        pods=[{"name": "chat-abc-1", "role": "engine", "phase": "Running", "ready": True, "node": "gpu-0",
               "reason": "", "message": "", "restarts": 0, "gpus": 1}])
    service_a.autoscaling = {"autoscaler": "builtin", "targets": {"waiting_requests_per_replica": 4}}
    service_a.save(update_fields=["autoscaling"])
    ScalingDecision.objects.create(service=service_a, pool="engine", time=now, current_replicas=1, desired_replicas=2,
                                   raw_recommendation=2, stabilized=2, limited=2, rule="metric", action="scaled",
                                   reason="waiting 9.0 per replica > target 4 (×2.25) → 2 replicas")
    return service_a


def _goto(page, url):
    page.goto(url)
    page.wait_for_load_state("networkidle")


def test_service_lists_show_phase_and_ready_first_on_a_phone(browser_page, live_server, owner_a, phone_world):
    page = browser_page(owner_a, viewport=PHONE)
    lists = {reverse("web:home"): "#fleet-services", reverse("web:services"): "#services-table",
             reverse("web:overview", args=["alpha"]): "#overview-services",
             reverse("web:tenant-services", args=["alpha"]): "#services-table"}
    for url, table in lists.items():
        _goto(page, live_server.url + url)
        for column, text in (("Phase", "Ready"), ("Ready", "1")):
            cell = page.evaluate(CELL, [table, column])
            assert cell["text"] == text, (url, column, cell)
            assert cell["label"] == f'"{column}"', (url, column, cell)
            assert cell["visible"] and cell["inside"] and not cell["clipped"], (url, column, cell)


def test_no_list_needs_sideways_scrolling_on_a_phone_and_axe_stays_clean(browser_page, live_server, owner_a,
                                                                           phone_world, catalog_a):
    page = browser_page(owner_a, viewport=PHONE)
    s = ["alpha", "chat"]
    urls = [reverse("web:home"), reverse("web:services"), reverse("web:overview", args=["alpha"]),
            reverse("web:tenant-services", args=["alpha"]), reverse("web:service", args=s),
            reverse("web:tokens", args=["alpha"]), reverse("web:members", args=["alpha"]),
            reverse("web:catalog", args=["alpha", "models"]), reverse("web:catalog", args=["alpha", "runtimes"]),
            reverse("web:audit", args=["alpha"])]
    problems = {}
    for url in urls:
        _goto(page, live_server.url + url)
        width = page.evaluate("document.documentElement.scrollWidth")
        sideways = page.evaluate(SIDEWAYS)
        serious = serious_axe_violations(page)
        if width > PHONE["width"] or sideways or serious:
            problems[url] = {"width": width, "sideways": sideways, "axe": serious}
    assert not problems, problems


def test_the_scaling_caption_and_latest_changes_fit_a_phone(browser_page, live_server, owner_a, phone_world):
    page = browser_page(owner_a, viewport=PHONE)
    _goto(page, live_server.url + reverse("web:service", args=["alpha", "chat"]) + "?tab=scaling")
    caption = page.locator("#scaling-pools caption")
    box = caption.bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"], box
    assert page.evaluate("(c) => c.scrollWidth <= c.clientWidth + 1", caption.element_handle())

    _goto(page, live_server.url + reverse("web:overview", args=["alpha"]))
    row = page.locator("#aud-h ~ div table tbody tr").first
    change = row.locator("td").last
    # The change list takes the card's whole width instead of a column a few words wide.
    assert change.bounding_box()["width"] >= 0.9 * row.bounding_box()["width"]
    assert "generation" in change.inner_text() or "phase" in change.inner_text()
