"""The inventory pass gives kubesim's model agent its plan: the weights of a service that may scale up go onto as
many nodes of its GPU as it may scale to; the agent copies them and labels the nodes, and the next pass sees them
held (what placement and the cold-start estimate read)."""

import json

import pytest

from apps.serving.models import ModelCache
from apps.serving.names import model_claim_name
from apps.serving.prefetch import prefetch_plan
from enginevocab.labels import model_held_label
from tests.factories import ClusterFactory, InferenceServiceFactory, PoolFactory
from tests.polling import wait_for
from workers.inventory import sync_inventory
from workers.kube import kube_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_agent_prefetches_a_services_weights_onto_the_nodes_it_may_scale_to(make_cluster, tenant_a):
    sim = make_cluster(nodes="l4-24gb:3x1,h100-sxm-80gb:1x8")
    cluster = ClusterFactory(name="sim", api_url=sim.url, insecure_simulator=True)
    service = InferenceServiceFactory(tenant=tenant_a, name="chat", cluster=cluster, pools=[])
    PoolFactory(service=service, gpu_type="l4-24gb", replicas=1, max_replicas=2)
    ModelCache.objects.create(cluster=cluster, model=service.model, node_budget_gb=100)

    sync_inventory(cluster, kube_for(cluster))
    plan = json.loads(sim.core.read_namespaced_config_map("model-agent", "controlplane").data["plan"])
    # Two replicas at most, one L4 each: two of the three L4 nodes (equal room, so by name); 100 GB per node.
    l4 = sorted(n.metadata.name for n in sim.core.list_node(label_selector="nvidia.com/gpu.product=NVIDIA-L4").items)
    # The weights lie in the cluster cache under the model's claim and the source's own directory name.
    item = {"model": service.model.name, "bytes": 16_060_000_000,
            "source": f"{model_claim_name(service.model)}/Llama-3.1-8B-Instruct"}
    assert plan == {"budget_bytes": 100 * 10**9, "nodes": {l4[0]: [item], l4[1]: [item]}}

    label = model_held_label(service.model.name)
    wait_for(lambda: all((sim.core.read_node(n).metadata.labels or {}).get(label) == "true" for n in l4[:2]),
             message="both nodes hold the weights")
    assert label not in (sim.core.read_node(l4[2]).metadata.labels or {})
    sync_inventory(cluster, kube_for(cluster))
    assert prefetch_plan(service)["held"] == l4[:2] and prefetch_plan(service)["targets"] == []
