"""Staff decide which clusters each tenant may use; a cluster the tenant may not use answers exactly like
one that does not exist, so a tenant cannot learn the names of other clusters."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from apps.serving.models import InferenceService
from tests.factories import ClusterFactory, InferenceServiceFactory, ModelFactory, RuntimeFactory


@pytest.fixture
def world(tenant_a, tenant_b):
    shared = ClusterFactory(name="shared", open_to_all_tenants=True)
    alpha_only = ClusterFactory(name="alpha-gpus", open_to_all_tenants=False)
    alpha_only.tenants.add(tenant_a)
    return {"shared": shared, "alpha_only": alpha_only, "model": ModelFactory(), "runtime": RuntimeFactory()}


def body(world, tenant, cluster, name="chat"):
    return {"tenant": tenant, "name": name, "cluster": cluster, "model": world["model"].pk,
            "runtime": world["runtime"].pk, "deployment_mode": "standard",
            "pools": [{"role": "engine", "replicas": 1, "min_replicas": 1, "max_replicas": 1,
                       "gpus_per_replica": 1, "gpu_type": "h100-sxm-80gb"}]}


def test_a_tenant_deploys_to_a_cluster_open_to_all_and_to_one_staff_gave_it(api, world, owner_a):
    client = api("owner_a")
    assert client.post("/api/v1/services/", body(world, "alpha", "shared"), format="json").status_code == 201
    response = client.post("/api/v1/services/", body(world, "alpha", "alpha-gpus", "two"), format="json")
    assert response.status_code == 201, response.content


def test_a_forbidden_cluster_and_an_unknown_one_get_the_same_answer(api, world, member_b):
    client = api("member_b")
    forbidden = client.post("/api/v1/services/", body(world, "bravo", "alpha-gpus"), format="json")
    unknown = client.post("/api/v1/services/", body(world, "bravo", "no-such-cluster"), format="json")
    assert forbidden.status_code == unknown.status_code == 400
    said_forbidden = forbidden.json()["errors"]["cluster"] if "errors" in forbidden.json() else forbidden.json()
    said_unknown = unknown.json()["errors"]["cluster"] if "errors" in unknown.json() else unknown.json()
    assert str(said_forbidden).replace("alpha-gpus", "X") == str(said_unknown).replace("no-such-cluster", "X")
    assert not InferenceService.objects.filter(tenant__slug="bravo").exists()


def test_moving_a_service_to_a_forbidden_cluster_is_refused(api, world, tenant_b, member_b):
    svc = InferenceServiceFactory(tenant=tenant_b, name="chat", cluster=world["shared"], model=world["model"],
                                  runtime=world["runtime"])
    svc.cluster = world["alpha_only"]
    with pytest.raises(ValidationError) as caught:
        svc.full_clean()
    assert caught.value.message_dict["cluster"] == ["No cluster named alpha-gpus is available to this tenant."]


def test_the_admin_refuses_a_forbidden_cluster_like_the_api(client, staff, world, tenant_b):
    svc = InferenceService(tenant=tenant_b, name="adm", cluster=world["alpha_only"], model=world["model"],
                           runtime=world["runtime"])
    with pytest.raises(ValidationError) as caught:
        svc.full_clean()
    assert "cluster" in caught.value.message_dict
