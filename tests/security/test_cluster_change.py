"""A service never changes cluster: the change is refused with a 400 naming the field, and both clusters
keep exactly what they had (the old one its workloads, the new one nothing)."""

from __future__ import annotations

from apps.serving.models import InferenceService
from apps.serving.names import tenant_namespace
from tests.factories import ClusterFactory, InferenceServiceFactory, ModelFactory, RuntimeFactory
from workers.reconcile import reconcile


def deployments(handle, namespace):
    return sorted(d.metadata.name for d in handle.apps.list_namespaced_deployment(namespace).items)


def test_changing_the_cluster_is_a_400_and_leaves_both_clusters_as_they_were(transactional_db, make_cluster, api,
                                                                             tenant_a, owner_a):
    first, second = make_cluster(), make_cluster()
    old = ClusterFactory(name="east", api_url=first.url)
    ClusterFactory(name="west", api_url=second.url)
    svc = InferenceServiceFactory(tenant=tenant_a, name="chat", cluster=old, model=ModelFactory(),
                                  runtime=RuntimeFactory())
    reconcile(svc.pk)
    namespace = tenant_namespace("alpha")
    assert deployments(first, namespace) == ["chat"]

    response = api("owner_a").patch(f"/api/v1/services/{svc.pk}/", {"cluster": "west"}, format="json")
    assert response.status_code == 400
    assert "cluster" in response.json()["errors"] if "errors" in response.json() else "cluster" in response.json()
    assert "cannot move" in str(response.json())
    svc = InferenceService.objects.get(pk=svc.pk)
    assert (svc.cluster.name, svc.generation) == ("east", 1)

    reconcile(svc.pk)
    assert deployments(first, namespace) == ["chat"]
    assert second.core.list_namespace(label_selector="controlplane.io/tenant=alpha").items == []
