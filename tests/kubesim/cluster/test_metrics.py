"""metrics.k8s.io (kubectl top, the official client) and the simulated dcgm-exporter on each GPU node."""

from __future__ import annotations

import json
import re
import threading
import urllib.error
import urllib.request

import pytest

from tests.kubesim.cluster_support import GPU_TOLERATION, deployment_of, service_of
from tests.polling import wait_for
from tests.simcluster import cluster_starter

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
NS = "metrics"
NODE = "gpu-h100-sxm-80gb-0"
H100_MIB = 81559


@pytest.fixture(scope="module")
def cluster():
    with cluster_starter() as make:
        handle = make(nodes="h100-sxm-80gb:1x4", seed=9, dcgm_exporter=True)
        core, apps = handle.core, handle.apps
        core.create_namespace({"metadata": {"name": NS}})
        engine = {"name": "engine", "image": "vllm/vllm-openai:v0.33.0",
                  "args": [LLAMA, "--max-model-len", "8192", "--max-num-seqs", "8"],
                  "ports": [{"containerPort": 8000}], "resources": {"limits": {"nvidia.com/gpu": "1"}}}
        pod_spec = {"tolerations": [GPU_TOLERATION], "containers": [engine]}
        apps.create_namespaced_deployment(NS, deployment_of("llama", 1, pod_spec, {"kubesim.io/time-scale": "1"}))
        core.create_namespaced_service(NS, service_of("llama", [{"port": 8000}]))
        core.create_namespaced_pod(NS, {"metadata": {"name": "tiny"}, "spec": {"containers": [{
            "name": "app", "image": "busybox:1.36",
            "resources": {"limits": {"cpu": "1m", "memory": "10Mi"}}}]}})

        def ready():
            pods = core.list_pod_for_all_namespaces().items
            return len(pods) == 3 and all(
                any(c.type == "Ready" and c.status == "True" for c in (p.status.conditions or [])) for p in pods)

        wait_for(ready, timeout=120, message="engine, tiny and dcgm-exporter pods Ready")
        yield handle


def _milli(cpu: str) -> int:
    return int(cpu.removesuffix("m"))


def _mib(memory: str) -> int:
    return int(memory.removesuffix("Mi"))


def test_kubectl_top_nodes_and_pods(cluster):
    rows = {line.split()[0]: line.split() for line in cluster.kubectl("top", "nodes").stdout.splitlines()[1:]}
    # system daemons 120m/900Mi + idle engine 250m/6144Mi + exporter 1m/12Mi, each pod's figures within ±5 %
    _name, cpu, _cpu_pct, memory, _mem_pct = rows[NODE]
    assert 120 + 237 <= _milli(cpu) <= 120 + 263 + 2
    assert 900 + 5836 + 11 <= _mib(memory) <= 900 + 6452 + 13
    # the CPU node runs only `tiny`, held to 1m and 10Mi: 120m (+1m rounded up) and 910Mi
    assert rows["cpu-0"][1] in ("120m", "121m") and rows["cpu-0"][3] == "910Mi"
    pods = {line.split()[0]: line.split() for line in
            cluster.kubectl("top", "pods", "-n", NS).stdout.splitlines()[1:]}
    engine = next(v for k, v in pods.items() if k.startswith("llama-"))
    assert 237 <= _milli(engine[1]) <= 263
    assert 5836 <= _mib(engine[2]) <= 6452
    assert pods["tiny"][1] in ("0m", "1m") and pods["tiny"][2] == "10Mi"  # held to its limits


def test_official_client_reads_node_and_pod_metrics(cluster):
    custom = cluster.custom
    nodes = custom.list_cluster_custom_object("metrics.k8s.io", "v1beta1", "nodes")
    assert nodes["kind"] == "NodeMetricsList"
    assert {item["metadata"]["name"] for item in nodes["items"]} == {NODE, "cpu-0"}
    tiny = custom.get_namespaced_custom_object("metrics.k8s.io", "v1beta1", NS, "pods", "tiny")
    assert tiny["kind"] == "PodMetrics"
    assert tiny["containers"] == [{"name": "app", "usage": {"cpu": tiny["containers"][0]["usage"]["cpu"],
                                                             "memory": "10240Ki"}}]
    assert int(tiny["containers"][0]["usage"]["cpu"].removesuffix("n")) <= 1_000_000


