"""The node page in headless Chromium at phone width: kubesim's GPU nodes as the inventory pass saw them, the model
copies the model agent made on their disks within the platform's budget, and the agent's Events, opened by keyboard;
axe-core clean and nothing wider than the screen. Tenants are refused the page."""

from __future__ import annotations

import pytest
from django.urls import reverse
from playwright.sync_api import expect

from apps.serving.models import ModelCache
from enginevocab.labels import model_held_label
from tests.factories import ClusterFactory, InferenceServiceFactory, PoolFactory
from tests.polling import wait_for
from tests.web.portal.page_checks import page_width, serious_axe_violations, tab_to
from workers.inventory import sync_inventory
from workers.kube import kube_for


@pytest.mark.browser
def test_staff_see_each_nodes_gpus_model_copies_disk_and_agent_events(browser_page, live_server, make_cluster,
                                                                      staff, tenant_a):
    sim = make_cluster(nodes="l4-24gb:3x1")
    cluster = ClusterFactory(name="sim", api_url=sim.url, insecure_simulator=True)
    service = InferenceServiceFactory(tenant=tenant_a, name="chat", cluster=cluster, pools=[])
    PoolFactory(service=service, gpu_type="l4-24gb", replicas=1, max_replicas=2)
    ModelCache.objects.create(cluster=cluster, model=service.model, node_budget_gb=40)
    model = service.model.name

    sync_inventory(cluster, kube_for(cluster))  # publishes the agent's plan: two of the three L4 nodes
    l4 = sorted(n.metadata.name for n in sim.core.list_node(label_selector="nvidia.com/gpu.product=NVIDIA-L4").items)
    label = model_held_label(model)
    wait_for(lambda: all((sim.core.read_node(n).metadata.labels or {}).get(label) == "true" for n in l4[:2]),
             message="the agent copied the weights to two nodes")
    sync_inventory(cluster, kube_for(cluster))  # reads the labels and the agent's Events

    page = browser_page(staff, viewport={"width": 390, "height": 844})
    page.goto(live_server.url + reverse("web:nodes"))
    expect(page.locator("#cluster-sim")).to_contain_text("Model copies may fill 40 GB of each node's disk.")
    warm, cold = page.locator(f"#node-{l4[0]}"), page.locator(f"#node-{l4[2]}")
    # Llama 3.1 8B in BF16 is 16.06 GB: 16 GB of the 40 GB budget, 24 GB left.
    expect(warm).to_contain_text("1 × NVIDIA-L4, 0 in use")
    expect(warm).to_contain_text(f"{model} (16 GB)")
    expect(warm).to_contain_text("16 GB of 40 GB used, 24 GB free")
    expect(warm).to_contain_text("nothing to copy")
    expect(cold).to_contain_text("none")
    expect(cold).to_contain_text("0 GB of 40 GB used, 40 GB free")
    expect(cold.locator("details")).to_have_count(0)  # the agent never touched the third node

    events = warm.locator("details ul")
    expect(events).to_be_hidden()
    tab_to(page, f"#node-{l4[0]} summary")
    page.keyboard.press("Enter")
    expect(events).to_be_visible()
    expect(events).to_contain_text(f"ModelCopying: copying {model} (16 GB) to the node's disk")
    expect(events).to_contain_text(f"ModelCopied: {model} (16 GB) held on the node; 16 GB of 40 GB used")

    assert serious_axe_violations(page) == []
    width, wide = page_width(page)
    assert width <= 391 and wide == []
