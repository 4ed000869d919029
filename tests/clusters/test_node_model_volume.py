"""The cluster's node model volume, set by platform staff: "none" unless they say otherwise, validated by the API and
the admin, carried into the render, and on "none" no model cache, prefetch plan or agent plan is offered."""

import pytest

from apps.clusters.models import Cluster, GpuNode
from apps.serving.models import ModelCache
from apps.serving.prefetch import prefetch_plan
from apps.serving.rendering.spec import spec_from_service
from apps.serving.startup import landing_cache
from enginevocab.labels import model_held_label
from tests.factories import ClusterFactory, InferenceServiceFactory, PoolFactory
from workers.inventory import publish_agent_plan, sync_inventory
from workers.kube import kube_for

URL = "/api/v1/clusters/"
REAL = {"api_url": "https://k8s.example.internal:6443", "bearer_token": "t"}


@pytest.mark.django_db
def test_a_cluster_registered_without_saying_reads_no_node_copies(api, staff):
    created = api("staff").post(URL, {"name": "east", **REAL}, format="json")
    assert created.status_code == 201, created.json()
    assert created.json()["node_model_volume"] == "none"
    assert Cluster.objects.get(name="east").node_model_volume == "none"


@pytest.mark.django_db
def test_an_unknown_way_is_refused_with_the_field_and_nothing_is_written(api, staff):
    refused = api("staff").post(URL, {"name": "east", **REAL, "node_model_volume": "nfs"}, format="json")
    assert refused.status_code == 400
    assert refused.json() == {"node_model_volume": [
        "\"nfs\" is not a way to reach the node's model copy: choose none, hostPath, csi."]}
    assert not Cluster.objects.filter(name="east").exists()
    cluster = ClusterFactory(name="west", node_model_volume="none")
    changed = api("staff").patch(f"{URL}{cluster.pk}/", {"node_model_volume": "HostPath"}, format="json")
    assert changed.status_code == 400 and list(changed.json()) == ["node_model_volume"]
    cluster.refresh_from_db()
    assert cluster.node_model_volume == "none"


@pytest.mark.django_db
def test_staff_choose_hostpath_and_the_render_follows(api, staff, tenant_a):
    cluster = ClusterFactory(name="east", node_model_volume="none")
    service = InferenceServiceFactory(tenant=tenant_a, cluster=cluster)
    assert spec_from_service(service).node_model_volume == "none"
    changed = api("staff").patch(f"{URL}{cluster.pk}/", {"node_model_volume": "hostPath"}, format="json")
    assert changed.status_code == 200, changed.json()
    assert spec_from_service(service).node_model_volume == "hostPath"


def test_the_admin_refuses_an_unknown_way(client, staff):
    cluster = ClusterFactory(name="east", node_model_volume="csi")
    client.force_login(staff)
    response = client.post(f"/admin/clusters/cluster/{cluster.pk}/change/", {
        "name": "east", "api_url": "http://127.0.0.1:6443", "insecure_simulator": "on", "open_to_all_tenants": "on",
        "node_model_volume": "nfs", "api_server_cidrs": "", "model_egress_cidrs": ""})
    assert response.status_code == 200  # the form again, with the error
    assert "Select a valid choice. nfs is not one of the available choices." in response.content.decode()
    cluster.refresh_from_db()
    assert cluster.node_model_volume == "csi"


@pytest.mark.django_db
def test_no_model_cache_on_a_cluster_whose_pods_read_no_node_copies(api, staff):
    from tests.factories import ModelFactory

    ClusterFactory(name="east", node_model_volume="none")
    model = ModelFactory()
    refused = api("staff").post("/api/v1/model-caches/", {"cluster": "east", "model": model.pk}, format="json")
    assert refused.status_code == 400
    assert refused.json()["cluster"] == ["Engine pods on east read no node-local copies (node model volume \"none\"): "
                                         "set it to hostPath or csi first, or there is nothing to cache on nodes."]
    assert not ModelCache.objects.exists()


