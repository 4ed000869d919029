"""kubesim's cpu-real nodes run the real vLLM for vLLM pods: Ready from /health, the OpenAI API and /metrics
through the pod proxy, logs in `kubectl logs`, and what the CPU build cannot honour refused at admission."""

from __future__ import annotations

import json

import pytest

from enginevocab.cpubuild import GPU_ONLY, ONE_ONLY
from kubesim.cluster.nodes import REAL_ENGINE_MEMORY_MIB
from tests.polling import wait_for
from tests.realengine import MODEL, NAMESPACE, engine_deployment, pods_of


def test_the_real_engine_serves_the_pods_model_through_the_pod_proxy(real_engine):
    served = [m["id"] for m in json.loads(real_engine.get("/v1/models"))["data"]]
    assert served == [MODEL]
    status, body = real_engine.post("/v1/completions", {"model": MODEL, "prompt": "kubesim", "max_tokens": 4})
    assert status == 200
    assert body["usage"]["completion_tokens"] == 4
    assert body["system_fingerprint"].startswith("vllm-0.32.0")  # the real server answered, not the simulation
    assert "vllm:num_requests_running" in real_engine.get("/metrics")


def test_the_engines_own_output_is_its_containers_log(real_engine):
    logs = real_engine.cluster.kubectl("logs", real_engine.pod, "-n", NAMESPACE).stdout
    # kubesim's line with the mapped arguments, then vLLM's own start-up lines.
    assert f"--model {real_engine.models}/tiny" in logs
    assert "--host 127.0.0.1" in logs
    assert "Application startup complete" in logs


@pytest.mark.parametrize(("name", "args", "memory", "reason"), [
    ("nixl", ["--kv-transfer-config", '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'], "3Gi",
     GPU_ONLY["--kv-transfer-config"]),
    ("tp", ["-tp", "2"], "3Gi", ONE_ONLY["--tensor-parallel-size"]),
    ("big", [], f"{REAL_ENGINE_MEMORY_MIB + 1}Mi", "more than one real engine may hold"),
])
def test_what_the_cpu_build_cannot_honour_is_refused_at_admission_with_the_reason(real_engine, name, args, memory,
                                                                                  reason):
    cluster = real_engine.cluster
    cluster.apps.create_namespaced_deployment(NAMESPACE, engine_deployment(name, args=args, memory=memory))
    try:
        pod = wait_for(lambda: next((p for p in pods_of(cluster, name) if p.status.phase == "Failed"), None),
                       timeout=60, message=f"pod of {name} failed")
        assert pod.status.reason == "UnexpectedAdmissionError"
        assert pod.status.message.startswith("Pod was rejected: container engine: ")
        assert reason in pod.status.message
        events = cluster.core.list_namespaced_event(NAMESPACE, field_selector=f"involvedObject.name={pod.metadata.name}")
        assert [e.reason for e in events.items if e.type == "Warning"] == ["UnexpectedAdmissionError"]
    finally:
        cluster.apps.delete_namespaced_deployment(name, NAMESPACE)
