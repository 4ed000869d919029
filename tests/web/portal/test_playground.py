"""The playground against a simulated cluster: a prompt goes through the API server's proxy to a ready
engine pod and its answer streams back with TTFT, tokens/s and the pod that served it."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from apps.serving.models import ServiceObservation
from apps.serving.playground import PlaygroundError, Prompt, snippets, stream_prompt


@pytest.fixture
def ready_service(deploy, tenant_a):
    return deploy(tenant_a, "chat", pools=[{"role": "engine", "replicas": 2, "gpu_type": "h100-sxm-80gb"}])


def test_a_chat_prompt_streams_from_a_ready_pod(ready_service):
    events = list(stream_prompt(ready_service, Prompt(kind="chat", text="Say hello.", max_tokens=24)))

    start, *texts, done = events
    ready_pods = {p["name"] for p in ServiceObservation.objects.get(service=ready_service).pods if p["ready"]}
    assert start["event"] == "start" and start["pod"] in ready_pods and start["via"] == "pod proxy"
    assert texts and all(e["event"] == "text" and e["text"] for e in texts)
    assert done["event"] == "done"
    assert 1 <= done["tokens"] <= 24
    assert done["ttft_s"] > 0
    if done["tokens"] > 1:
        assert done["tokens_per_s"] > 0


def test_a_completion_prompt_streams_too(ready_service):
    events = list(stream_prompt(ready_service, Prompt(kind="completion", text="Once upon a time", max_tokens=8)))
    assert events[-1]["event"] == "done" and "".join(e["text"] for e in events if e["event"] == "text")


def test_the_playground_refuses_a_service_that_is_not_ready_and_bad_prompts(ready_service):
    with pytest.raises(PlaygroundError, match="between 1 and 2048"):
        list(stream_prompt(ready_service, Prompt(kind="chat", text="x", max_tokens=0)))
    ready_service.phase = "Deploying"
    with pytest.raises(PlaygroundError, match="needs it Ready"):
        list(stream_prompt(ready_service, Prompt(kind="chat", text="x")))


def test_the_stream_endpoint_relays_events_as_json_lines(ready_service, login, operator_a):
    response = login(operator_a).post(reverse("web:playground-stream", args=["alpha", "chat"]),
                                      {"kind": "chat", "prompt": "Hi", "max_tokens": 8})
    assert response.status_code == 200 and response["Content-Type"] == "application/x-ndjson"
    events = [json.loads(line) for line in b"".join(response.streaming_content).splitlines()]
    assert events[0]["event"] == "start" and events[-1]["event"] == "done"


def test_snippets_repeat_the_request_through_the_gateway_with_an_inference_key(ready_service, settings):
    # What a tenant's application would run: the gateway's address and an inference key, never the cluster's
    # endpoint or credentials; the model is named as the service is, which the gateway resolves.
    settings.GATEWAY_PUBLIC_URL = "https://inference.example.test"
    code = snippets(ready_service, Prompt(kind="chat", text="It's fine", max_tokens=16))
    assert code["curl"].startswith("curl -N https://inference.example.test/v1/chat/completions")
    assert '-H "Authorization: Bearer $INFERENCE_KEY"' in code["curl"]
    body = json.loads(code["curl"].split("-d ", 1)[1].replace("'\"'\"'", "'")[1:-1])
    assert body == {"model": "chat", "max_tokens": 16, "temperature": 0.7,
                    "messages": [{"role": "user", "content": "It's fine"}], "stream": True}
    assert "OpenAI(base_url='https://inference.example.test/v1', api_key=os.environ[\"INFERENCE_KEY\"])" in code["python"]
    assert "client.chat.completions.create(" in code["python"] and "max_tokens=16" in code["python"]
    assert ready_service.endpoint not in code["curl"] + code["python"]
