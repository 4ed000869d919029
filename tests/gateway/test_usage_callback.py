"""In one process: the gateway app against a small upstream that splits its events across writes. What
goes upstream (the served name, `include_usage`), what the client gets (events whole, no usage it did not
ask for), and `on_usage`, called once per forwarded request with the numbers the upstream reported."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time

import httpx

from gateway.app import Gateway
from gateway.limits import RequestLimiter
from gateway.snapshot import SnapshotFile
from tests.gateway.fake_engine import SEEN, USAGE, start_engine

KEY = "sk-test-usage-callback"


async def scenario(tmp_path):
    SEEN.clear()
    runner, port = await start_engine()
    snapshot = tmp_path / "snapshot.json"
    snapshot.write_text(json.dumps({
        "tenants": {}, "keys": {hashlib.sha256(KEY.encode()).hexdigest(): {
            "id": 1, "tenant_id": 1, "expires_at": time.time() + 3600, "services": None, "rpm": None,
            "tpm": None, "concurrency": None, "monthly_token_budget": None}},
        "services": [{"id": 5, "tenant_id": 1, "name": "chat", "served_model": "llama-8b", "adapters": [],
                      "routing_policy": "round_robin", "routed": False,
                      "endpoints": [{"pod": "chat-0", "address": f"127.0.0.1:{port}"}]}]}))
    calls = []
    gateway = Gateway(SnapshotFile(str(snapshot)), max_body_bytes=10_000, refresh_seconds=60,
                      limiter=RequestLimiter(None), on_usage=lambda key, service, usage: calls.append(
                          (key["id"], service, usage.prompt_tokens, usage.cached_tokens, usage.completion_tokens)))
    answers = []
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=gateway), base_url="http://gw") as client:
        for extra in ({}, {"stream": True}, {"stream": True, "stream_options": {"include_usage": True}}):
            answers.append(await client.post("/v1/completions", headers={"authorization": f"Bearer {KEY}"},
                                             json={"model": "chat", "prompt": "hi", **extra}))
    await gateway.upstreams.close()
    await runner.cleanup()
    return list(SEEN), answers, calls


def test_what_goes_upstream_what_the_client_sees_and_on_usage(tmp_path):
    seen, answers, calls = asyncio.run(scenario(tmp_path))
    assert [s["model"] for s in seen] == ["llama-8b"] * 3
    assert "stream_options" not in seen[0]
    assert [s["stream_options"] for s in seen[1:]] == [{"include_usage": True}] * 2
    assert [a.status_code for a in answers] == [200, 200, 200]
    assert answers[0].json()["usage"] == USAGE
    unasked, asked = answers[1].text, answers[2].text
    events = [e for e in unasked.split("\n\n") if e]
    assert '"usage"' not in unasked and events[-1] == "data: [DONE]"
    assert "".join(json.loads(e[6:])["choices"][0]["text"] for e in events[:-1]) == "a b c"
    assert json.loads([e for e in asked.split("\n\n") if e][-2][6:])["usage"] == USAGE
    assert calls == [(1, 5, 11, 4, 3)] * 3
