"""Every page carries a Content-Security-Policy, and the portal, the admin and the API docs run under it
without a single violation in real Chromium; the docs render their operations with the network blocked
(Swagger UI comes from our static files, not a CDN)."""

from __future__ import annotations

from urllib.parse import urlparse

import pytest

from tests.factories import ClusterFactory

# Reported violations, gathered in the page (the event fires for blocked scripts, styles and frames).
LISTEN = """() => { window.__violations = [];
  document.addEventListener('securitypolicyviolation',
    e => window.__violations.push(e.violatedDirective + ' ' + e.blockedURI)); }"""


def watched(page, live_server):
    """The page with violations recorded, console CSP errors kept, and every non-local request refused."""
    messages = []
    page.on("console", lambda m: messages.append(m.text) if "Content Security Policy" in m.text else None)
    host = urlparse(live_server.url).hostname
    page.route("**/*", lambda route: route.continue_() if urlparse(route.request.url).hostname == host
               else route.abort())
    page.add_init_script(f"({LISTEN})()")
    return messages


PAGES = ["/", "/t/alpha/", "/t/alpha/services/", "/t/alpha/services/new/", "/t/alpha/members/",
         "/admin/", "/admin/serving/inferenceservice/", "/admin/tenancy/tenant/add/", "/api/docs/",
         "/api/redoc/"]


@pytest.mark.parametrize("path", PAGES)
def test_a_page_runs_without_a_csp_violation(browser_page, live_server, staff, owner_a, path):
    ClusterFactory(name="shared", open_to_all_tenants=True)
    user = staff if path.startswith(("/admin", "/api")) or path == "/" else owner_a
    page = browser_page(user)
    messages = watched(page, live_server)

    response = page.goto(live_server.url + path)
    page.wait_for_load_state("networkidle")

    policy = response.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in policy and "script-src 'self'" in policy and "unsafe-inline" not in policy
    assert page.evaluate("window.__violations") == []
    assert messages == []


def test_the_api_docs_render_their_operations_offline(browser_page, live_server, staff):
    page = browser_page(staff)
    watched(page, live_server)

    page.goto(live_server.url + "/api/docs/")

    operation = page.locator(".opblock-summary-path", has_text="/api/v1/services/").first
    operation.wait_for(state="visible", timeout=30000)
    assert page.locator(".opblock").count() >= 50


def test_the_redoc_page_renders_its_operations_offline(browser_page, live_server, staff):
    page = browser_page(staff)
    messages = watched(page, live_server)

    page.goto(live_server.url + "/api/redoc/")

    # ReDoc lists each operation in its menu, and renders the operation's path in the page.
    page.locator("[role=menuitem]", has_text="v1_services_create").first.wait_for(state="attached", timeout=30000)
    page.locator("text=/api/v1/services/{id}/scale/").first.wait_for(state="attached", timeout=30000)
    assert page.locator("[data-section-id^='operation/']").count() >= 50
    assert page.evaluate("window.__violations") == []
    assert messages == []


def test_the_service_page_draws_its_charts_without_a_csp_violation(browser_page, live_server, viewer_a, tenant_a):
    # Plotly builds its charts in the page (styles included), and the Traffic tab fetches it by script
    # (plotly-on-demand.js); under the policy both must still work, silently.
    from django.urls import reverse

    from tests.factories import InferenceServiceFactory
    from tests.web.conftest import point

    service = InferenceServiceFactory(tenant=tenant_a, name="chat", phase="Ready")
    point(service, 20, ttft_p50=0.1, ttft_p95=0.2, kv_usage=0.3, ready_replicas=1)
    page = browser_page(viewer_a)
    messages = watched(page, live_server)

    page.goto(live_server.url + reverse("web:service", args=[service.tenant.slug, service.name]) + "?tab=traffic")
    page.locator("#chart-ttft .main-svg").first.wait_for(state="attached", timeout=15000)
    page.wait_for_load_state("networkidle")

    assert page.evaluate("document.getElementById('chart-ttft').data[1].y") == [200.0]
    assert page.evaluate("window.__violations") == []
    assert messages == []
