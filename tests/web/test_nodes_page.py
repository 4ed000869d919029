"""The node page's access and its words for what the inventory stored: staff only, an eviction and a refusal from the
agent's Events, a model still to copy, and a node over its budget."""

from __future__ import annotations

import pytest
from django.urls import reverse

from apps.clusters.models import GpuNode
from apps.serving.models import ModelCache
from enginevocab.labels import model_held_label
from tests.factories import ClusterFactory, InferenceServiceFactory, ModelFactory, PoolFactory

pytestmark = pytest.mark.django_db


def test_tenants_are_refused_the_node_page(login, viewer_a):
    assert login(viewer_a).get(reverse("web:nodes")).status_code == 403


def test_the_page_reads_the_agents_events_and_its_plan(login, staff, tenant_a):
    cluster = ClusterFactory(name="east")
    old = ModelFactory(name="old-model")  # 8B: 16.06 GB
    service = InferenceServiceFactory(tenant=tenant_a, name="chat", cluster=cluster, pools=[])
    PoolFactory(service=service, gpu_type="l4-24gb", replicas=1, max_replicas=2)
    ModelCache.objects.create(cluster=cluster, model=service.model, node_budget_gb=20)
    GpuNode.objects.create(cluster=cluster, name="n1", gpu_product="NVIDIA-L4", gpu_count=1, allocatable=1,
                           allocated=1, labels={model_held_label(old.name): "true",
                                                model_held_label(service.model.name): "true"},
                           agent_events=[
                               {"reason": "ModelNotCopied", "message": "no room for x", "type": "Warning",
                                "time": "2026-01-01T00:00:02Z", "count": 3},
                               {"reason": "ModelEvicted", "message": "evicted y (least recently used)",
                                "type": "Normal", "time": "2026-01-01T00:00:01Z", "count": 1}])
    GpuNode.objects.create(cluster=cluster, name="n2", gpu_product="NVIDIA-L4", gpu_count=1, allocatable=1,
                           agent_events=[{"reason": "ModelCopying", "type": "Normal", "count": 1,
                                          "message": f"copying {service.model.name} (16 GB) to the node's disk",
                                          "time": "2026-01-01T00:00:03Z"}])
    GpuNode.objects.create(cluster=cluster, name="n3", gpu_product="NVIDIA-L4", gpu_count=1, allocatable=1)

    html = login(staff).get(reverse("web:nodes")).content.decode()
    n1 = html[html.index('id="node-n1"'):html.index('id="node-n2"')]
    n2 = html[html.index('id="node-n2"'):html.index('id="node-n3"')]
    n3 = html[html.index('id="node-n3"'):]
    # Two 16.06 GB copies on n1: 32 GB against a 20 GB budget.
    assert "32 GB of 20 GB used, 0 GB free (over the budget)" in n1
    assert "1 × NVIDIA-L4, 1 in use" in n1
    assert "<strong>Warning</strong> ModelNotCopied: no room for x (×3)" in n1
    assert "ModelEvicted: evicted y (least recently used)" in n1
    assert "latest ModelNotCopied" in n1
    # Two replicas at most: n1 holds the weights, n2 (the most room, then by name) is being copied to.
    assert f"copying: {service.model.name} (16 GB)" in n2
    assert "0 GB of 20 GB used, 20 GB free" in n2
    assert "nothing to copy" in n3 and "none" in n3
