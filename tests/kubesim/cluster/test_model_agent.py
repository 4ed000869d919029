"""kubesim's model agent: copies the planned models onto a node's disk within the budget, labels the node with each
model it holds, evicts the least recently used model no longer planned to make room, and reports it all as Events."""

import json

from enginevocab.labels import model_held_label
from tests.polling import wait_for

GB = 10**9


def set_plan(cluster, node: str, models: list[tuple[str, int]], budget: int) -> None:
    body = {"metadata": {"name": "model-agent", "namespace": "controlplane"},
            "data": {"plan": json.dumps({"budget_bytes": budget,
                                         "nodes": {node: [{"model": m, "bytes": b} for m, b in models]}})}}
    if not [c for c in cluster.core.list_namespaced_config_map("controlplane").items
            if c.metadata.name == "model-agent"]:
        cluster.core.create_namespaced_config_map("controlplane", body)
    else:
        cluster.core.replace_namespaced_config_map("model-agent", "controlplane", body)


def held(cluster, node: str) -> set[str]:
    labels = cluster.core.read_node(node).metadata.labels or {}
    return {key.split("/", 1)[1] for key, value in labels.items()
            if key.startswith("models.controlplane.io/") and value == "true"}


def node_events(cluster, node: str) -> list[tuple[str, str]]:
    events = cluster.core.list_namespaced_event("default", field_selector=f"involvedObject.name={node}").items
    return [(e.reason, e.message) for e in sorted(events, key=lambda e: int(e.metadata.resource_version))
            if e.reason.startswith("Model")]


def test_the_agent_copies_labels_and_evicts_the_least_recently_used(make_cluster):
    cluster = make_cluster(nodes="l4-24gb:1x1")
    node = cluster.core.list_node(label_selector="nvidia.com/gpu.product=NVIDIA-L4").items[0].metadata.name
    cluster.core.create_namespace({"metadata": {"name": "controlplane"}})
    set_plan(cluster, node, [("llama-8b", 16 * GB), ("qwen-7b", 15 * GB)], budget=40 * GB)
    wait_for(lambda: held(cluster, node) == {"llama-8b", "qwen-7b"}, message="both copied")

    # 31 GB held of 40: mistral's 16 GB needs llama's room; llama is no longer planned, so it goes.
    set_plan(cluster, node, [("qwen-7b", 15 * GB), ("mistral-7b", 16 * GB)], budget=40 * GB)
    wait_for(lambda: held(cluster, node) == {"qwen-7b", "mistral-7b"}, message="llama evicted, mistral copied")
    assert model_held_label("llama-8b") not in (cluster.core.read_node(node).metadata.labels or {})

    set_plan(cluster, node, [("qwen-7b", 15 * GB), ("mistral-7b", 16 * GB), ("llama-70b", 141 * GB)],
             budget=40 * GB)
    found = wait_for(lambda: [e for e in node_events(cluster, node) if e[0] == "ModelNotCopied"],
                     message="the 70B refused")
    assert "larger than the node's cache budget" in found[0][1]
    reasons = [reason for reason, _ in node_events(cluster, node)]
    assert reasons[:4] == ["ModelCopying", "ModelCopied", "ModelCopying", "ModelCopied"]
    assert ("ModelEvicted", "evicted llama-8b (least recently used) to make room for mistral-7b") in \
        node_events(cluster, node)
    assert held(cluster, node) == {"qwen-7b", "mistral-7b"}
