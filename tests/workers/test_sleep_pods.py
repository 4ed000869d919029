"""The worker puts engine pods to sleep through the API server's pod proxy, with the official client over HTTP
against kubesim: the simulated vLLM answers /is_sleeping true and its metrics say the weights are offloaded;
the pod stays Ready (and keeps its GPU)."""

from __future__ import annotations

import json

import pytest

from apps.serving.names import COMPONENT_LABEL, MANAGED_BY, MANAGED_BY_LABEL, SERVICE_UID_LABEL
from tests.polling import wait_for
from workers.enginepods import engine_pods, is_ready
from workers.sleep import proxy_post, sleep_pods

UID = "0c0ffee0-0000-4000-8000-000000000001"


def _pod(name: str, sleep_mode: bool) -> dict:
    args = ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "4096"]
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {MANAGED_BY_LABEL: MANAGED_BY, SERVICE_UID_LABEL: UID,
                                              COMPONENT_LABEL: "engine"}},
        "spec": {
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{
                "name": "engine", "image": "vllm/vllm-openai:v0.32.0",
                "args": args + (["--enable-sleep-mode"] if sleep_mode else []),
                "env": [{"name": "VLLM_SERVER_DEV_MODE", "value": "1"}],
                "ports": [{"name": "http", "containerPort": 8000}],
                "resources": {"limits": {"nvidia.com/gpu": "1"}},
            }],
        },
    }


def _proxy_json(core, name: str, path: str) -> dict:
    return json.loads(core.connect_get_namespaced_pod_proxy_with_path(f"{name}:8000", "default", path,
                                                                      _preload_content=False).data)


def _state(core, name: str) -> dict[str, float]:
    text = core.connect_get_namespaced_pod_proxy_with_path(f"{name}:8000", "default", "metrics",
                                                          _preload_content=False).data.decode()
    return {line.split('sleep_state="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines() if line.startswith("vllm:engine_sleep_state{")}


def test_the_worker_puts_the_pool_s_pods_to_sleep_through_the_pod_proxy(make_cluster):
    cluster = make_cluster(nodes="l4-24gb:2x1")
    core = cluster.core
    core.create_namespaced_pod("default", _pod("sleepy", sleep_mode=True))
    core.create_namespaced_pod("default", _pod("no-flag", sleep_mode=False))

    def listed():
        items = core.list_namespaced_pod("default", _preload_content=False).data
        pods = json.loads(items)["items"]
        return pods if len(pods) == 2 and all(is_ready(p) for p in pods) else None

    pods = engine_pods(wait_for(listed, timeout=60, message="engine pods ready"), {UID: 7})
    assert sorted(p.name for p in pods) == ["no-flag", "sleepy"]
    assert _proxy_json(core, "sleepy", "is_sleeping") == {"is_sleeping": False}

    result = sleep_pods(core, pods, level=1)
    assert result["sleepy"] == "sleeping"
    assert result["no-flag"].startswith("sleep failed:")
    assert "--enable-sleep-mode" in result["no-flag"]
    assert _proxy_json(core, "sleepy", "is_sleeping") == {"is_sleeping": True}
    assert _state(core, "sleepy") == {"awake": 0.0, "weights_offloaded": 1.0, "discard_all": 0.0}
    assert _proxy_json(core, "no-flag", "is_sleeping") == {"is_sleeping": False}
    pod = core.read_namespaced_pod("sleepy", "default").to_dict()
    assert any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"]["conditions"])


def _sglang_pod(name: str, saver: bool) -> dict:
    pod = _pod(name, sleep_mode=False)
    pod["spec"]["containers"][0] |= {
        "image": "lmsysorg/sglang:v0.5.23", "command": ["python3", "-m", "sglang.launch_server"], "env": [],
        "args": ["--model-path", "meta-llama/Llama-3.1-8B-Instruct", "--context-length", "4096", "--port", "8000",
                 *(["--enable-memory-saver", "--enable-weights-cpu-backup"] if saver else [])]}
    return pod


def test_the_worker_releases_sglang_pods_memory_through_the_pod_proxy(make_cluster):
    cluster = make_cluster(nodes="l4-24gb:2x1")
    core = cluster.core
    core.create_namespaced_pod("default", _sglang_pod("saver", saver=True))
    core.create_namespaced_pod("default", _sglang_pod("no-saver", saver=False))

    def listed():
        pods = json.loads(core.list_namespaced_pod("default", _preload_content=False).data)["items"]
        return pods if len(pods) == 2 and all(is_ready(p) for p in pods) else None

    pods = engine_pods(wait_for(listed, timeout=60, message="engine pods ready"), {UID: 7})
    result = sleep_pods(core, pods, level=1, engine="sglang")
    assert result["saver"] == "sleeping"
    assert result["no-saver"].startswith("sleep failed:") and "--enable-memory-saver" in result["no-saver"]
    # Released: the engine holds a request until it is resumed (a short timeout shows it waiting), then serves it.
    saver = next(p for p in pods if p.name == "saver")
    prompt = {"model": "meta-llama/Llama-3.1-8B-Instruct", "prompt": "hi", "max_tokens": 2}
    with pytest.raises(Exception, match="timed out"):
        proxy_post(core, saver, "/v1/completions", [], timeout=1.5, body=prompt)
    assert proxy_post(core, saver, "/resume_memory_occupation", [], body={}) == b"null"
    assert json.loads(proxy_post(core, saver, "/v1/completions", [], timeout=10, body=prompt))["choices"]
    pod = core.read_namespaced_pod("saver", "default").to_dict()
    assert any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"]["conditions"])
