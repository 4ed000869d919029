"""Engines inside the simulated cluster: Deployments of vLLM and SGLang become Ready, answer through the
service proxy (streaming too), expose /metrics through the pod proxy, and a misspelled flag crash-loops."""

import json
import urllib.request

import pytest
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from kubesim.__main__ import main
from tests.kubesim.cluster_support import GPU_TOLERATION, deployment_of
from tests.polling import wait_for as poll
from tests.simcluster import cluster_starter


def wait_for(predicate, message="condition"):
    return poll(predicate, timeout=20.0, interval=0.1, message=message)


LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


@pytest.fixture(scope="module")
def cluster():
    """One cluster for the module (engines take a while to become Ready): (server, api client, namespace)."""
    with cluster_starter() as make:
        handle = make(nodes="h100-sxm-80gb:1x8", seed=3)
        ns = "engines"
        handle.core.create_namespace({"metadata": {"name": ns}})
        yield handle.server, handle.api_client, ns


def engine_deployment(name, image, command, args, replicas=1, port=8000):
    container = {
        "name": "engine",
        "image": image,
        "args": args,
        "ports": [{"containerPort": port, "name": "http"}],
        "resources": {"limits": {"nvidia.com/gpu": "1"}},
    }
    if command:
        container["command"] = command
    pod_spec = {"containers": [container], "tolerations": [GPU_TOLERATION]}
    return deployment_of(name, replicas, pod_spec, {"kubesim.io/time-scale": "5"})


def service(name, port, policy=None):
    meta = {"name": name}
    if policy:
        meta["annotations"] = {"kubesim.io/routing-policy": policy}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta,
        "spec": {"selector": {"app": name}, "ports": [{"port": port, "targetPort": port}]},
    }


def post(url, body):
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.status, r.read().decode()


def ready_replicas(apps, ns, name):
    return apps.read_namespaced_deployment(name, ns).status.ready_replicas or 0


def test_vllm_deployment_serves_streams_and_counts_through_the_proxies(cluster):
    server, api, ns = cluster
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    apps.create_namespaced_deployment(
        ns, engine_deployment("llama", "vllm/vllm-openai:v0.33.0", None, [LLAMA, "--max-model-len", "8192"], replicas=2)
    )
    core.create_namespaced_service(ns, service("llama", 8000, policy="prefix_aware"))
    wait_for(lambda: ready_replicas(apps, ns, "llama") == 2, message="2 ready vLLM replicas")
    base = f"{server.url}/api/v1/namespaces/{ns}/services/llama:8000/proxy"
    status, text = post(base + "/v1/completions", {"prompt": "hello there", "max_tokens": 5, "ignore_eos": True})
    assert status == 200 and json.loads(text)["usage"]["completion_tokens"] == 5
    status, text = post(
        base + "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "stream please"}], "max_tokens": 6, "stream": True},
    )
    lines = [ln for ln in text.splitlines() if ln.startswith("data: ")]
    assert status == 200 and lines[-1] == "data: [DONE]" and len(lines) == 1 + 6 + 1 + 1
    pods = core.list_namespaced_pod(ns, label_selector="app=llama").items

    def served_per_pod() -> list[float]:
        out = []
        for pod in pods:
            text = core.connect_get_namespaced_pod_proxy_with_path(f"{pod.metadata.name}:8000", ns, "metrics")
            for fam in text_string_to_metric_families(text):
                if fam.name == "vllm:request_success":
                    out.append(sum(s.value for s in fam.samples if s.name.endswith("_total")))
        return out

    before = served_per_pod()
    assert sum(before) == 2
    # The Service's prefix_aware policy keeps a shared system prompt on one pod.
    system = "You are the operations assistant of a GPU cluster. " * 20
    for i in range(4):
        status, _ = post(base + "/v1/completions", {"prompt": f"{system} question {i}", "max_tokens": 2})
        assert status == 200
    added = sorted(after - b for after, b in zip(served_per_pod(), before, strict=True))
    assert added == [0, 4]
    logs = core.read_namespaced_pod_log(pods[0].metadata.name, ns)
    assert "GPU KV cache size" in logs


