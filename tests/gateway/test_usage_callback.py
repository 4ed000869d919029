"""In one process: the gateway app against a small upstream that splits its events across writes. What
goes upstream (the served name, `include_usage`), what the client gets (events whole, no usage it did not
ask for), and `on_usage`, called once per forwarded request with the numbers the upstream reported."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time

import httpx
from aiohttp import web

from gateway.app import Gateway
from gateway.limits import RequestLimiter
from gateway.snapshot import SnapshotFile

KEY = "sk-test-usage-callback"
USAGE = {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14, "prompt_tokens_details": {"cached_tokens": 4}}


def event(payload: dict) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


SEEN: list[dict] = []


async def engine(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    SEEN.append(body)
    if not body.get("stream"):
        return web.json_response({"id": "c1", "object": "text_completion", "model": body["model"],
                                  "choices": [{"index": 0, "text": "a b c", "finish_reason": "length"}],
                                  "usage": USAGE})
    response = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await response.prepare(request)
    stream = b"".join(event({"id": "c1", "object": "text_completion", "choices": [{"index": 0, "text": word}],
                             "usage": None}) for word in ("a", " b", " c"))
    stream += event({"id": "c1", "object": "text_completion", "choices": [], "usage": USAGE}) + b"data: [DONE]\n\n"
    for start in range(0, len(stream), 37):  # events cut at arbitrary places, as TCP may deliver them
        await response.write(stream[start:start + 37])
    await response.write_eof()
    return response


async def scenario(tmp_path):
    SEEN.clear()
    app = web.Application()
    app.router.add_post("/v1/completions", engine)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
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
