"""Priority classes and tenant queues through the REST API: what each caller sees, and the issue's bad inputs
(400 with the field and the reason, 409 for what is in use, 403 for a tenant changing them), each leaving the
stored rows as they were."""

from __future__ import annotations

import pytest

from apps.tenancy.models import PriorityClass, TenantQueue
from tests.factories import ClusterFactory, InferenceServiceFactory

CLASSES = "/api/v1/priority-classes/"
QUEUES = "/api/v1/tenant-queues/"


def names(response) -> list[str]:
    return [item["name"] for item in response.json()["results"]]


def queue_of(tenant) -> TenantQueue:
    return TenantQueue.objects.get(tenant=tenant, cluster=None)


def test_a_member_lists_the_classes_up_to_their_tenants_highest(api, tenant_a, owner_a, staff, classes):
    tenant_a.max_priority_class = classes["standard"]
    tenant_a.save()
    assert names(api("owner_a").get(CLASSES)) == ["standard", "best-effort", "batch"]
    assert {"production", "standard", "best-effort", "batch"} <= set(names(api("staff").get(CLASSES)))


def test_a_tenant_cannot_create_or_change_a_class(api, owner_a, classes):
    assert api("owner_a").post(CLASSES, {"name": "vip", "value": 5000}, format="json").status_code == 403
    url = f"{CLASSES}{classes['batch'].pk}/"
    assert api("owner_a").patch(url, {"value": 2000}, format="json").status_code == 403
    assert not PriorityClass.objects.filter(name="vip").exists()
    assert PriorityClass.objects.get(name="batch").value == -10


def test_deleting_a_class_in_use_is_a_409_and_keeps_it(api, staff, tenant_a, classes):
    InferenceServiceFactory(tenant=tenant_a, priority_class=classes["production"])
    response = api("staff").delete(f"{CLASSES}{classes['production'].pk}/")
    assert response.status_code == 409
    assert list(response.json()) == ["detail"] and "in use by 1 services" in response.json()["detail"]
    assert PriorityClass.objects.filter(name="production").exists()


def test_the_platform_default_is_in_use_by_services_that_name_no_class(api, staff, tenant_a, classes):
    InferenceServiceFactory(tenant=tenant_a)
    assert api("staff").delete(f"{CLASSES}{classes['standard'].pk}/").status_code == 409
    assert api("staff").delete(f"{CLASSES}{classes['batch'].pk}/").status_code == 204


def test_a_member_sees_their_tenants_queue_and_no_other(api, tenant_a, tenant_b, owner_a):
    listed = api("owner_a").get(QUEUES).json()["results"]
    assert [(q["tenant"], q["cluster"], q["nominal"]) for q in listed] == [("alpha", None, {"*": 64})]
    other = api("owner_a").get(f"{QUEUES}{queue_of(tenant_b).pk}/")
    assert other.status_code == 404


@pytest.mark.parametrize("body", [{"nominal": {"*": 1000}}, {"weight": 9}, {"borrowing_limit": {"*": None}}])
def test_a_tenant_owner_cannot_change_its_queue(api, tenant_a, owner_a, body):
    response = api("owner_a").patch(f"{QUEUES}{queue_of(tenant_a).pk}/", body, format="json")
    assert response.status_code == 403
    queue = queue_of(tenant_a)
    assert (queue.nominal, queue.borrowing_limit, queue.weight) == ({"*": 64}, {"*": 0}, 1)


def test_a_tenant_owner_cannot_give_itself_another_queue(api, tenant_a, owner_a):
    cluster = ClusterFactory(name="west")
    response = api("owner_a").post(QUEUES, {"tenant": "alpha", "cluster": "west", "nominal": {"l4-24gb": 8}},
                                   format="json")
    assert response.status_code == 403
    assert not TenantQueue.objects.filter(cluster=cluster).exists()


