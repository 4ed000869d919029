"""workers.engineadapters against kubesim's simulated vLLM, over the real Kubernetes client and the pod proxy:
the sync loads what is desired and missing, unloads what is held and not desired, changes nothing the second
time, and keeps the engine's message for what it refuses (the same sync against the real engine:
tests/kubesim/test_real_adapters.py)."""

from __future__ import annotations

import pytest

from tests.kubesim.cluster_support import GPU_TOLERATION, deployment_of
from tests.polling import wait_for
from workers.engineadapters import AdapterCallFailed, engine_message, held_adapters, sync_adapters
from workers.enginepods import EnginePod

NAMESPACE = "default"
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


def _engine(handle, name: str, *args: str, runtime: bool = True) -> EnginePod:
    container = {
        "name": "engine", "image": "vllm/vllm-openai:v0.32.0", "command": ["vllm", "serve"],
        "args": [LLAMA, "--port", "8000", *args], "ports": [{"containerPort": 8000, "name": "http"}],
        "resources": {"limits": {"nvidia.com/gpu": "1"}},
        "env": [{"name": "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "value": "True"}] if runtime else [],
    }
    handle.apps.create_namespaced_deployment(
        NAMESPACE, deployment_of(name, 1, {"containers": [container], "tolerations": [GPU_TOLERATION]}))

    def ready():
        for pod in handle.core.list_namespaced_pod(NAMESPACE, label_selector=f"app={name}").items:
            if any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or []):
                return pod.metadata.name
        return None

    return EnginePod(0, NAMESPACE, wait_for(ready, timeout=60, message=name), "engine", "", 8000, True)


def test_the_sync_makes_the_engine_hold_exactly_the_desired_adapters(make_cluster):
    handle = make_cluster(nodes="h100-sxm-80gb:1x2")
    pod = _engine(handle, "lora", "--enable-lora", "--max-loras", "2")
    core = handle.core
    assert held_adapters(core, pod, 10) == []
    first = sync_adapters(core, pod, "vllm", {"sql": "/models/adapters/sql", "chat": "/models/adapters/chat"})
    assert (first.loaded, first.unloaded, first.refused, first.held) == (["chat", "sql"], [], {}, ["chat", "sql"])
    again = sync_adapters(core, pod, "vllm", {"sql": "/models/adapters/sql", "chat": "/models/adapters/chat"})
    assert (again.loaded, again.unloaded, again.refused, again.held) == ([], [], {}, ["chat", "sql"])
    fewer = sync_adapters(core, pod, "vllm", {"sql": "/models/adapters/sql"})
    assert (fewer.loaded, fewer.unloaded, fewer.held) == ([], ["chat"], ["sql"])

    # An engine started without --enable-lora has no runtime LoRA routes: the load is refused with its answer.
    plain = _engine(handle, "plain", runtime=False)
    refused = sync_adapters(core, plain, "vllm", {"sql": "/models/adapters/sql"})
    assert (refused.loaded, list(refused.refused), refused.held) == ([], ["sql"], [])
    assert "Not Found" in refused.refused["sql"]


def test_a_pod_the_proxy_cannot_reach_fails_the_pods_sync_with_its_name(make_cluster):
    handle = make_cluster(nodes="h100-sxm-80gb:1x1")
    gone = EnginePod(0, NAMESPACE, "lora-deleted", "engine", "", 8000, True)  # no such pod: the API server's 404
    with pytest.raises(AdapterCallFailed, match="lora-deleted: /v1/models answered 404"):
        sync_adapters(handle.core, gone, "vllm", {"sql": "/x"})


@pytest.mark.parametrize("text,message", [
    ('{"error": {"message": "No adapter found for /x", "type": "BadRequestError", "code": 400}}',
     "No adapter found for /x"),  # vLLM
    ('{"object": "error", "message": "LoRA is not enabled. Please set --enable-lora.", "code": 400}',
     "LoRA is not enabled. Please set --enable-lora."),  # SGLang's error
    ('{"success": false, "error_message": "rank 64 > max_lora_rank 16"}', "rank 64 > max_lora_rank 16"),  # SGLang
    ('{"detail": "Not Found"}', "Not Found"),  # FastAPI's 404
    ("upstream connect error", "upstream connect error"),
])
def test_the_engines_message_is_read_from_each_engines_error_shape(text, message):
    assert engine_message(text) == message
