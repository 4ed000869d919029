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


def _answers_with_and_without(client, payload, cluster, path="/api/v1/services/", method="post"):
    """The answer while `cluster` exists, then the answer to the same bytes once it is gone."""
    hidden = getattr(client, method)(path, payload, format="json")
    cluster.delete()
    missing = getattr(client, method)(path, payload, format="json")
    return hidden, missing


@pytest.mark.parametrize("actor,tenant", [("viewer_a", "alpha"), ("operator_a", "alpha"), ("member_b", "bravo")])
@pytest.mark.parametrize("broken", [False, True])
def test_a_hidden_cluster_answers_byte_for_byte_like_a_missing_one(api, world, tenant_b, actor, tenant, broken):
    hidden_cluster = ClusterFactory(name="bravo-secret", open_to_all_tenants=False)
    hidden_cluster.tenants.add(tenant_b)
    payload = body(world, tenant, "bravo-secret" if actor != "member_b" else "alpha-gpus")
    if broken:
        payload |= {"name": "Not A Name", "pools": [{"role": "engine", "replicas": -1}]}
    target = hidden_cluster if actor != "member_b" else world["alpha_only"]

    hidden, missing = _answers_with_and_without(api(actor), payload, target)

    assert hidden.status_code == missing.status_code
    assert hidden.content == missing.content
    assert not InferenceService.objects.exists()


def test_the_portal_form_lists_and_preselects_only_the_tenants_clusters(client, world, tenant_b, member_b):
    ClusterFactory(name="aaa-alpha-only", open_to_all_tenants=False).tenants.add(world["alpha_only"].tenants.get())
    client.force_login(member_b)

    page = client.get("/t/bravo/services/new/").content.decode()

    assert "shared" in page
    assert "alpha-gpus" not in page and "aaa-alpha-only" not in page
    assert 'value="shared" selected' in page