def test_load_command_drives_a_service_and_its_metrics_move(cluster, capsys):
    server, api, ns = cluster
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    apps.create_namespaced_deployment(
        ns, engine_deployment("demo", "vllm/vllm-openai:v0.33.0", None, [LLAMA, "--max-model-len", "8192"])
    )
    core.create_namespaced_service(ns, service("demo", 8000))
    wait_for(lambda: ready_replicas(apps, ns, "demo") == 1, message="ready vLLM replica")
    code = main(
        [
            "load",
            "--target",
            f"{ns}/demo:8000",
            "--server",
            server.url,
            "--rate",
            "20",
            "--duration",
            "1",
            "--pattern",
            "constant",
            "--prompt-tokens",
            "200",
            "--output-tokens",
            "10",
            "--seed",
            "2",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0 and "requests 20  errors 0" in out and "TTFT p50" in out
    pod = core.list_namespaced_pod(ns, label_selector="app=demo").items[0]
    text = core.connect_get_namespaced_pod_proxy_with_path(f"{pod.metadata.name}:8000", ns, "metrics")
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    assert sum(s.value for s in fams["vllm:generation_tokens"].samples if s.name.endswith("_total")) == 20 * 10
    assert sum(s.value for s in fams["vllm:prompt_tokens"].samples if s.name.endswith("_total")) == 20 * 200


def test_misspelled_flag_crash_loops_the_pod_with_the_engines_message(cluster):
    _server, api, ns = cluster
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    apps.create_namespaced_deployment(
        ns, engine_deployment("typo", "vllm/vllm-openai:v0.33.0", None, [LLAMA, "--max-num-seqz", "64"])
    )

    def crash_looping():
        for pod in core.list_namespaced_pod(ns, label_selector="app=typo").items:
            for cs in pod.status.container_statuses or []:
                if cs.restart_count >= 1 or (cs.state.waiting and cs.state.waiting.reason == "CrashLoopBackOff"):
                    return pod
        return None

    pod = wait_for(crash_looping, message="CrashLoopBackOff")
    logs = core.read_namespaced_pod_log(pod.metadata.name, ns, previous=True)
    assert "vllm serve: error: unrecognized arguments: --max-num-seqz" in logs


def test_sglang_deployment_becomes_ready_and_answers(cluster):
    server, api, ns = cluster
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    cmd = ["python3", "-m", "sglang.launch_server"]
    args = [
        "--model-path",
        LLAMA,
        "--host",
        "0.0.0.0",
        "--port",
        "30000",
        "--enable-metrics",
        "--context-length",
        "8192",
    ]
    apps.create_namespaced_deployment(ns, engine_deployment("sg", "lmsysorg/sglang:v0.5.2", cmd, args, port=30000))
    core.create_namespaced_service(ns, service("sg", 30000))
    wait_for(lambda: ready_replicas(apps, ns, "sg") == 1, message="ready SGLang replica")
    base = f"{server.url}/api/v1/namespaces/{ns}/services/sg:30000/proxy"
    status, text = post(base + "/v1/completions", {"prompt": "a b c", "max_tokens": 3})
    assert status == 200 and json.loads(text)["usage"] == {
        "prompt_tokens": 3,
        "completion_tokens": 3,
        "total_tokens": 6,
    }
    pod = core.list_namespaced_pod(ns, label_selector="app=sg").items[0]
    text = core.connect_get_namespaced_pod_proxy_with_path(f"{pod.metadata.name}:30000", ns, "metrics")
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    assert sum(s.value for s in fams["sglang:generation_tokens"].samples if s.name.endswith("_total")) == 3


def test_production_stack_router_deployment_discovers_engines_and_routes_by_prefix(cluster):
    server, api, ns = cluster
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    apps.create_namespaced_deployment(
        ns,
        engine_deployment(
            "qwen",
            "vllm/vllm-openai:v0.33.0",
            None,
            ["Qwen/Qwen2.5-7B-Instruct", "--max-model-len", "8192"],
            replicas=2,
        ),
    )
    router_container = {
        "name": "router",
        "image": "lmcache/lmstack-router:latest",
        "command": ["vllm-router"],
        "args": [
            "--host",
            "0.0.0.0",
            "--port",
            "8000",
            "--service-discovery",
            "k8s",
            "--k8s-namespace",
            ns,
            "--k8s-port",
            "8000",
            "--k8s-label-selector",
            "app in (qwen)",
            "--routing-logic",
            "prefixaware",
        ],
        "ports": [{"containerPort": 8000, "name": "http"}],
    }
    router = deployment_of("qwen-router", 1, {"containers": [router_container]})
    apps.create_namespaced_deployment(ns, router)
    core.create_namespaced_service(ns, service("qwen-router", 8000))
    wait_for(
        lambda: ready_replicas(apps, ns, "qwen") == 2 and ready_replicas(apps, ns, "qwen-router") == 1,
        message="engines and router ready",
    )
    base = f"{server.url}/api/v1/namespaces/{ns}/services/qwen-router:8000/proxy"
    system = "You answer questions about the cluster. " * 30
    for i in range(4):
        status, _ = post(base + "/v1/completions", {"prompt": f"{system} question {i}", "max_tokens": 2})
        assert status == 200
    router_pod = core.list_namespaced_pod(ns, label_selector="app=qwen-router").items[0]
    text = core.connect_get_namespaced_pod_proxy_with_path(f"{router_pod.metadata.name}:8000", ns, "metrics")
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    served = [s.value for s in fams["router_requests"].samples if s.name.endswith("_total")]
    # The shared system prompt keeps every request on the engine that saw it first.
    assert served == [4.0]
    assert fams["router_prefix_match_ratio"].samples[0].value > 0.5
