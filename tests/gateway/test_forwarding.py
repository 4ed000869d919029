"""The gateway forwarding to kubesim's engines directly (`--pod-network loopback`: pod IPs the host reaches),
with upstreams learnt by the telemetry cycle and carried by the snapshot: the official openai client streamed
and not, the engine's errors, a timeout, a client that goes away, metering that agrees with the engines'
own counters, and a spread over both replicas."""

from __future__ import annotations

import http.client
import json
import urllib.request

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from apps.gateway.models import UsageRow
from apps.gateway.snapshot import write_snapshot
from tests.gateway.conftest import client, issue
from tests.gateway.served import start_gateway
from tests.polling import wait_for

PROMPT = "You are a careful assistant. Say something about the sea."


def engine_counters(endpoints) -> dict[str, float]:
    """The engines' own counters, summed over the pods, read straight from their addresses."""
    totals: dict[str, float] = {}
    for endpoint in endpoints:
        with urllib.request.urlopen(f"http://{endpoint['address']}/metrics", timeout=5) as response:
            text = response.read().decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in ("vllm:prompt_tokens_total", "vllm:generation_tokens_total",
                                   "vllm:num_requests_running"):
                    totals[sample.name] = totals.get(sample.name, 0) + sample.value
    return totals


def rows(count: int) -> list[UsageRow]:
    wait_for(lambda: UsageRow.objects.count() >= count, message=f"{count} usage rows")
    return list(UsageRow.objects.order_by("at"))


def test_the_openai_client_streamed_and_not_and_rows_agree_with_the_engines(gateway, served):
    before = engine_counters(served["endpoints"])
    api = client(gateway, served["key"])
    answer = api.chat.completions.create(model="chat", messages=[{"role": "user", "content": PROMPT}],
                                         max_tokens=12)
    assert answer.choices[0].message.content and answer.usage.completion_tokens == 12
    chunks = list(api.chat.completions.create(model=served["served_model"], stream=True,
                                              messages=[{"role": "user", "content": PROMPT}], max_tokens=7))
    # The client did not ask for usage: it sees no usage chunk and no usage field.
    assert all(c.usage is None and c.choices for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks)
    asked = list(api.completions.create(model="chat", prompt=PROMPT, max_tokens=5, stream=True,
                                        stream_options={"include_usage": True}))
    assert asked[-1].choices == [] and asked[-1].usage.completion_tokens == 5

    with urllib.request.urlopen(f"{gateway}/metrics", timeout=5) as response:
        metrics = {s.name: s.value for f in text_string_to_metric_families(response.read().decode())
                   for s in f.samples}
    assert metrics["gateway_added_latency_seconds_count"] == 3
    assert metrics["gateway_upstream_ttft_seconds_count"] == 2  # the two streams

    metered = rows(3)
    assert [(r.status, r.streamed, r.disconnected) for r in metered] == [(200, False, False), (200, True, False),
                                                                        (200, True, False)]
    assert [r.completion_tokens for r in metered] == [12, 7, 5]
    assert metered[0].prompt_tokens == answer.usage.prompt_tokens
    assert metered[2].prompt_tokens == asked[-1].usage.prompt_tokens
    assert all(r.pod in {e["pod"] for e in served["endpoints"]} for r in metered)
    assert all(r.ttft_ms is not None for r in metered[1:])
    after = engine_counters(served["endpoints"])
    assert sum(r.prompt_tokens for r in metered) == after["vllm:prompt_tokens_total"] - before[
        "vllm:prompt_tokens_total"]
    assert sum(r.completion_tokens for r in metered) == after["vllm:generation_tokens_total"] - before[
        "vllm:generation_tokens_total"]


def test_engine_errors_pass_through(gateway, served):
    with pytest.raises(openai.BadRequestError) as caught:
        client(gateway, served["key"]).completions.create(model="chat", prompt=PROMPT, max_tokens=10_000_000)
    assert "max_tokens=10000000 cannot be greater than max_model_len=" in str(caught.value)  # as vLLM 0.32 says


def test_requests_spread_over_both_replicas(gateway, served):
    api = client(gateway, served["key"])
    for _ in range(6):
        api.completions.create(model="chat", prompt=PROMPT, max_tokens=1)
    assert {r.pod for r in rows(6)} == {e["pod"] for e in served["endpoints"]}


def test_a_client_that_goes_away_before_a_non_streamed_answer_aborts_the_engines_request(gateway, served):
    host, port = gateway.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    body = {"model": "chat", "prompt": PROMPT, "max_tokens": 4000, "ignore_eos": True}
    conn.request("POST", "/v1/completions", json.dumps(body),
                 {"authorization": f"Bearer {served['key']}", "content-type": "application/json"})
    wait_for(lambda: engine_counters(served["endpoints"])["vllm:num_requests_running"] == 1,
             message="the request running on an engine")
    conn.sock.close()
    conn.close()
    wait_for(lambda: engine_counters(served["endpoints"])["vllm:num_requests_running"] == 0,
             message="the engine aborted the request")
    (row,) = rows(1)
    assert row.disconnected and not row.streamed and row.status == 499 and row.completion_tokens == 0


def test_a_client_that_goes_away_aborts_the_engines_request(gateway, served):
    host, port = gateway.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    body = {"model": "chat", "prompt": PROMPT, "max_tokens": 4000, "ignore_eos": True, "stream": True}
    conn.request("POST", "/v1/completions", json.dumps(body),
                 {"authorization": f"Bearer {served['key']}", "content-type": "application/json"})
    response = conn.getresponse()
    assert response.status == 200 and response.readline().startswith(b"data: ")
    assert engine_counters(served["endpoints"])["vllm:num_requests_running"] == 1
    conn.sock.close()
    conn.close()
    wait_for(lambda: engine_counters(served["endpoints"])["vllm:num_requests_running"] == 0,
             message="the engine aborted the request")
    (row,) = rows(1)
    assert row.disconnected and row.streamed and row.completion_tokens < 4000


def test_an_upstream_that_does_not_answer_in_time_is_504(served):
    proc, base = start_gateway(served, "--upstream-timeout", "0.5")
    try:
        with pytest.raises(openai.APIStatusError) as caught:
            client(base, served["key"]).completions.create(model="chat", prompt=PROMPT, max_tokens=4000,
                                                           extra_body={"ignore_eos": True})
        assert caught.value.status_code == 504 and caught.value.code == "timeout"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_forwarded_request_gives_back_its_concurrency_lease_when_it_ends(served, tenant_a):
    # A key allowed one request in flight: sequential requests all pass, because each forwarded request settles
    # its reservation when its answer ends (without that, the second would wait out the 600 s lease).
    import uuid

    from apps.gateway.models import InferenceKey

    _, key = issue(tenant_a, "one-at-a-time")
    InferenceKey.objects.filter(name="one-at-a-time").update(concurrency=1, tpm=100_000)
    write_snapshot(served["snapshot"])
    proc, base = start_gateway(served, "--redis-url", "redis://127.0.0.1:6379/11",
                               "--redis-prefix", f"test:{uuid.uuid4().hex}:", "--refresh-seconds", "0.2")
    try:
        api = client(base, key)
        for stream in (False, True, False):
            if stream:
                chunks = list(api.completions.create(model="chat", prompt=PROMPT, max_tokens=3, stream=True))
                assert chunks
            else:
                assert api.completions.create(model="chat", prompt=PROMPT, max_tokens=3).choices
    finally:
        proc.terminate()
        proc.wait(timeout=30)
