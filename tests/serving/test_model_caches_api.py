"""The platform's model caches over the API: bad input refused with the field and the reason and nothing written;
a model a cache or a running service uses cannot be deleted (409); tenants see none of it."""

import pytest

from apps.catalog.models import Model
from apps.serving.models import ModelCache
from tests.factories import ClusterFactory, InferenceServiceFactory, ModelFactory

pytestmark = pytest.mark.django_db
URL = "/api/v1/model-caches/"


def test_staff_cache_a_platform_model_on_a_cluster(api, staff):
    cluster, model = ClusterFactory(name="east"), ModelFactory()
    response = api("staff").post(URL, {"cluster": "east", "model": model.pk, "node_budget_gb": 800}, format="json")
    assert response.status_code == 201, response.json()
    cache = ModelCache.objects.get()
    assert (cache.cluster, cache.model, cache.node_budget_gb) == (cluster, model, 800)


def test_a_private_model_is_refused_for_platform_caching(api, staff, tenant_a):
    ClusterFactory(name="east")
    private = ModelFactory(tenant=tenant_a, name="alpha-tuned")
    response = api("staff").post(URL, {"cluster": "east", "model": private.pk}, format="json")
    assert response.status_code == 400
    assert "private to tenant" in response.json()["model"][0]
    assert "stays in its tenant's namespace" in response.json()["model"][0]
    assert not ModelCache.objects.exists()


def test_a_node_budget_over_a_nodes_disk_is_refused(api, staff):
    ClusterFactory(name="east")
    model = ModelFactory()
    response = api("staff").post(URL, {"cluster": "east", "model": model.pk, "node_budget_gb": 2500},
                                 format="json")
    assert response.status_code == 400
    # The default node-local disk is 2 TB (capacity/startup.py NODE_DISK_BYTES).
    assert response.json()["node_budget_gb"] == ["2,500 GB is more than a node's disk (2,000 GB)."]
    assert not ModelCache.objects.exists()


def test_a_model_a_cache_uses_cannot_be_deleted(api, staff):
    model = ModelFactory()
    ModelCache.objects.create(cluster=ClusterFactory(), model=model)
    response = api("staff").delete(f"/api/v1/models/{model.pk}/")
    assert response.status_code == 409
    assert "still used by 1 other object(s)" in response.json()["detail"]
    assert Model.objects.filter(pk=model.pk).exists()


def test_a_model_a_running_service_uses_cannot_be_deleted(api, staff):
    service = InferenceServiceFactory(phase="Ready")
    response = api("staff").delete(f"/api/v1/models/{service.model.pk}/")
    assert response.status_code == 409
    assert Model.objects.filter(pk=service.model.pk).exists()


def test_tenants_neither_see_nor_write_model_caches(api, owner_a):
    ModelCache.objects.create(cluster=ClusterFactory(name="east"), model=ModelFactory())
    assert api("owner_a").get(URL).status_code == 403
    assert api("owner_a").post(URL, {"cluster": "east", "model": ModelFactory().pk}, format="json").status_code == 403
    assert ModelCache.objects.count() == 1
