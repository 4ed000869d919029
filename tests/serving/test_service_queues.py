"""A service against its tenant's queue and classes: the class it runs at (400 above the tenant's highest), the
GPUs per type its queue allows at maximum replicas (nominal plus what it may borrow), and what the API shows."""

from __future__ import annotations

import pytest

from apps.core.models import AuditEntry
from apps.serving.models import InferenceService
from apps.tenancy.models import TenantQueue
from tests.factories import ClusterFactory, InferenceServiceFactory, ModelFactory, RuntimeFactory

SERVICES = "/api/v1/services/"


@pytest.fixture
def world(tenant_a, tenant_b):
    return {"cluster": ClusterFactory(name="west"), "model": ModelFactory(name="llama-8b"),
            "runtime": RuntimeFactory(name="vllm")}


def payload(world, **extra) -> dict:
    return {"tenant": "alpha", "name": "chat", "cluster": "west", "model": world["model"].pk,
            "runtime": world["runtime"].pk, "engine_settings": {"max_model_len": 8192},
            "pools": [{"role": "engine", "replicas": 1, "min_replicas": 1, "max_replicas": 2, "gpus_per_replica": 1,
                       "gpu_type": "l4-24gb"}], **extra}


def test_a_class_above_the_tenants_highest_is_a_400_and_nothing_is_written(api, world, tenant_a, owner_a, classes):
    tenant_a.max_priority_class = classes["standard"]
    tenant_a.save()
    audit = AuditEntry.objects.count()
    response = api("owner_a").post(SERVICES, payload(world, priority_class="production"), format="json")
    assert response.status_code == 400
    assert "production (1000) is above tenant alpha's highest class, standard (100)" in \
        " ".join(response.json()["priority_class"])
    assert not InferenceService.objects.exists() and AuditEntry.objects.count() == audit


def test_an_unknown_class_is_a_400_naming_the_field(api, world, owner_a, classes):
    response = api("owner_a").post(SERVICES, payload(world, priority_class="vip"), format="json")
    assert response.status_code == 400 and "priority_class" in response.json()


def test_a_service_shows_the_class_it_runs_at_and_its_admission(api, world, tenant_a, owner_a, classes):
    created = api("owner_a").post(SERVICES, payload(world), format="json")
    assert created.status_code == 201, created.content
    body = created.json()
    # No class named, no tenant default: the platform's default class.
    assert body["priority_class"] == "standard"
    assert body["admission"]["state"] == "waiting" and body["admission"]["reason"]

    tenant_a.default_priority_class = classes["best-effort"]
    tenant_a.save()
    assert api("owner_a").get(f"{SERVICES}{body['id']}/").json()["priority_class"] == "best-effort"
    patched = api("owner_a").patch(f"{SERVICES}{body['id']}/", {"priority_class": "batch"}, format="json")
    assert patched.status_code == 200 and patched.json()["priority_class"] == "batch"
    assert InferenceService.objects.get().priority_class == classes["batch"]
    listed = api("owner_a").get(SERVICES).json()["results"][0]
    assert (listed["priority_class"], listed["admission"]) == ("batch", patched.json()["admission"])


def test_a_stored_admission_is_shown_in_its_words(api, world, tenant_a, owner_a):
    service = InferenceServiceFactory(tenant=tenant_a, cluster=world["cluster"])
    reason = "Preempted by bravo/prod-chat (production 1000 > best-effort 0) at 12:03"
    InferenceService.objects.filter(pk=service.pk).update(admission={"state": "preempted", "reason": reason})
    assert api("owner_a").get(f"{SERVICES}{service.pk}/").json()["admission"] == {"state": "preempted",
                                                                                 "reason": reason}


def test_a_queue_per_gpu_type_bounds_that_type_and_borrowing_raises_the_bound(api, world, tenant_a, tenant_b,
                                                                               owner_a):
    TenantQueue.objects.create(tenant=tenant_a, cluster=world["cluster"], nominal={"l4-24gb": 1},
                               borrowing_limit={"l4-24gb": 0})
    TenantQueue.objects.create(tenant=tenant_b, cluster=world["cluster"], nominal={"l4-24gb": 3})
    refused = api("owner_a").post(SERVICES, payload(world), format="json")
    assert refused.status_code == 400
    assert "requested 2 l4-24gb GPUs at maximum replicas, 0 already used by other services, 1 allowed" in \
        " ".join(refused.json()["pools"])

    TenantQueue.objects.filter(tenant=tenant_a).update(borrowing_limit={"l4-24gb": 1})
    assert api("owner_a").post(SERVICES, payload(world), format="json").status_code == 201


def test_a_tenant_without_a_queue_on_the_cluster_is_told_so(api, world, tenant_a, owner_a):
    TenantQueue.objects.filter(tenant=tenant_a).delete()
    response = api("owner_a").post(SERVICES, payload(world), format="json")
    assert response.status_code == 400
    assert "Tenant alpha has no GPU quota on cluster west" in " ".join(response.json()["pools"])
