"""The playground through the inference gateway: a prompt goes to the gateway with the inference key the user
gives (as the tenant's application would send it), the gateway sends it to a ready kubesim engine, and the
answer streams back with TTFT and tokens/s; the request is metered to that key."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from apps.gateway.models import UsageRow
from apps.serving.playground import PlaygroundError, Prompt, snippets, stream_prompt
from tests.gateway.served import serve_on_kubesim, start_gateway
from tests.polling import wait_for
from tests.ports import closed_port


@pytest.fixture
def served(make_cluster, transactional_db, tenant_a, tmp_path, settings):
    served = serve_on_kubesim(make_cluster, tenant_a, tmp_path)
    proc, base = start_gateway(served)
    settings.GATEWAY_URL = base
    yield served
    proc.terminate()
    proc.wait(timeout=30)


def test_a_chat_prompt_streams_through_the_gateway_and_is_metered_to_the_key(served):
    events = list(stream_prompt(served["service"], Prompt(kind="chat", text="Say hello.", max_tokens=24),
                                served["key"]))

    start, *texts, done = events
    assert start == {"event": "start", "via": "the inference gateway"}
    assert texts and all(e["event"] == "text" and e["text"] for e in texts)
    assert done["event"] == "done"
    assert 1 <= done["tokens"] <= 24
    assert done["ttft_s"] > 0
    if done["tokens"] > 1:
        assert done["tokens_per_s"] > 0
    # The gateway metered it to the key the user gave, with the tokens the engine reported.
    row = wait_for(lambda: UsageRow.objects.filter(key_id=served["key_id"]).first(), message="the usage row")
    assert (row.status, row.streamed, row.completion_tokens) == (200, True, done["tokens"])
    assert row.pod in {e["pod"] for e in served["endpoints"]}
    assert 0 <= row.added_ms < row.duration_ms  # the gateway's own part of the request, kept for the fleet page


def test_a_completion_prompt_streams_too(served):
    events = list(stream_prompt(served["service"], Prompt(kind="completion", text="Once upon a time", max_tokens=8),
                                served["key"]))
    assert events[-1]["event"] == "done" and "".join(e["text"] for e in events if e["event"] == "text")


def test_the_gateways_refusal_is_shown_with_its_reason(served):
    events = list(stream_prompt(served["service"], Prompt(kind="chat", text="Hi"), "sk-not-a-key"))
    assert events == [{"event": "start", "via": "the inference gateway"},
                      {"event": "error", "message": "HTTP 401: Incorrect or expired API key provided."}]


def test_a_gateway_that_does_not_answer_is_named(served, settings):
    with closed_port() as port:
        settings.GATEWAY_URL = f"http://127.0.0.1:{port}"
        events = list(stream_prompt(served["service"], Prompt(kind="chat", text="Hi"), served["key"]))
    assert len(events) == 1 and events[0]["event"] == "error"
    assert events[0]["message"].startswith(f"The inference gateway at http://127.0.0.1:{port} did not answer")


def test_the_playground_refuses_a_service_that_is_not_ready_bad_prompts_and_no_key(served):
    service, key = served["service"], served["key"]
    with pytest.raises(PlaygroundError, match="between 1 and 2048"):
        list(stream_prompt(service, Prompt(kind="chat", text="x", max_tokens=0), key))
    with pytest.raises(PlaygroundError, match="Give an inference key of this tenant"):
        list(stream_prompt(service, Prompt(kind="chat", text="x"), "  "))
    service.phase = "Deploying"
    with pytest.raises(PlaygroundError, match="needs it Ready"):
        list(stream_prompt(service, Prompt(kind="chat", text="x"), key))


def test_the_stream_endpoint_relays_events_as_json_lines(served, login, operator_a):
    url = reverse("web:playground-stream", args=["alpha", "chat"])
    response = login(operator_a).post(url, {"kind": "chat", "prompt": "Hi", "max_tokens": 8,
                                            "inference_key": served["key"]})
    assert response.status_code == 200 and response["Content-Type"] == "application/x-ndjson"
    events = [json.loads(line) for line in b"".join(response.streaming_content).splitlines()]
    assert events[0]["event"] == "start" and events[-1]["event"] == "done"
    # Without a key nothing is sent: 422 with the reason.
    refused = login(operator_a).post(url, {"kind": "chat", "prompt": "Hi", "max_tokens": 8})
    assert refused.status_code == 422 and "Give an inference key" in refused.json()["message"]


@pytest.mark.parametrize("key", ["sk-abc\r\nX-Injected: 1", "sk-abc\ndef", "sk-\tabc", "sk-\x7fabc",
                                 "sk-\u043a\u043b\u044e\u0447", "sk-\u20acuro", "sk-\u00e9t\u00e9"])
def test_a_key_a_header_cannot_carry_is_refused_at_its_field_before_anything_is_sent(
        login, operator_a, tenant_a, settings, key):
    from tests.factories import InferenceServiceFactory

    InferenceServiceFactory(tenant=tenant_a, name="chat", phase="Ready", endpoint="http://chat.tenant-alpha.svc:8000")
    with closed_port() as port:  # nothing answers there: a key that got as far as sending would say so instead
        settings.GATEWAY_URL = f"http://127.0.0.1:{port}"
        response = login(operator_a).post(reverse("web:playground-stream", args=["alpha", "chat"]),
                                          {"kind": "chat", "prompt": "Hi", "max_tokens": 8, "inference_key": key})
    assert response.status_code == 422
    body = response.json()
    assert (body["event"], body["field"]) == ("error", "inference_key")
    assert body["message"].startswith("The inference key holds ")


@pytest.fixture
def ready_service(tenant_a):
    from tests.factories import InferenceServiceFactory

    return InferenceServiceFactory(tenant=tenant_a, name="chat", endpoint="http://chat.tenant-alpha.svc:8000")


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