@pytest.mark.django_db
def test_a_cluster_switched_to_none_offers_no_prefetch_and_no_node_start_up(tenant_a):
    cluster = ClusterFactory(name="east", node_model_volume="csi")
    service = InferenceServiceFactory(tenant=tenant_a, cluster=cluster, pools=[])
    pool = PoolFactory(service=service, gpu_type="l4-24gb", replicas=1, max_replicas=2)
    ModelCache.objects.create(cluster=cluster, model=service.model, node_budget_gb=100)
    GpuNode.objects.create(cluster=cluster, name="n-a", gpu_product="NVIDIA-L4", gpu_count=1, allocatable=1,
                           labels={model_held_label(service.model.name): "true"})
    GpuNode.objects.create(cluster=cluster, name="n-b", gpu_product="NVIDIA-L4", gpu_count=1, allocatable=1)
    assert prefetch_plan(service)["targets"] == ["n-b"]
    assert landing_cache(service, pool, [{"cache": "cluster"}]) == "node"
    Cluster.objects.filter(pk=cluster.pk).update(node_model_volume="none")  # the labels stay until the agent goes
    service.refresh_from_db()
    assert prefetch_plan(service) is None
    # The node's label no longer helps: the pod cannot read the copy, so a replica starts from the cluster cache.
    assert landing_cache(service, pool, [{"cache": "cluster"}]) == "cluster"


@pytest.mark.django_db(transaction=True)
def test_the_inventory_pass_gives_no_agent_plan_on_none(make_cluster, tenant_a):
    sim = make_cluster(nodes="l4-24gb:2x1")
    cluster = ClusterFactory(name="sim", api_url=sim.url, node_model_volume="csi")
    service = InferenceServiceFactory(tenant=tenant_a, cluster=cluster, pools=[])
    PoolFactory(service=service, gpu_type="l4-24gb", replicas=1, max_replicas=2)
    ModelCache.objects.create(cluster=cluster, model=service.model, node_budget_gb=100)
    Cluster.objects.filter(pk=cluster.pk).update(node_model_volume="none")
    cluster.refresh_from_db()
    sync_inventory(cluster, kube_for(cluster))
    names = [c.metadata.name for c in sim.core.list_config_map_for_all_namespaces().items]
    assert "model-agent" not in names
    Cluster.objects.filter(pk=cluster.pk).update(node_model_volume="csi")
    cluster.refresh_from_db()
    publish_agent_plan(cluster, kube_for(cluster))  # the same cluster with a node volume gets its plan
    assert sim.core.read_namespaced_config_map("model-agent", "controlplane").data["plan"]


@pytest.mark.django_db
def test_the_agent_manifest_is_refused_for_a_cluster_on_none(settings):
    from io import StringIO

    from django.core.management import CommandError, call_command

    settings.PLATFORM_MODEL_CACHE = "nfs://nfs.example.internal/exports/models"
    ClusterFactory(name="east", node_model_volume="none")
    ClusterFactory(name="west", node_model_volume="hostPath")
    image = "registry.example.com/controlplane:0.1.0"
    with pytest.raises(CommandError, match="east's node model volume is \"none\": its engine pods read no node"):
        call_command("model_agent_manifest", "--image", image, "--cluster", "east", stdout=StringIO())
    out = StringIO()
    call_command("model_agent_manifest", "--image", image, "--cluster", "west", stdout=out)
    assert "kind: DaemonSet" in out.getvalue()


@pytest.mark.django_db
def test_model_caches_list_in_one_order_page_after_page(api, staff):
    from tests.factories import ModelFactory

    east, west = ClusterFactory(name="east"), ClusterFactory(name="west")
    a, b = ModelFactory(name="a-model"), ModelFactory(name="b-model")
    for cluster, model in ((west, b), (east, a), (west, a), (east, b)):
        ModelCache.objects.create(cluster=cluster, model=model, node_budget_gb=100)
    expected = [("east", a.pk), ("east", b.pk), ("west", a.pk), ("west", b.pk)]
    for first in ("/api/v1/model-caches/?page_size=1", "/api/v1/model-caches/?page_size=1&cursor="):
        seen, url = [], first
        while url:
            body = api("staff").get(url).json()
            seen += [(row["cluster"], row["model"]) for row in body["results"]]
            url = body["next"]
        assert seen == expected, first