@pytest.mark.parametrize("quota, reason", [
    ({"l4-24gb": -1}, "-1 is not a whole, non-negative number of GPUs"),
    ({"l4-24gb": 1.5}, "1.5 is not a whole, non-negative number of GPUs"),
    ({"l4-24gb": "4"}, "'4' is not a whole, non-negative number of GPUs"),
    ({"l4-24gb": True}, "True is not a whole, non-negative number of GPUs"),
    ({"tpu-v5": 4}, "'tpu-v5' is not a GPU type"),
    ([4], "maps a GPU type"),
])
def test_a_bad_nominal_quota_is_a_400_naming_the_field(api, staff, tenant_a, quota, reason):
    response = api("staff").patch(f"{QUEUES}{queue_of(tenant_a).pk}/", {"nominal": quota}, format="json")
    assert response.status_code == 400
    assert reason in " ".join(response.json()["nominal"])
    assert queue_of(tenant_a).nominal == {"*": 64}


def test_a_borrowing_limit_above_what_the_cohort_holds_is_a_400(api, staff, tenant_a, tenant_b):
    cluster = ClusterFactory(name="west")
    for tenant, gpus in ((tenant_a, 6), (tenant_b, 4)):
        TenantQueue.objects.create(tenant=tenant, cluster=cluster, nominal={"l4-24gb": gpus})
    url = f"{QUEUES}{TenantQueue.objects.get(tenant=tenant_a, cluster=cluster).pk}/"

    too_much = api("staff").patch(url, {"borrowing_limit": {"l4-24gb": 5}}, format="json")
    assert too_much.status_code == 400
    assert "above the 4 the rest of cohort of the cluster may lend" in " ".join(too_much.json()["borrowing_limit"])
    assert TenantQueue.objects.get(tenant=tenant_a, cluster=cluster).borrowing_limit == {}
    assert api("staff").patch(url, {"borrowing_limit": {"l4-24gb": 4}}, format="json").status_code == 200


def test_deleting_a_queue_in_use_is_a_409_and_keeps_it(api, staff, tenant_a):
    InferenceServiceFactory(tenant=tenant_a)
    response = api("staff").delete(f"{QUEUES}{queue_of(tenant_a).pk}/")
    assert response.status_code == 409
    assert list(response.json()) == ["detail"] and "in use by 1 service(s)" in response.json()["detail"]
    assert TenantQueue.objects.filter(tenant=tenant_a).exists()


def test_staff_shape_a_queue_and_the_change_is_audited(api, staff, tenant_a):
    from apps.core.models import AuditEntry

    queue = queue_of(tenant_a)
    body = {"nominal": {"l4-24gb": 6, "*": 2}, "lending_limit": {"l4-24gb": 2}, "weight": 2.5, "cohort": "shared"}
    response = api("staff").patch(f"{QUEUES}{queue.pk}/", body, format="json")
    assert response.status_code == 200, response.content
    assert (response.json()["weight"], response.json()["cohort"]) == (2.5, "shared")
    entry = AuditEntry.objects.get(object_id=str(queue.pk), action="update", content_type__model="tenantqueue")
    assert (entry.before["nominal"], entry.after["nominal"]) == ({"*": 64}, {"l4-24gb": 6, "*": 2})


def test_a_queue_is_unique_per_tenant_and_cluster(api, staff, tenant_a):
    response = api("staff").post(QUEUES, {"tenant": "alpha", "cluster": None, "nominal": {"*": 1}}, format="json")
    assert response.status_code == 409, response.content
    assert TenantQueue.objects.filter(tenant=tenant_a).count() == 1



def test_a_tenants_default_class_above_its_highest_is_a_400(api, staff, tenant_a, classes):
    url = f"/api/v1/tenants/{tenant_a.pk}/"
    response = api("staff").patch(url, {"max_priority_class": "standard", "default_priority_class": "production"},
                                  format="json")
    assert response.status_code == 400
    assert "The default class production (1000) is above the tenant's highest, standard (100)." in \
        response.json()["default_priority_class"]
    tenant_a.refresh_from_db()
    assert (tenant_a.max_priority_class, tenant_a.default_priority_class) == (None, None)
