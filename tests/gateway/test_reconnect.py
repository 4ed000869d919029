"""An upstream gone since the snapshot was written (a pod scaled down, a router replaced when a rollout changes
its weights) refuses the connection: the gateway has sent it nothing, so the request goes to another upstream,
or waits for the snapshot to name one, and is answered 503 only when none comes in time. Through a real gateway
process forwarding to kubesim's engines."""

from __future__ import annotations

import threading
import time
import urllib.request

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from apps.gateway.models import Upstream, UsageRow
from apps.gateway.snapshot import write_snapshot
from tests.gateway.conftest import client
from tests.gateway.served import start_gateway
from tests.polling import wait_for
from tests.ports import closed_port

PROMPT = "Say something about the sea."


def upstreams(served, endpoints) -> None:
    """What the next telemetry cycle would store, and the snapshot rewrite that follows it."""
    Upstream.objects.filter(service=served["service"]).update(endpoints=endpoints)
    write_snapshot(served["snapshot"])


def reconnects(base) -> float:
    with urllib.request.urlopen(f"{base}/metrics", timeout=5) as response:
        families = text_string_to_metric_families(response.read().decode())
    return next(f.samples[0].value for f in families if f.name == "gateway_upstream_reconnects")


def test_a_pod_gone_since_the_snapshot_costs_no_request(served):
    live = served["endpoints"]
    with closed_port() as port:
        gone = {"pod": "chat-gone", "address": f"127.0.0.1:{port}"}
        upstreams(served, [gone, *live])
        proc, base = start_gateway(served)
        try:
            api = client(base, served["key"])
            # Least outstanding, ties in turn over three upstreams: among six requests the gone pod is picked.
            for _ in range(6):
                assert api.completions.create(model="chat", prompt=PROMPT, max_tokens=3).choices
            assert reconnects(base) >= 1
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    wait_for(lambda: UsageRow.objects.count() == 6, message="six usage rows")
    assert {r.status for r in UsageRow.objects.all()} == {200}
    assert {r.pod for r in UsageRow.objects.all()} <= {e["pod"] for e in live}


def test_when_every_upstream_known_is_gone_the_request_waits_for_the_next_snapshot(served):
    live = served["endpoints"]
    with closed_port() as port:
        upstreams(served, [{"pod": "chat-router-old", "address": f"127.0.0.1:{port}"}])
        proc, base = start_gateway(served, "--refresh-seconds", "0.1")
        try:
            answered = {}

            def call():
                started = time.monotonic()
                answered["choices"] = client(base, served["key"]).completions.create(
                    model="chat", prompt=PROMPT, max_tokens=3).choices
                answered["seconds"] = time.monotonic() - started

            caller = threading.Thread(target=call)
            caller.start()
            wait_for(lambda: reconnects(base) >= 1, message="the old upstream refused")
            time.sleep(1.0)  # the request waits while the snapshot still names only the gone pod
            upstreams(served, live)  # the replacement, as the next telemetry cycle finds it
            caller.join(timeout=20)
            assert answered["choices"] and answered["seconds"] >= 1.0
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def test_with_no_upstream_coming_back_the_answer_is_503_after_the_bound(served):
    with closed_port() as port:
        upstreams(served, [{"pod": "chat-gone", "address": f"127.0.0.1:{port}"}])
        proc, base = start_gateway(served, "--upstream-reconnect-seconds", "1")
        try:
            started = time.monotonic()
            with pytest.raises(openai.APIStatusError) as caught:
                client(base, served["key"]).completions.create(model="chat", prompt=PROMPT, max_tokens=3)
            waited = time.monotonic() - started
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    assert caught.value.status_code == 503 and caught.value.code == "no_ready_replica"
    assert waited >= 1.0
