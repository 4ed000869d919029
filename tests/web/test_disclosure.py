"""What the cluster said stays with staff: tenants see a summary of conditions and reconcile runs whose
messages come from the cluster or the control plane's internals (host names, exception text), and the
full message of those that are advice about their own workload. Staff see everything."""

from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils import timezone

from apps.serving.models import ReconcileRun
from tests.factories import ClusterFactory, InferenceServiceFactory

HOST = "gpu-api.corp-internal.example"
UNREACHABLE = (f"cluster API unreachable: MaxRetryError: HTTPSConnectionPool(host='{HOST}', port=6443): "
               "Max retries exceeded with url: /apis/apps/v1/namespaces/cp-alpha/deployments")
REFUSED = (f'InternalError: Internal error occurred: failed calling webhook "policy.{HOST}": '
           f'Post "https://{HOST}:9443/validate": connection refused')
ADVICE = "needs 2 × NVIDIA-L4 per replica; 0 of 4 NVIDIA-L4 nodes have 2 free"


@pytest.fixture
def troubled(tenant_a):
    service = InferenceServiceFactory(
        tenant=tenant_a, name="chat", cluster=ClusterFactory(name="sim"), phase="Failed",
        conditions=[
            {"type": "Reconciled", "status": "False", "reason": "TransientError", "message": UNREACHABLE,
             "lastTransitionTime": ""},
            {"type": "Schedulable", "status": "False", "reason": "Unschedulable", "message": ADVICE,
             "lastTransitionTime": ""},
        ],
    )
    now = timezone.now()
    ReconcileRun.objects.create(service=service, started_at=now, generation=1, result="retrying", message=UNREACHABLE)
    ReconcileRun.objects.create(service=service, started_at=now, generation=1, result="failed",
                                message=f"ApplyFailed: {REFUSED}")
    ReconcileRun.objects.create(service=service, started_at=now, generation=1, result="error",
                                message="OverflowError: cannot convert float infinity to integer")
    ReconcileRun.objects.create(service=service, started_at=now, generation=1, result="progressing", message=ADVICE)
    return service


def conditions(api, actor, service) -> dict:
    body = api(actor).get(f"/api/v1/services/{service.pk}/").json()
    return {c["reason"]: c["message"] for c in body["conditions"]}


@pytest.mark.parametrize("actor", ["viewer_a", "owner_a"])
def test_tenants_get_a_summary_of_cluster_errors_in_the_api(api, troubled, actor):
    messages = conditions(api, actor, troubled)

    assert HOST not in messages["TransientError"] and "MaxRetryError" not in messages["TransientError"]
    assert "retr" in messages["TransientError"].lower()
    assert messages["Unschedulable"] == ADVICE


def test_staff_see_the_clusters_own_words_in_the_api(api, troubled):
    messages = conditions(api, "staff", troubled)

    assert messages["TransientError"] == UNREACHABLE
    assert messages["Unschedulable"] == ADVICE


def test_tenants_get_a_summary_on_the_service_page(login, viewer_a, troubled):
    html = login(viewer_a).get(reverse("web:service", args=[troubled.tenant.slug, troubled.name])).content.decode()

    for leaked in (HOST, "MaxRetryError", "webhook", "OverflowError", "infinity"):
        assert leaked not in html, leaked
    assert ADVICE in html
    assert "ApplyFailed" in html  # the reason stays: it says which step went wrong


def test_staff_see_everything_on_the_service_page(login, staff, troubled):
    html = login(staff).get(reverse("web:service", args=[troubled.tenant.slug, troubled.name])).content.decode()

    assert HOST in html and "MaxRetryError" in html and "OverflowError" in html and ADVICE in html
