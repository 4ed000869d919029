"""Adapters made by `python -m kubesim tiny-adapter` load into the running real vLLM (its /v1/load_lora_adapter,
allowed by the pod's VLLM_ALLOW_RUNTIME_LORA_UPDATING) and answer, with no restart of the pod, and unload."""

from __future__ import annotations

import json

from tests.realengine import ADAPTERS, MODEL, NAMESPACE, PORT
from workers.engineadapters import sync_adapters
from workers.enginepods import EnginePod


def test_an_adapter_loads_answers_and_unloads_on_the_running_engine_without_a_restart(real_engine):
    name = ADAPTERS[0]
    path = str(real_engine.models / "adapters" / name)
    restarts = real_engine.cluster.core.read_namespaced_pod(real_engine.pod, NAMESPACE).status.container_statuses[0]
    status, _ = real_engine.post("/v1/completions", {"model": name, "prompt": "kubesim", "max_tokens": 2})
    assert status == 404  # not loaded yet: vLLM does not know the name
    status, body = real_engine.post("/v1/load_lora_adapter", {"lora_name": name, "lora_path": path})
    assert status == 200, body
    try:
        served = [m["id"] for m in json.loads(real_engine.get("/v1/models"))["data"]]
        assert served == [MODEL, name]
        status, body = real_engine.post("/v1/completions", {"model": name, "prompt": "kubesim", "max_tokens": 3,
                                                            "ignore_eos": True})
        assert status == 200 and body["model"] == name and body["usage"]["completion_tokens"] == 3
        assert 'max_lora="1"' in real_engine.get("/metrics")  # vllm:lora_requests_info, the engine's slots
    finally:
        status, body = real_engine.post("/v1/unload_lora_adapter", {"lora_name": name})
    assert status == 200, body
    assert [m["id"] for m in json.loads(real_engine.get("/v1/models"))["data"]] == [MODEL]
    after = real_engine.cluster.core.read_namespaced_pod(real_engine.pod, NAMESPACE).status.container_statuses[0]
    assert (after.restart_count, after.container_id) == (restarts.restart_count, restarts.container_id)


def test_the_adapter_sync_loads_and_unloads_through_the_pod_proxy_and_a_second_run_changes_nothing(real_engine):
    """workers.engineadapters against the real engine, over the real Kubernetes client and kubesim's pod proxy."""
    core = real_engine.cluster.core
    pod = EnginePod(0, NAMESPACE, real_engine.pod, "engine", "", PORT, True)
    paths = {name: str(real_engine.models / "adapters" / name) for name in ADAPTERS}
    sql, chat = ADAPTERS
    before = core.read_namespaced_pod(real_engine.pod, NAMESPACE).status.container_statuses[0]
    try:
        first = sync_adapters(core, pod, "vllm", paths)
        assert (first.loaded, first.unloaded, first.refused, first.held) == ([chat, sql], [], {}, [chat, sql])
        again = sync_adapters(core, pod, "vllm", paths)
        assert (again.loaded, again.unloaded, again.refused, again.held) == ([], [], {}, [chat, sql])
        status, body = real_engine.post("/v1/completions", {"model": chat, "prompt": "kubesim", "max_tokens": 2,
                                                            "ignore_eos": True})
        assert status == 200 and body["model"] == chat and body["usage"]["completion_tokens"] == 2
        fewer = sync_adapters(core, pod, "vllm", {sql: paths[sql]})
        assert (fewer.loaded, fewer.unloaded, fewer.refused, fewer.held) == ([], [chat], {}, [sql])
        bad = sync_adapters(core, pod, "vllm", {sql: paths[sql], "tiny-missing": "/nonexistent/tiny-missing"})
        assert (bad.loaded, bad.unloaded, list(bad.refused), bad.held) == ([], [], ["tiny-missing"], [sql])
        assert "/nonexistent/tiny-missing" in bad.refused["tiny-missing"]  # the engine's own message
    finally:
        assert sync_adapters(core, pod, "vllm", {}).held == []
    after = core.read_namespaced_pod(real_engine.pod, NAMESPACE).status.container_statuses[0]
    assert (after.restart_count, after.container_id) == (before.restart_count, before.container_id)
