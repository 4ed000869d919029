"""Prefetch: a service that may scale up gets its weights onto as many nodes of its GPU as it may scale to, within
the platform cache's per-node budget; the Scaling panel says so."""

import pytest
from django.urls import reverse

from apps.clusters.models import GpuNode
from apps.serving.models import ModelCache
from apps.serving.prefetch import prefetch_plan
from apps.tenancy.queues import set_gpu_quota
from enginevocab.labels import model_held_label
from tests.factories import InferenceServiceFactory, ModelFactory, PoolFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def service(tenant_a):
    svc = InferenceServiceFactory(tenant=tenant_a, name="chat", pools=[])
    PoolFactory(service=svc, gpu_type="l4-24gb", replicas=1, max_replicas=4)  # may scale to 4
    ModelCache.objects.create(cluster=svc.cluster, model=svc.model, node_budget_gb=100)
    big = ModelFactory(name="big", parameters_billions=45)  # 90 GB in BF16
    for name, held in [("n-a", svc.model.name), ("n-b", None), ("n-c", "big"), ("n-d", None)]:
        GpuNode.objects.create(cluster=svc.cluster, name=name, gpu_product="NVIDIA-L4", gpu_count=1, allocatable=1,
                               labels={model_held_label(held): "true"} if held else {})
    GpuNode.objects.create(cluster=svc.cluster, name="h-1", gpu_product="NVIDIA-H100-80GB-HBM3", gpu_count=8,
                           allocatable=8)
    assert big.pk
    return svc


def test_the_weights_go_to_as_many_l4_nodes_as_the_service_may_scale_to_within_the_budget(service):
    plan = prefetch_plan(service)
    # 4 wanted; n-a holds them; n-c has 100 - 90 = 10 GB left, under the model's 16.06 GB; the H100 node is no L4.
    assert (plan["wanted"], plan["held"], plan["targets"], plan["short"]) == (4, ["n-a"], ["n-b", "n-d"], 1)
    assert plan["words"] == ("16 GB of weights wanted on 4 node(s): held on 1, to copy to 2, 1 without a suitable "
                             "node within the 100 GB budget.")


def test_a_service_at_its_maximum_prefetches_nothing(service):
    service.pools.update(replicas=4)
    plan = prefetch_plan(service)
    assert plan["wanted"] == 0 and plan["targets"] == []
    assert plan["words"] == "No scale-up room (replicas at the maximum): nothing to prefetch."


def test_the_tenants_gpu_quota_limits_the_plan_to_the_replicas_it_allows(service):
    # A hard quota of 3 GPUs of any type; chat holds 1 (one L4 replica), a second service of the tenant holds 1:
    # 3 - 2 = 1 GPU left, so chat may reach 2 replicas, not its maximum of 4. Two nodes wanted: n-a holds the
    # weights, and n-b and n-d both have the whole 100 GB budget free: n-b first by name.
    set_gpu_quota(service.tenant, 3)
    other = InferenceServiceFactory(tenant=service.tenant, name="other", cluster=service.cluster, pools=[])
    PoolFactory(service=other, gpu_type="l4-24gb", replicas=1, max_replicas=1)
    plan = prefetch_plan(service)
    assert (plan["wanted"], plan["held"], plan["targets"], plan["short"]) == (2, ["n-a"], ["n-b"], 0)
    assert plan["reach"] == 2 and plan["quota_limited"]
    assert plan["quota_words"] == ("The tenant's GPU quota limits the plan to 2 replica(s), not the maximum of 4: "
                                   "tenant alpha uses 2 of 3 GPUs.")

    other.pools.update(replicas=2, max_replicas=2)  # the quota is used up: chat cannot scale at all
    plan = prefetch_plan(service)
    assert (plan["wanted"], plan["targets"], plan["reach"]) == (0, [], 1)
    assert plan["words"] == "No scale-up room within the tenant's GPU quota: nothing to prefetch."


def test_a_quota_above_the_maximum_leaves_the_plan_alone(service):
    set_gpu_quota(service.tenant, 5)  # 1 held, 4 left: the maximum of 4 binds first
    plan = prefetch_plan(service)
    assert (plan["wanted"], plan["reach"], plan["quota_limited"], plan["quota_words"]) == (4, 4, False, "")


def test_a_model_the_platform_does_not_cache_has_no_plan(service):
    ModelCache.objects.all().delete()
    assert prefetch_plan(service) is None


def test_the_scaling_panel_shows_the_plan(client, viewer_a, service):
    client.force_login(viewer_a)
    body = client.get(reverse("web:scaling-panel", args=[service.pk])).content.decode()
    assert "Weights prefetch" in body and "to copy to 2" in body and "n-d: to copy" in body
    page = client.get(reverse("web:service", args=[service.tenant.slug, service.name])).content.decode()
    assert "n-a: holds the weights" in page
    assert "prefetch-quota" not in body


def test_the_scaling_panel_says_when_the_quota_limits_the_plan(client, viewer_a, service):
    set_gpu_quota(service.tenant, 2)  # 1 held, room for one more replica of the maximum 4
    client.force_login(viewer_a)
    body = client.get(reverse("web:scaling-panel", args=[service.pk])).content.decode()
    assert ('<p class="small" id="prefetch-quota">The tenant&#x27;s GPU quota limits the plan to 2 replica(s), '
            'not the maximum of 4: tenant alpha uses 1 of 2 GPUs.</p>') in body
    assert "16 GB of weights wanted on 2 node(s): held on 1, to copy to 1." in body
