"""No page of the dashboard or the portal shows template source ({# #}, {% %}, {{ }}) in its text: every URL of
apps/web/urls.py is opened, as staff and as a tenant's owner, as a page and as an htmx fragment, with objects of a
seeded tenant for the URL's parameters."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from apps.gateway.models import InferenceKey
from apps.tenancy.models import Membership, TenantQueue
from apps.web import urls as web_urls
from apps.whatif.models import Advice, Run
from tests.factories import issue_token
from tests.web.conftest import point
from tests.web.template_source import shown_text, template_source

pytestmark = pytest.mark.django_db

# URLs that take only POST: opening them is a 405 with no page.
POST_ONLY = {"logout", "revision-rollback", "rollout-action", "lab-upload", "lab-search", "lab-cancel", "lab-apply",
             "advice-dismiss", "playground-stream", "token-revoke", "inference-key-action", "batch-cancel",
             "member-change", "service-form-parts",
             "queue-edit"}
STAFF_ONLY = {"nodes"}  # platform staff's pages: a tenant's owner is refused (403) and sees no page to scan
# URLs answering with data rather than a page (JSON series, CSV, a stored file).
NOT_PAGES = {"service-series", "service-series-by-id", "usage-csv", "file-download"}
QUERIES = {"switch": "?tenant=alpha"}


@pytest.fixture
def seeded(revised, owner_a, operator_a, tenant_a, login):
    """Tenant alpha's service `chat` at revision 2 with series, a what-if run and advice, a batch and its file, an
    API token, an inference key and a member, and the URL parameters that name them."""
    from apps.gateway.models import Batch, File

    service = revised
    for seconds_ago, ttft in ((600, 0.4), (300, 0.5), (10, 0.6)):
        point(service, seconds_ago, ttft_p50=ttft / 2, ttft_p95=ttft, kv_usage=0.5, ready_replicas=1)
    run = Run.objects.create(service=service, cpu_budget_s=30)
    advice = Advice.objects.create(service=service, rule="fewer_replicas", inputs={"ttft_p95": 0.1, "replicas": 2.0},
                                   alternative={"name": "1 replica", "replicas": 1},
                                   predicted={"figure": "gpu_hours", "current": 0.33, "suggested": 0.16,
                                              "effect_pct": 51.5, "requests": 60})
    now = timezone.now()
    File.objects.create(id="file-out", tenant=tenant_a, purpose="batch_output", filename="out.jsonl", bytes=3,
                        lines=1, content=b"{}\n", created_at=now)
    Batch.objects.create(id="batch_done", tenant=tenant_a, key_id=1, endpoint="/v1/completions",
                         input_file_id="file-in", created_at=now, expires_at=now + timedelta(hours=24),
                         status="completed", total=3, completed=3)
    token, _ = issue_token(owner_a, name="ci")
    login(operator_a).post(reverse("web:inference-keys", args=["alpha"]),
                           {"name": "support-bot", "expires_days": 30, "services": [service.pk], "rpm": "60"})
    key = InferenceKey.objects.get(tenant=tenant_a, name="support-bot")
    model = service.model.__class__.objects.get(tenant=tenant_a, name="alpha-model")
    pks = {"service-by-id": service.pk, "service-series-by-id": service.pk, "scaling-panel": service.pk,
           "token-revoke": token.pk, "inference-key-action": key.pk,
           "queue-edit": TenantQueue.objects.get(tenant=tenant_a).pk,
           "member-change": Membership.objects.get(tenant=tenant_a, user=operator_a).pk,
           "catalog-edit": model.pk, "catalog-delete": model.pk}
    params = {"tenant": "alpha", "name": service.name, "number": 1, "action": "pause", "run_id": run.pk,
              "advice_id": advice.pk, "batch_id": "batch_done", "file_id": "file-out", "kind": "models"}
    return pks, params


def every_url(pks: dict, params: dict) -> list[tuple[str, str]]:
    """(URL name, URL) of every pattern of apps/web/urls.py, the catalog's pages once per kind of entry."""
    urls = []
    for pattern in web_urls.urlpatterns:
        names = list(pattern.pattern.converters)
        unknown = [n for n in names if n not in params and not (n == "pk" and pattern.name in pks)]
        assert not unknown, f"{pattern.name}: no seeded object for {unknown}; add one to `seeded`"
        kwargs = {n: pks[pattern.name] if n == "pk" else params[n] for n in names}
        kinds = ["models", "adapters", "runtimes"] if pattern.name in ("catalog", "catalog-create") else [None]
        for kind in kinds:
            url = reverse(f"web:{pattern.name}", kwargs={**kwargs, **({"kind": kind} if kind else {})})
            urls.append((pattern.name, url + QUERIES.get(pattern.name, "")))
    return urls


@pytest.mark.parametrize("actor", ["staff", "owner_a"])
def test_no_page_shows_template_source(request, client, seeded, actor):
    from tests.factories import PASSWORD

    user = request.getfixturevalue(actor)
    pages = []
    for name, url in every_url(*seeded):
        for headers in ({}, {"HX-Request": "true"}):
            client.login(username=user.username, password=PASSWORD)
            response = client.get(url, headers=headers, follow=True)  # a redirect: the page it leads to
            if name in POST_ONLY:
                assert response.status_code == 405, (url, response.status_code)
                continue
            if name in STAFF_ONLY and actor != "staff":
                assert response.status_code == 403, (url, response.status_code)
                continue
            assert response.status_code == 200, (url, response.status_code)
            if not response["Content-Type"].startswith("text/html"):
                continue
            found = template_source(shown_text(response.content.decode()))
            assert not found, (url, headers, found)
            pages.append(name)
    # Every page of the map was read, not only the ones that happened to answer with HTML.
    expected = {p.name for p in web_urls.urlpatterns} - POST_ONLY - NOT_PAGES - (STAFF_ONLY if actor != "staff" else set())
    assert expected <= set(pages), expected - set(pages)


def test_the_scan_finds_a_multi_line_comment_left_as_text():
    # A `{# #}` spanning lines is not a comment in Django: its text reaches the page.
    from django.template import Context, Template

    html = Template("<h2>Rollout</h2>\n{# The panel:\n  its state #}\n<p>{{ x }}</p>").render(Context({"x": 1}))
    assert template_source(shown_text(html)) != []
    fixed = Template("<h2>Rollout</h2>\n{% comment %}The panel:\n its state{% endcomment %}\n<p>{{ x }}</p>")
    assert template_source(shown_text(fixed.render(Context({"x": 1})))) == []


MAIN_PAGES = ("home", "services", "fleet-decisions", "overview", "tenant-services", "service", "service-revisions",
              "playground", "lab", "usage", "batches", "tokens", "inference-keys", "queues", "members", "catalog",
              "audit")


@pytest.mark.browser
def test_the_main_pages_show_no_template_source_in_chromium(browser_page, live_server, seeded, staff):
    page = browser_page(staff)
    seen = []
    for name, url in every_url(*seeded):
        if name not in MAIN_PAGES or name in seen:
            continue
        page.goto(live_server.url + url)
        page.wait_for_load_state("networkidle")  # htmx panels loaded after the page are part of what it shows
        found = template_source(page.locator("body").inner_text())
        assert not found, (url, found)
        seen.append(name)
    assert sorted(seen) == sorted(MAIN_PAGES)