def _scrape(cluster, via_service: bool = False) -> str:
    if via_service:
        path = "/api/v1/namespaces/gpu-operator/services/nvidia-dcgm-exporter:9400/proxy/metrics"
    else:
        path = f"/api/v1/namespaces/gpu-operator/pods/nvidia-dcgm-exporter-{NODE}:9400/proxy/metrics"
    with urllib.request.urlopen(cluster.url + path, timeout=10) as response:
        return response.read().decode()


def _samples(text: str, name: str) -> dict[str, tuple[dict, float]]:
    out = {}
    for match in re.finditer(rf"^{name}\{{(.*)\}} (\S+)$", text, re.M):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1)))
        out[labels["gpu"]] = (labels, float(match.group(2)))
    return out


def test_dcgm_exporter_reports_each_gpu_and_who_holds_it(cluster):
    text = _scrape(cluster)
    assert "# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB)." in text
    used, free = _samples(text, "DCGM_FI_DEV_FB_USED"), _samples(text, "DCGM_FI_DEV_FB_FREE")
    assert sorted(used) == ["0", "1", "2", "3"]
    engine_pod = cluster.core.list_namespaced_pod(NS, label_selector="app=llama").items[0].metadata.name
    labels, value = used["0"]  # the engine got the first GPU: vLLM holds 0.92 of 81559 MiB
    assert value == 75034 and free["0"][1] == H100_MIB - 75034
    assert (labels["pod"], labels["namespace"], labels["container"]) == (engine_pod, NS, "engine")
    assert labels["modelName"] == "NVIDIA H100 80GB HBM3" and labels["Hostname"] == NODE
    assert labels["device"] == "nvidia0" and labels["UUID"].startswith("GPU-")
    for gpu in ("1", "2", "3"):
        assert used[gpu][1] == 0 and free[gpu][1] == H100_MIB and "pod" not in used[gpu][0]
    assert _samples(text, "DCGM_FI_DEV_GPU_UTIL")["0"][1] == 0
    assert _samples(_scrape(cluster, via_service=True), "DCGM_FI_DEV_FB_USED")["0"][1] == 75034


def test_gpu_utilization_rises_while_requests_run(cluster):
    url = f"{cluster.url}/api/v1/namespaces/{NS}/services/llama:8000/proxy/v1/completions"
    body = json.dumps({"model": LLAMA, "prompt": "Tell me a long story", "max_tokens": 400,
                       "ignore_eos": True}).encode()

    def send():
        request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as response:
            response.read()

    threads = [threading.Thread(target=send) for _ in range(4)]
    for thread in threads:
        thread.start()
    try:
        # 4 of 8 sequences running: 60 % + 40 % x 4/8 = 80 %
        wait_for(lambda: _samples(_scrape(cluster), "DCGM_FI_DEV_GPU_UTIL")["0"][1] == 80, timeout=60,
                 message="GPU utilization of the busy engine")
    finally:
        for thread in threads:
            thread.join(120)


def test_the_exporters_in_process_probe_answers_what_its_http_health_answers():
    """The kubelet asks the exporter's `/health` in-process (one exporter per GPU node, probed every
    period); the answer must be the one the HTTP endpoint gives, and other paths still go over HTTP."""
    import asyncio

    from kubesim.cluster.dcgm import DcgmExporter
    from kubesim.workload import PodContext

    async def check():
        ctx = PodContext(namespace="gpu-operator", pod_name="nvidia-dcgm-exporter-n0", labels={}, annotations={},
                         container={}, env={}, gpu_key=None, gpu_count=0, seed=1, fast_start=True)
        exporter = DcgmExporter(ctx, node_of=lambda ns, pod: None, readings=lambda node: [])
        port = await exporter.start()
        try:
            def get(path):
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
                        return response.status
                except urllib.error.HTTPError as error:
                    return error.code

            over_http = await asyncio.to_thread(get, "/health")
            missing_over_http = await asyncio.to_thread(get, "/nothing-here")
        finally:
            await exporter.stop()
        return over_http, missing_over_http, exporter.probe("GET", "/health"), exporter.probe("GET", "/metrics")

    over_http, missing_over_http, in_process, other = asyncio.run(check())
    assert (over_http, in_process) == (200, 200)
    assert missing_over_http == 404
    assert other is None  # not answered in-process: the kubelet would ask over HTTP
