"""The gateway in front of the real vLLM (the session's engine on a kubesim cpu-real node, reached at its pod IP):
the official client streamed and not, include_usage added and hidden, vLLM's own 400 passed through, a client
that goes away aborting the engine's request, and metering equal to the engine's own counters."""

from __future__ import annotations

import http.client
import json
import urllib.request

import openai
import pytest
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from apps.gateway.models import Upstream, UsageRow
from apps.gateway.snapshot import write_snapshot
from tests.factories import InferenceServiceFactory, ModelFactory
from tests.gateway.conftest import client, issue
from tests.polling import wait_for
from tests.realengine import MODEL, NAMESPACE, PORT

PROMPT = "kubesim speaks the Kubernetes API"
CHOICES = 16  # sequences in the request whose client goes away (n)
# Samples read from the engine: the token counters, requests running and waiting, and requests finished by reason.
READ = ("vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:num_requests_running",
        "vllm:num_requests_waiting", "vllm:request_success_total")


@pytest.fixture
def served(real_engine, transactional_db, tenant_a, tmp_path):
    """A service whose upstream is the real engine's pod (as the telemetry cycle records one), a key, a snapshot."""
    pod = real_engine.cluster.core.read_namespaced_pod(real_engine.pod, NAMESPACE)
    service = InferenceServiceFactory(tenant=tenant_a, name="real", model=ModelFactory(tenant=tenant_a, name=MODEL))
    address = f"{pod.status.pod_ip}:{PORT}"
    Upstream.objects.create(service=service, ready_engines=1, seen_at=timezone.now(),
                            endpoints=[{"pod": real_engine.pod, "address": address}])
    _, key = issue(tenant_a, "app")
    path = tmp_path / "snapshot.json"
    write_snapshot(path)
    return {"key": key, "snapshot": path, "address": address}


def engine(served) -> dict[str, float]:
    """The engine's own samples, read at its address; request_success by finished_reason."""
    with urllib.request.urlopen(f"http://{served['address']}/metrics", timeout=10) as response:
        text = response.read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name in READ:
                name = s.name + (f":{s.labels['finished_reason']}" if "finished_reason" in s.labels else "")
                out[name] = out.get(name, 0) + s.value
    return out


def rows(count: int) -> list[UsageRow]:
    wait_for(lambda: UsageRow.objects.count() >= count, message=f"{count} usage rows")
    return list(UsageRow.objects.order_by("at"))


def test_streamed_and_not_with_usage_added_and_hidden_metered_as_the_engine_counts(gateway, served):
    before = engine(served)
    api = client(gateway, served["key"])
    fixed = {"ignore_eos": True}  # random weights may end early; the counts are then fixed
    answer = api.chat.completions.create(model="real", messages=[{"role": "user", "content": PROMPT}],
                                         max_tokens=12, extra_body=fixed)
    assert answer.usage.completion_tokens == 12 and answer.system_fingerprint.startswith("vllm-")
    chunks = list(api.chat.completions.create(model="real", stream=True, max_tokens=7, extra_body=fixed,
                                              messages=[{"role": "user", "content": PROMPT}]))
    assert all(c.usage is None for c in chunks)  # the gateway asked vLLM for usage and hid it
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    asked = list(api.completions.create(model="real", prompt=PROMPT, max_tokens=5, stream=True, extra_body=fixed,
                                        stream_options={"include_usage": True}))
    assert asked[-1].choices == [] and asked[-1].usage.completion_tokens == 5
    metered = rows(3)
    assert [(r.status, r.streamed, r.completion_tokens) for r in metered] == [(200, False, 12), (200, True, 7),
                                                                             (200, True, 5)]
    after = engine(served)
    # Drift 0: what the gateway metered is what the engine counted.
    for field, family in (("prompt_tokens", "vllm:prompt_tokens_total"),
                          ("completion_tokens", "vllm:generation_tokens_total")):
        assert sum(getattr(r, field) for r in metered) == after[family] - before[family], field


def test_vllms_own_400_is_passed_through(gateway, served):
    with pytest.raises(openai.BadRequestError) as caught:
        client(gateway, served["key"]).completions.create(model="real", prompt=PROMPT, max_tokens=10_000_000)
    # vLLM's own words, with its --max-model-len (the simulated vLLM says the same: test_forwarding.py)
    assert "max_tokens=10000000 cannot be greater than max_model_len=512" in str(caught.value)
    (row,) = rows(1)
    assert row.status == 400


def _stream_and_go_away(gateway: str, served: dict) -> None:
    """Start a long streamed completion through the gateway, read its first event, and close the connection."""
    host, port = gateway.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    body = {"model": "real", "prompt": PROMPT, "max_tokens": 480, "n": CHOICES, "ignore_eos": True, "stream": True}
    conn.request("POST", "/v1/completions", json.dumps(body),
                 {"authorization": f"Bearer {served['key']}", "content-type": "application/json"})
    response = conn.getresponse()
    assert response.status == 200 and response.readline().startswith(b"data: ")
    conn.sock.close()
    conn.close()


def test_a_client_that_goes_away_aborts_the_real_engines_request(gateway, served):
    # The tiny model generates one sequence's 480 tokens in about a second, so on a loaded machine one sequence
    # could end before the client's going away reached the engine (seen with four test workers on 2 cores). Sixteen
    # of them need 256 KV blocks where the engine has 24, so they take turns (preempted and recomputed): eight took
    # 4.8 s on a quiet machine, one 1.3 s. An attempt that still ends proves nothing either way and is made again;
    # a gateway that never aborts fails all six.
    for attempt in range(1, 7):
        before = engine(served)
        _stream_and_go_away(gateway, served)
        wait_for(lambda: (now := engine(served))["vllm:num_requests_running"] + now["vllm:num_requests_waiting"] == 0,
                 timeout=60, message="nothing running or waiting")
        row = rows(attempt)[-1]
        after = engine(served)
        if after["vllm:request_success_total:length"] == before["vllm:request_success_total:length"]:
            break
    else:
        pytest.fail("the engine ran every one of six requests to its end after the client went away")
    # Aborted, not run to its end: the engine generated fewer tokens than asked (and counted no success), and the
    # gateway metered the request as streamed to a client that went away.
    assert row.disconnected and row.streamed
    assert after["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"] < 480 * CHOICES
