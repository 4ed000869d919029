"""The model agent that runs on real clusters (`python -m workers.modelagent`), against kubesim's API server through
the official client over HTTP, with temporary directories as the cluster cache and the node's disk: it copies what
the plan gives its node, labels the node, evicts the least recently used model no longer planned (never one a pod on
the node reads), refuses what cannot fit, and records each step as an Event on the Node."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from enginevocab.labels import WEIGHTS_ANNOTATION
from workers.modelagent import NodeAgent

GB = 10**9


@pytest.fixture
def node_disk(tmp_path, make_cluster):
    """(cluster, node name, cache dir, models dir, plan file): one L4 node; kubesim's own agent gets no plan (its
    ConfigMap is never written), so only the agent under test acts."""
    sim = make_cluster(nodes="l4-24gb:1x1")
    node = sim.core.list_node(label_selector="nvidia.com/gpu.product=NVIDIA-L4").items[0].metadata.name
    cache, models = tmp_path / "cluster-cache", tmp_path / "node-models"
    models.mkdir()
    for claim, files in [("model-llama", {"config.json": "{}", "model.safetensors": "L" * 1000}),
                         ("model-qwen", {"config.json": "{}", "model.safetensors": "Q" * 900}),
                         ("model-mistral", {"model.safetensors": "M" * 800})]:
        folder = cache / claim / "weights"
        folder.mkdir(parents=True)
        for name, text in files.items():
            (folder / name).write_text(text)
        (folder / ".complete").touch()
    return sim, node, cache, models, tmp_path / "plan"


def write_plan(path, node: str, models: list[tuple[str, int]], budget: int) -> None:
    items = [{"model": m, "bytes": b, "source": f"model-{m.split('-')[0]}/weights"} for m, b in models]
    path.write_text(json.dumps({"budget_bytes": budget, "nodes": {node: items}}))


def held_labels(sim, node: str) -> set[str]:
    labels = sim.core.read_node(node).metadata.labels or {}
    return {k.split("/", 1)[1] for k, v in labels.items() if k.startswith("models.controlplane.io/") and v == "true"}


def agent_events(sim, node: str) -> list[tuple[str, str, str]]:
    events = sim.core.list_namespaced_event("default", field_selector=f"involvedObject.name={node}").items
    return [(e.type, e.reason, e.message) for e in sorted(events, key=lambda e: int(e.metadata.resource_version))
            if e.source.component == "model-agent"]


def test_the_agent_copies_labels_and_reports_on_the_node(node_disk):
    sim, node, cache, models, plan = node_disk
    write_plan(plan, node, [("llama-8b", 16 * GB), ("qwen-7b", 15 * GB)], budget=40 * GB)
    NodeAgent(sim.core, node, plan, cache, models).sync()

    assert (models / "llama-8b" / "model.safetensors").read_text() == "L" * 1000
    assert (models / "qwen-7b" / "config.json").read_text() == "{}"
    assert json.loads((models / "llama-8b" / ".complete").read_text()) == {"bytes": 16 * GB}
    assert sorted(p.name for p in models.iterdir()) == ["llama-8b", "qwen-7b"]  # no partial copy left
    assert held_labels(sim, node) == {"llama-8b", "qwen-7b"}
    assert agent_events(sim, node) == [
        ("Normal", "ModelCopying", "copying llama-8b (16 GB) to the node's disk"),
        ("Normal", "ModelCopied", "llama-8b (16 GB) held on the node; 16 GB of 40 GB used"),
        ("Normal", "ModelCopying", "copying qwen-7b (15 GB) to the node's disk"),
        ("Normal", "ModelCopied", "qwen-7b (15 GB) held on the node; 31 GB of 40 GB used"),
    ]

    NodeAgent(sim.core, node, plan, cache, models).sync()  # a new process: nothing more to do, nothing said
    assert len(agent_events(sim, node)) == 4


def last_used(models, **seconds_ago: float) -> None:
    now = time.time()
    for model, ago in seconds_ago.items():
        os.utime(models / model.replace("_", "-") / ".complete", (now - ago, now - ago))


def llama_and_qwen_held(node_disk) -> NodeAgent:
    sim, node, cache, models, plan = node_disk
    agent = NodeAgent(sim.core, node, plan, cache, models)
    write_plan(plan, node, [("llama-8b", 16 * GB), ("qwen-7b", 15 * GB)], budget=40 * GB)
    agent.sync()
    return agent


def test_the_least_recently_used_model_no_longer_planned_is_evicted(node_disk):
    sim, node, _cache, models, plan = node_disk
    agent = llama_and_qwen_held(node_disk)
    last_used(models, qwen_7b=600, llama_8b=60)  # qwen was copied last but llama was read since

    # Neither is planned now; mistral's 16 GB needs 7 GB more than the 9 GB left: one model goes, qwen.
    write_plan(plan, node, [("mistral-7b", 16 * GB)], budget=40 * GB)
    agent.sync()
    assert sorted(p.name for p in models.iterdir()) == ["llama-8b", "mistral-7b"]
    assert held_labels(sim, node) == {"llama-8b", "mistral-7b"}
    assert agent_events(sim, node)[-3:] == [
        ("Normal", "ModelEvicted", "evicted qwen-7b (least recently used) to make room for mistral-7b"),
        ("Normal", "ModelCopying", "copying mistral-7b (16 GB) to the node's disk"),
        ("Normal", "ModelCopied", "mistral-7b (16 GB) held on the node; 32 GB of 40 GB used"),
    ]


def test_a_model_a_pod_reads_is_never_evicted_and_what_cannot_fit_is_refused(node_disk):
    sim, node, cache, models, plan = node_disk
    agent = llama_and_qwen_held(node_disk)
    last_used(models, qwen_7b=600)  # an engine pod on the node reads qwen, the least recently used of the two
    sim.core.create_namespace({"metadata": {"name": "tenant-alpha"}})
    sim.core.create_namespaced_pod("tenant-alpha", {
        "metadata": {"name": "engine", "annotations": {WEIGHTS_ANNOTATION: json.dumps({"model": "qwen-7b"})}},
        "spec": {"nodeName": node, "containers": [{"name": "engine", "image": "vllm/vllm-openai:v0.11.0"}]}})

    write_plan(plan, node, [("mistral-7b", 16 * GB)], budget=40 * GB)
    agent.sync()
    assert sorted(p.name for p in models.iterdir()) == ["mistral-7b", "qwen-7b"]  # llama went instead
    assert ("Normal", "ModelEvicted", "evicted llama-8b (least recently used) to make room for mistral-7b") in \
        agent_events(sim, node)

    # 31 GB held, both in use (planned or read): a 70B's 141 GB is over the budget, an 11 GB model has no room.
    write_plan(plan, node, [("mistral-7b", 16 * GB), ("llama-70b", 141 * GB), ("qwen-big", 11 * GB)],
               budget=40 * GB)
    (cache / "model-llama" / "weights").rename(cache / "model-llama" / "weights-8b")  # never read: refused first
    agent.sync()
    agent.sync()  # refusals are said once
    warnings = [e for e in agent_events(sim, node) if e[0] == "Warning"]
    assert warnings == [("Warning", "ModelNotCopied", "no room for qwen-big on the node without evicting models "
                                                      "in use")]
    assert sorted(p.name for p in models.iterdir()) == ["mistral-7b", "qwen-7b"]
    waiting = [e for e in agent_events(sim, node) if e[1] == "ModelNotCopied" and e[0] == "Normal"]
    assert waiting == [("Normal", "ModelNotCopied",
                        "llama-70b: the cluster cache has no complete copy at model-llama/weights yet")]


def test_a_model_larger_than_the_budget_is_refused(node_disk):
    sim, node, cache, models, plan = node_disk
    write_plan(plan, node, [("llama-8b", 41 * GB)], budget=40 * GB)
    NodeAgent(sim.core, node, plan, cache, models).sync()
    assert agent_events(sim, node) == [("Warning", "ModelNotCopied", "llama-8b (41,000,000,000 bytes) is larger than "
                                        "the node's cache budget (40,000,000,000 bytes)")]
    assert list(models.iterdir()) == [] and held_labels(sim, node) == set()


def test_the_program_runs_from_a_kubeconfig_without_django(node_disk, tmp_path):
    sim, node, cache, models, plan = node_disk
    write_plan(plan, node, [("qwen-7b", 15 * GB)], budget=40 * GB)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "sim",
        "clusters": [{"name": "sim", "cluster": {"server": sim.url}}],
        "contexts": [{"name": "sim", "context": {"cluster": "sim", "user": "agent"}}],
        "users": [{"name": "agent", "user": {}}]}))
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"} | {"KUBECONFIG": str(kubeconfig),
                                                                                    "NODE_NAME": node}
    code = ("import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_module('workers.modelagent', run_name='__main__')")
    args = ["--plan", str(plan), "--cache", str(cache), "--models", str(models), "--once"]
    done = subprocess.run([sys.executable, "-c", "import sys; import workers.modelagent; "
                           "assert 'django' not in sys.modules, 'the agent imported Django'"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    done = subprocess.run([sys.executable, "-c", code, "modelagent", *args], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert held_labels(sim, node) == {"qwen-7b"}
    assert (models / "qwen-7b" / "model.safetensors").read_text() == "Q" * 900


def test_the_agents_cluster_role_is_enough_for_it_and_without_its_binding_it_is_refused(tmp_path, make_cluster):
    """Under RBAC, the agent acting as its ServiceAccount with the rendered ClusterRole copies, labels, lists the pods
    of its node and records Events; with the binding removed the API server refuses it (403)."""
    from kubernetes import client

    from apps.serving.rendering.modelagent import agent_objects

    sim = make_cluster(nodes="l4-24gb:1x1", authorization="rbac")  # the test's own client is the admin
    node = sim.core.list_node(label_selector="nvidia.com/gpu.product=NVIDIA-L4").items[0].metadata.name
    sim.core.create_namespace({"metadata": {"name": "controlplane"}})
    rbac = client.RbacAuthorizationV1Api(sim.api_client)
    account, role, binding = agent_objects("registry.example/controlplane:0.1.0", "nfs://nfs.example/models")[:3]
    sim.core.create_namespaced_service_account("controlplane", account)
    rbac.create_cluster_role(role)
    rbac.create_cluster_role_binding(binding)
    request = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600))
    token = sim.core.create_namespaced_service_account_token("model-agent", "controlplane", request).status.token
    config = client.Configuration()
    config.host, config.api_key = sim.url, {"authorization": f"Bearer {token}"}
    as_agent = client.CoreV1Api(client.ApiClient(config))

    cache, models = tmp_path / "cache", tmp_path / "models"
    (cache / "model-qwen" / "weights").mkdir(parents=True)
    (cache / "model-qwen" / "weights" / "model.safetensors").write_text("Q")
    (cache / "model-qwen" / "weights" / ".complete").touch()
    models.mkdir()
    plan = tmp_path / "plan"
    write_plan(plan, node, [("qwen-7b", 15 * GB)], budget=40 * GB)
    NodeAgent(as_agent, node, plan, cache, models).sync()
    assert held_labels(sim, node) == {"qwen-7b"}
    assert [e[1] for e in agent_events(sim, node)] == ["ModelCopying", "ModelCopied"]

    rbac.delete_cluster_role_binding("model-agent")
    with pytest.raises(client.ApiException) as refused:
        NodeAgent(as_agent, node, plan, cache, models).sync()
    assert refused.value.status == 403
