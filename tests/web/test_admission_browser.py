"""Where a service stands with its tenant's GPU queue, in words, in headless Chromium: admitted on borrowed quota,
preempted by another tenant's production service, waiting third in the queue. The outcomes come from real admission
passes (apps.serving.admission.admit_cluster, the shared policy) on a cluster without Kueue; the words were worked
by hand from the scenario: alpha and bravo each hold 2 L4 nominal in the cluster's cohort."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse
from playwright.sync_api import expect

from apps.serving.admission import admit_cluster
from apps.tenancy.models import PriorityClass, TenantQueue
from tests.factories import ClusterFactory, InferenceServiceFactory
from tests.web.portal.page_checks import serious_axe_violations


@pytest.fixture
def shared_l4(db, tenant_a, tenant_b, classes):
    """A cluster without Kueue where alpha and bravo each have 2 L4 of their own, lent to the other when unused."""
    cluster = ClusterFactory(name="west")
    TenantQueue.objects.filter(tenant__in=[tenant_a, tenant_b]).update(
        nominal={"l4-24gb": 2}, borrowing_limit={}, lending_limit={})
    return cluster


def l4_service(cluster, tenant, name, klass, replicas):
    return InferenceServiceFactory(tenant=tenant, name=name, cluster=cluster,
                                   priority_class=PriorityClass.objects.get(name=klass),
                                   pools=[{"replicas": replicas, "max_replicas": 4, "gpu_type": "l4-24gb"}])


def page_of(service) -> str:
    return reverse("web:service", args=[service.tenant.slug, service.name])


@pytest.mark.browser
def test_the_service_page_says_what_was_borrowed_who_preempted_and_why_a_service_waits(
        browser_page, live_server, viewer_a, tenant_a, tenant_b, shared_l4):
    batch = l4_service(shared_l4, tenant_a, "batch-chat", "best-effort", replicas=4)
    admit_cluster(shared_l4)
    page = browser_page(viewer_a)
    page.goto(live_server.url + page_of(batch))
    expect(page.locator("#admission-state")).to_have_text("Admitted on borrowed quota (2 L4 from bravo)")
    assert serious_axe_violations(page, "#admission") == []
    page.evaluate("window.loadedOnce = true")

    # bravo's production service takes its 2 L4 back: the page follows with the status poll, no reload.
    l4_service(shared_l4, tenant_b, "prod-chat", "production", replicas=2)
    admit_cluster(shared_l4)
    expect(page.locator("#admission-state")).to_have_text(re.compile(
        r"^Preempted by bravo/prod-chat/engine-\d \(production 1000 > best-effort 0\) to reclaim bravo's nominal "
        r"quota at \d\d:\d\d$"), timeout=15000)
    expect(page.locator("#admission")).to_have_class(re.compile(r"\badmission-preempted\b"))
    assert page.evaluate("window.loadedOnce") is True

    # Two of batch-chat's replicas wait first (older, same class); a newer best-effort service is third.
    extra = l4_service(shared_l4, tenant_a, "extra-chat", "best-effort", replicas=1)
    admit_cluster(shared_l4)
    page.goto(live_server.url + page_of(extra))
    expect(page.locator("#admission-state")).to_have_text(
        "Waiting for quota: 3rd in alpha's queue; the cohort has no free L4")
    assert serious_axe_violations(page, "#admission") == []
