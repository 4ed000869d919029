"""The portal in headless Chromium: keyboard-only token creation and use against the API, viewers without
write controls (and refused on the server), cross-tenant 404, a stale edit, no horizontal scrolling at
390 px, and axe-core finding no serious or critical violation on any page."""

from __future__ import annotations

import json
import urllib.request

import pytest
from django.conf import settings
from django.urls import reverse
from playwright.sync_api import expect

from apps.core.choices import AuditVia
from apps.serving.actions import save_service
from apps.serving.models import InferenceService
from apps.serving.rendering.spec import PoolSpec
from tests.factories import InferenceServiceFactory, issue_token
from tests.web.portal.conftest import page_urls
from tests.web.portal.page_checks import page_width, serious_axe_violations, tab_to

pytestmark = pytest.mark.browser


@pytest.fixture
def ready_page_world(tenant_a, service_a, catalog_a):
    InferenceService.objects.filter(pk=service_a.pk).update(
        phase="Ready", endpoint="http://chat.tenant-alpha.svc.cluster.local:8000", ready_replicas=1)
    return service_a


def test_a_token_is_created_with_the_keyboard_alone_and_works_against_the_api(browser_page, live_server, operator_a,
                                                                              service_a):
    page = browser_page(operator_a, permissions=["clipboard-read", "clipboard-write"])
    page.goto(live_server.url + reverse("web:tokens", args=["alpha"]))

    tab_to(page, "#id_name")
    page.keyboard.type("ci-deploy")
    page.keyboard.press("Tab")
    page.keyboard.press("ArrowDown")  # 30 days → 90 days
    tab_to(page, "#token-form button[type=submit]")
    page.keyboard.press("Enter")

    issued = page.locator("#issued")
    expect(issued).to_be_visible(timeout=10000)
    assert page.evaluate("document.activeElement.id") == "issued"  # focus moves to what must be copied
    page.evaluate("window.loadedOnce = true")
    token = page.locator("#issued-token").input_value()
    tab_to(page, "button.copy")
    page.keyboard.press("Enter")
    expect(page.locator("button.copy")).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == token
    expect(page.locator("#token-table")).to_contain_text("ci-deploy")
    expect(page.locator("#messages")).to_contain_text("shown only once")
    assert page.evaluate("window.loadedOnce") is True  # an htmx swap, not a reload

    request = urllib.request.Request(live_server.url + "/api/v1/services/",
                                     headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        names = [s["name"] for s in json.loads(response.read())["results"]]
    assert names == ["chat"]

    page.reload()
    expect(page.locator("#token-table")).not_to_contain_text(token)
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Revoke token ci-deploy").click()
    expect(page.locator("#token-table")).to_contain_text("revoked")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 401


def test_viewers_see_no_write_controls_and_their_writes_are_refused(browser_page, live_server, viewer_a, owner_a,
                                                                    ready_page_world):
    page = browser_page(viewer_a)
    page.goto(live_server.url + reverse("web:service", args=["alpha", "chat"]) + "?tab=playground")
    expect(page.locator("#playground")).to_be_visible()
    assert page.locator("#service-actions").count() == 0
    assert page.locator("#pg-send").count() == 0
    page.goto(live_server.url + reverse("web:tokens", args=["alpha"]))
    assert page.locator("#token-form").count() == 0
    page.goto(live_server.url + reverse("web:members", args=["alpha"]))
    assert page.locator("#member-form").count() == 0 and page.locator("select[name=role]").count() == 0

    # The same POST with a valid CSRF token: 403 for the viewer, accepted for the owner.
    def post(as_page, url, form):
        csrf = next(c["value"] for c in as_page.context.cookies() if c["name"] == settings.CSRF_COOKIE_NAME)
        return as_page.request.post(live_server.url + url, form=form, headers={"X-CSRFToken": csrf},
                                    max_redirects=0)

    url = reverse("web:service-scale", args=["alpha", "chat"])
    form = {"version": str(ready_page_world.version), "engine-replicas": "2", "engine-min_replicas": "1",
            "engine-max_replicas": "4"}
    assert post(page, url, form).status == 403
    assert ready_page_world.pools.get().replicas == 1
    owner = browser_page(owner_a)
    owner.goto(live_server.url + url)
    assert post(owner, url, form).status == 302
    assert ready_page_world.pools.get().replicas == 2


def test_another_tenants_urls_answer_404_in_the_browser(browser_page, live_server, owner_a, tenant_b, member_b):
    service = InferenceServiceFactory(tenant=tenant_b, name="secret")
    token, _ = issue_token(member_b, tenant_b, name="b")
    page = browser_page(owner_a)
    for url in page_urls("bravo", service.name, token.pk, 0, 0):
        assert page.goto(live_server.url + url).status == 404, url
    expect(page.locator("body")).not_to_contain_text("secret")


def test_a_stale_edit_shows_the_change_made_meanwhile_and_applies_mine_on_top(browser_page, live_server, operator_a,
                                                                              owner_a, service_a):
    page = browser_page(operator_a)
    page.goto(live_server.url + reverse("web:service-edit", args=["alpha", "chat"]))
    page.get_by_label("Prefix caching").select_option("true")

    # Meanwhile the owner raises the pool's maximum (through the same domain function as every door).
    pool = service_a.pools.get()
    save_service(InferenceService.objects.get(pk=service_a.pk), adapters=[], actor=owner_a, via=AuditVia.API,
                 pools=[PoolSpec(role="engine", replicas=1, min_replicas=1, max_replicas=6,
                                 gpus_per_replica=pool.gpus_per_replica, gpu_type=pool.gpu_type)])

    page.get_by_role("button", name="Save changes").click()
    stale = page.locator("#stale")
    expect(stale).to_be_visible()
    expect(stale).to_contain_text("olivia-owner saved a newer version")
    expect(stale).to_contain_text("engine pool: max replicas")
    assert page.evaluate("document.activeElement.id") == "stale"
    expect(page.get_by_label("Prefix caching")).to_have_value("true")  # my value is kept

    page.get_by_role("button", name="Save changes").click()
    expect(page.locator("#messages")).to_contain_text("Service chat updated")
    service_a.refresh_from_db()
    assert service_a.engine_settings["enable_prefix_caching"] is True
    assert service_a.pools.get().max_replicas == 6  # theirs stays


def _portal_pages(service, catalog) -> list[str]:
    pages = [url for url in page_urls("alpha", service.name, 0, 0, catalog["private_model"].pk)
             if not url.endswith(("/series/", "/playground/"))]
    return [reverse("web:home"), reverse("web:services"), *pages]


def test_no_page_scrolls_sideways_at_390_px(browser_page, live_server, owner_a, ready_page_world, catalog_a):
    page = browser_page(owner_a, viewport={"width": 390, "height": 844})
    for url in _portal_pages(ready_page_world, catalog_a):
        page.goto(live_server.url + url)
        page.wait_for_load_state("networkidle")
        width, wide = page_width(page)
        assert width <= 390, f"{url} is {width} px wide at a 390 px viewport: {wide}"


def test_axe_finds_no_serious_or_critical_violation_on_any_portal_page(browser_page, live_server, owner_a,
                                                                       ready_page_world, catalog_a):
    page = browser_page(owner_a)
    problems = {}
    for url in _portal_pages(ready_page_world, catalog_a):
        page.goto(live_server.url + url)
        page.wait_for_load_state("networkidle")
        serious = serious_axe_violations(page)
        if serious:
            problems[url] = serious
    assert not problems, problems


def test_a_service_page_left_open_returns_to_the_list_once_the_service_is_gone(browser_page, live_server,
                                                                               viewer_a, service_a):
    page = browser_page(viewer_a)
    page.goto(live_server.url + reverse("web:service", args=["alpha", "chat"]))
    expect(page.locator("#phase")).to_have_text("Pending")
    InferenceService.objects.filter(pk=service_a.pk).delete()  # what the reconciler does once the objects are gone
    page.wait_for_url(live_server.url + reverse("web:tenant-services", args=["alpha"]), timeout=20_000)
    expect(page.locator("#service-rows")).to_contain_text("No services yet")
