"""A small OpenAI-style upstream for gateway tests: answers completions, streams its events cut at arbitrary
places (as TCP may deliver them) and reports USAGE; what it was sent is kept in SEEN. A request with
`"delay_s": x` streams one event every x seconds (a slow engine). `engine_in_thread` serves it beside a test
for a gateway process to reach."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from aiohttp import web

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
        if body.get("delay_s"):
            await asyncio.sleep(body["delay_s"])
    await response.write_eof()
    return response


async def start_engine() -> tuple[web.AppRunner, int]:
    """The upstream on a free loopback port: its runner (cleanup() stops it) and the port."""
    app = web.Application()
    app.router.add_post("/v1/completions", engine)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]


@contextmanager
def engine_in_thread() -> Iterator[int]:
    """The upstream served by a thread of its own for the block; its port."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    runner, port = asyncio.run_coroutine_threadsafe(start_engine(), loop).result(timeout=10)
    try:
        yield port
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
