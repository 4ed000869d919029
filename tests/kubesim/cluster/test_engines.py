"""The kubelet runs engine images through `kubesim.engines.workload_for` (the workload contract):
a vLLM pod on a GPU node serves OpenAI endpoints and metrics through the pod proxy, and a bad command
line crash-loops with the engine's own message in the logs."""

import json

import requests

from tests.kubesim.cluster_support import is_ready
from tests.polling import wait_for

NS = "default"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"



def vllm_pod(name: str, extra_args: list[str] | None = None) -> dict:
    container = {
        "name": "vllm",
        "image": "vllm/vllm-openai:v0.8.5",
        "args": ["--model", MODEL, "--port", "8000", *(extra_args or [])],
        "ports": [{"containerPort": 8000, "name": "http"}],
        "resources": {"limits": {"nvidia.com/gpu": "1"}},
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "vllm"}},
        "spec": {"containers": [container]},
    }


def test_a_vllm_pod_serves_models_and_metrics_through_the_pod_proxy(make_cluster):
    cluster = make_cluster(nodes="h100-sxm-80gb:1x8")
    cluster.core.create_namespaced_pod(NS, vllm_pod("vllm"))
    wait_for(lambda: is_ready(cluster.core.read_namespaced_pod("vllm", NS)), message="engine Ready")
    models = json.loads(cluster.core.connect_get_namespaced_pod_proxy_with_path(
        "vllm:8000", NS, "v1/models", _preload_content=False).data)
    assert [m["id"] for m in models["data"]] == [MODEL]
    metrics = cluster.core.connect_get_namespaced_pod_proxy_with_path("vllm:http", NS, "metrics")
    assert "vllm:num_requests_running" in metrics
    url = f"{cluster.url}/api/v1/namespaces/{NS}/pods/vllm:8000/proxy/v1/completions"
    answer = requests.post(url, json={"model": MODEL, "prompt": "hello", "max_tokens": 3}, timeout=30)
    assert answer.status_code == 200
    assert answer.json()["usage"]["completion_tokens"] == 3


def test_an_engine_with_a_bad_flag_crash_loops_with_its_usage_message(make_cluster):
    cluster = make_cluster(nodes="h100-sxm-80gb:1x8")
    cluster.core.create_namespaced_pod(NS, vllm_pod("bad", ["--no-such-flag"]))

    def backing_off():
        statuses = cluster.core.read_namespaced_pod("bad", NS).status.container_statuses or []
        waiting = statuses and statuses[0].state.waiting
        return waiting and waiting.reason == "CrashLoopBackOff" and statuses[0]

    container = wait_for(backing_off, message="CrashLoopBackOff")
    assert container.last_state.terminated.exit_code != 0
    assert "usage: vllm serve" in cluster.core.read_namespaced_pod_log("bad", NS, previous=True)
