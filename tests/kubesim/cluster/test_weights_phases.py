"""The kubelet times an engine pod's start-up by where its weights are: downloaded into an empty cluster cache first,
read from the cluster cache once a pod filled it, or read from a node-local copy the node's label announces; an Event
records each phase with its seconds."""

import json

from enginevocab.labels import WEIGHTS_ANNOTATION, model_held_label
from tests.kubesim.cluster_support import GPU_TOLERATION, is_ready
from tests.polling import wait_for

NS = "default"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
PHASE_REASONS = ("WeightsDownloaded", "WeightsRead", "WeightsLoaded", "EngineInitialized")


def engine_pod(name: str, node: str, node_copy: bool = True) -> dict:
    weights = {"model": "llama-8b", "cluster_cache": f"{NS}/cache-llama-8b"}
    if node_copy:  # the pod mounts the node's copy (its cluster's node model volume is hostPath or csi)
        weights["node_path"] = "/var/lib/models/llama-8b"
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "annotations": {WEIGHTS_ANNOTATION: json.dumps(weights)}},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node}, "tolerations": [GPU_TOLERATION],
            "containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.8.5",
                            "args": ["--model", MODEL, "--max-model-len", "8192"],
                            "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        },
    }


def phase_events(cluster, pod: str) -> list[tuple[str, str]]:
    events = cluster.core.list_namespaced_event(NS, field_selector=f"involvedObject.name={pod}").items
    ordered = sorted(events, key=lambda e: int(e.metadata.resource_version))  # in the order they were recorded
    return [(e.reason, e.message) for e in ordered if e.reason in PHASE_REASONS]


def start(cluster, name: str, node: str, phases: int = 3, node_copy: bool = True) -> list[tuple[str, str]]:
    cluster.core.create_namespaced_pod(NS, engine_pod(name, node, node_copy))
    wait_for(lambda: is_ready(cluster.core.read_namespaced_pod(name, NS)), message=f"{name} Ready")
    return wait_for(lambda: len(phase_events(cluster, name)) >= phases and phase_events(cluster, name),
                    message=f"{name}'s phase events")


def test_the_first_pod_downloads_the_next_ones_read_the_cache_or_their_nodes_copy(make_cluster):
    cluster = make_cluster(nodes="l4-24gb:2x1")
    nodes = cluster.core.list_node(label_selector="nvidia.com/gpu.product=NVIDIA-L4").items
    first, second = sorted(n.metadata.name for n in nodes)

    # Llama-3.1-8B, 16.06 GB: 80.3 s from the source at 200 MB/s, 8.0 s from the cluster cache at 2 GB/s;
    # over the L4's PCIe 4.0 link at 25.2 GB/s, 0.6 s; vLLM's init 20 s.
    assert start(cluster, "cold", first, phases=4) == [
        ("WeightsDownloaded", "download 16 GB at 200 MB/s in 80.3 s from none"),
        ("WeightsRead", "read 16 GB at 2 GB/s in 8.0 s from none"),
        ("WeightsLoaded", "load 16 GB at 25 GB/s in 0.6 s from none"),
        ("EngineInitialized", "init in 20.0 s from none"),
    ]

    cluster.core.patch_node(second, {"metadata": {"labels": {model_held_label("llama-8b"): "true"}}})
    # 16.06 GB from the node's disk at 5 GB/s: 3.2 s.
    assert start(cluster, "local", second)[0] == ("WeightsRead", "read 16 GB at 5 GB/s in 3.2 s from node")
    cluster.core.delete_namespaced_pod("cold", NS, grace_period_seconds=0)
    wait_for(lambda: not [p for p in cluster.core.list_namespaced_pod(NS).items if p.metadata.name == "cold"],
             message="the first pod gone")
    assert start(cluster, "warm", first)[0] == ("WeightsRead", "read 16 GB at 2 GB/s in 8.0 s from cluster")


def test_a_pod_that_mounts_no_node_copy_reads_the_cluster_cache_on_a_node_holding_the_weights(make_cluster):
    cluster = make_cluster(nodes="l4-24gb:1x1")
    node = cluster.core.list_node(label_selector="nvidia.com/gpu.product=NVIDIA-L4").items[0].metadata.name
    cluster.core.patch_node(node, {"metadata": {"labels": {model_held_label("llama-8b"): "true"}}})
    # No node_path in its annotation (node model volume "none"): the node's copy is out of its reach, so the first
    # pod downloads into the empty cluster cache although the node holds the weights.
    assert start(cluster, "first", node, phases=4, node_copy=False)[0] == (
        "WeightsDownloaded", "download 16 GB at 200 MB/s in 80.3 s from none")


def test_kubesim_runs_a_pod_mounting_the_node_copy_by_hostpath(make_cluster):
    from apps.serving.rendering.weights import NODE_CACHE_DIR

    cluster = make_cluster(nodes="l4-24gb:1x1")
    node = cluster.core.list_node(label_selector="nvidia.com/gpu.product=NVIDIA-L4").items[0].metadata.name
    cluster.core.patch_node(node, {"metadata": {"labels": {model_held_label("llama-8b"): "true"}}})
    pod = engine_pod("hostpath", node)
    # The node model volume "hostPath", as the renderer writes it for this model.
    pod["spec"]["volumes"] = [{"name": "node-model", "hostPath": {"path": "/var/lib/models/llama-8b",
                                                                  "type": "DirectoryOrCreate"}}]
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "node-model", "mountPath": NODE_CACHE_DIR,
                                                     "readOnly": True}]
    cluster.core.create_namespaced_pod(NS, pod)
    wait_for(lambda: is_ready(cluster.core.read_namespaced_pod("hostpath", NS)), message="hostpath Ready")
    events = wait_for(lambda: len(phase_events(cluster, "hostpath")) >= 3 and phase_events(cluster, "hostpath"),
                      message="its phase events")
    assert events[0] == ("WeightsRead", "read 16 GB at 5 GB/s in 3.2 s from node")
