"""Where an engine pod reads its weights, as the renderer writes it: the node-local copy when the node holds one,
else the cluster cache (one per cluster for a platform-wide model, the tenant's own for a private one); and the
preferred node affinity that places replicas on nodes holding the weights, checked against kubesim's scheduler."""

import dataclasses
import json

from apps.serving.rendering import render_service
from enginevocab.labels import WEIGHTS_ANNOTATION, model_held_label
from tests.kubesim.cluster_support import GPU_TOLERATION
from tests.polling import wait_for
from tests.serving.golden.specs import LLAMA_8B, SPECS


def spec(**changes):
    return dataclasses.replace(SPECS["standard-vllm"](), **{"has_gateway": False, **changes})


def pod_template(service_spec) -> dict:
    deployment = next(o for o in render_service(service_spec) if o["kind"] == "Deployment"
                      and o["metadata"]["name"] == service_spec.name)
    return deployment["spec"]["template"]


def weights(service_spec) -> dict:
    return json.loads(pod_template(service_spec)["metadata"]["annotations"][WEIGHTS_ANNOTATION])


def test_a_private_model_is_cached_in_its_tenants_namespace():
    acme, beta = weights(spec()), weights(spec(tenant="beta", namespace="tenant-beta"))
    assert acme["cluster_cache"].startswith("tenant-acme/model-llama-3-1-8b-")
    assert beta["cluster_cache"].startswith("tenant-beta/model-llama-3-1-8b-")
    # 8.03 billion parameters in BF16.
    assert acme["bytes"] == 16_060_000_000 and acme["model"] == "llama-3-1-8b"


def test_a_platform_model_has_one_cluster_cache_for_every_tenant():
    platform = dataclasses.replace(LLAMA_8B, platform_wide=True)
    acme = weights(spec(model=platform))
    beta = weights(spec(model=platform, tenant="beta", namespace="tenant-beta"))
    assert acme["cluster_cache"] == beta["cluster_cache"]
    assert acme["cluster_cache"].startswith("platform/model-llama-3-1-8b-")


def test_the_pod_links_the_node_copy_when_complete_else_the_cluster_cache():
    pod = pod_template(spec())["spec"]
    select = pod["initContainers"][-1]
    assert select["name"] == "select-weights"
    script = select["command"][2]
    assert "if [ -f /node-model/.complete ]; then" in script
    assert "ln -sfn /node-model /models/Llama-3.1-8B-Instruct" in script
    engine = pod["containers"][0]
    assert engine["args"][engine["args"].index("--model") + 1] == "/models/Llama-3.1-8B-Instruct"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["node-model"]["csi"] == {"driver": "models.controlplane.io", "readOnly": True,
                                            "volumeAttributes": {"model": "llama-3-1-8b"}}
    assert "hostPath" not in json.dumps(pod)  # Pod Security "baseline" refuses it in tenant namespaces


def test_weights_on_a_claim_of_their_own_need_neither_cache_nor_affinity():
    template = pod_template(spec(model=dataclasses.replace(LLAMA_8B, source_uri="pvc://shared/llama")))
    assert WEIGHTS_ANNOTATION not in template["metadata"].get("annotations", {})
    assert "affinity" not in template["spec"]
    assert "initContainers" not in template["spec"] or all(
        c["name"] != "select-weights" for c in template["spec"]["initContainers"])


def placed_on(cluster, name: str, template: dict) -> str:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
           "spec": {"nodeSelector": template["spec"]["nodeSelector"], "affinity": template["spec"]["affinity"],
                    "tolerations": [GPU_TOLERATION],
                    "containers": [{"name": "c", "image": "busybox",
                                    "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
    cluster.core.create_namespaced_pod("default", pod)
    return wait_for(lambda: cluster.core.read_namespaced_pod(name, "default").spec.node_name, message="bound")


def test_replicas_prefer_nodes_holding_their_weights_and_go_elsewhere_when_those_are_full(make_cluster):
    cluster = make_cluster(nodes="l4-24gb:3x1")
    nodes = sorted(n.metadata.name for n in cluster.core.list_node(
        label_selector="nvidia.com/gpu.product=NVIDIA-L4").items)
    template = pod_template(spec())
    # Without a warm node, the scheduler's own order (equal scores, then the name) takes the first node.
    assert placed_on(cluster, "cold", template) == nodes[0]
    cluster.core.patch_node(nodes[2], {"metadata": {"labels": {model_held_label("llama-3-1-8b"): "true"}}})
    assert placed_on(cluster, "warm", template) == nodes[2]
    # The warm node's one GPU is taken now: the preference is not a requirement, the next pod goes to the free node.
    assert placed_on(cluster, "spill", template) == nodes[1]


def test_the_model_agent_runs_on_every_node_with_the_nodes_model_directory_and_its_plan():
    from apps.serving.rendering.modelagent import agent_daemonset, plan_config_map

    daemonset = agent_daemonset("registry.example/model-agent:1.0")
    pod = daemonset["spec"]["template"]["spec"]
    assert daemonset["kind"] == "DaemonSet" and daemonset["metadata"]["namespace"] == "controlplane"
    assert pod["tolerations"] == [{"operator": "Exists"}]  # GPU nodes' taints too
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["models"]["hostPath"]["path"] == "/var/lib/controlplane/models"
    assert volumes["plan"] == {"name": "plan", "configMap": {"name": "model-agent"}}
    plan = {"budget_bytes": 10, "nodes": {"n1": [{"model": "m", "bytes": 5}]}}
    assert json.loads(plan_config_map(plan)["data"]["plan"]) == plan
