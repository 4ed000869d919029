"""kubesim's simulated vLLM sleeps and wakes over HTTP as vLLM 0.32.0's dev-mode endpoints do, and its wake
takes the weights' copy over the host link (level 1) or their reload from storage (level 2)."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from capacity.gpus import GPUS
from capacity.sleep import WakeFacts, wake_seconds, wake_words
from kubesim.engines.harness import pod_context, start

VLLM = "vllm/vllm-openai:v0.32.0"
LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"
ARGS = ["--model", LLAMA_8B, "--max-model-len", "4096", "--enable-sleep-mode"]
DEV = {"VLLM_SERVER_DEV_MODE": "1"}
SCALE = 10.0  # simulated seconds per wall second


def test_wake_arithmetic_worked_by_hand():
    # Llama-3.1-8B in bf16: 8.03e9 x 2 = 16.06e9 B on one L4 (PCIe 4 x16, 31.5e9 B/s x 0.8 = 25.2e9 B/s).
    l4 = WakeFacts.for_gpu(16.06e9, GPUS["l4-24gb"])
    assert wake_seconds(1, l4) == pytest.approx(16.06e9 / 25.2e9 + 0.5)  # 0.6373 + 0.5 = 1.1373 s
    assert wake_seconds(1, l4) == pytest.approx(1.1373, abs=1e-4)
    # Level 2 reads the shard from storage first: 16.06e9 / 2e9 = 8.03 s, then the copy and the overhead.
    assert wake_seconds(2, l4) == pytest.approx(8.03 + 0.6373 + 0.5, abs=1e-4)
    # Llama-3.1-70B on 4 x H100 SXM: 70.6e9 x 2 / 4 = 35.3e9 B per rank over PCIe 5 (63e9 x 0.8 = 50.4e9 B/s).
    h100 = WakeFacts.for_gpu(35.3e9, GPUS["h100-sxm-80gb"])
    assert wake_seconds(1, h100) == pytest.approx(0.7004 + 0.5, abs=1e-4)
    assert wake_words(1, h100) == "copy 35.3 GB at 50.4 GB/s + 0.5 s"
    with pytest.raises(ValueError, match="sleep level must be 1 or 2"):
        wake_seconds(3, h100)


async def _session_run(args, env, steps):
    ctx = pod_context(VLLM, args, gpu_key="l4-24gb", env=env, annotations={"kubesim.io/time-scale": str(SCALE)})
    engine = await start(ctx)
    try:
        async with aiohttp.ClientSession(base_url=engine.base_url) as s:
            return await steps(engine, s)
    finally:
        await engine.stop()


async def _state(s) -> dict[str, float]:
    async with s.get("/metrics") as r:
        text = await r.text()
    return {line.split('sleep_state="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines() if line.startswith("vllm:engine_sleep_state{")}


def test_level_1_sleep_holds_requests_until_the_wake_which_takes_the_weights_copy():
    async def steps(engine, s):
        out = {"before": await _state(s)}
        async with s.post("/sleep", params={"level": "1"}) as r:
            out["sleep"] = (r.status, await r.json())
        async with s.get("/is_sleeping") as r:
            out["is_sleeping"] = await r.json()
        async with s.get("/health") as r:
            out["health"] = r.status
        out["asleep"] = await _state(s)
        request = asyncio.ensure_future(s.post("/v1/completions", json={"model": LLAMA_8B, "prompt": "hi",
                                                                        "max_tokens": 2}))
        await asyncio.sleep(0.2)
        out["done_while_asleep"] = request.done()
        started = time.monotonic()
        async with s.post("/wake_up") as r:
            out["wake"] = (r.status, await r.json(), (time.monotonic() - started) * SCALE)
        response = await request
        out["completion"] = response.status
        response.release()
        out["after"] = await _state(s)
        async with s.get("/is_sleeping") as r:
            out["is_sleeping_after"] = await r.json()
        return out

    out = asyncio.run(_session_run(ARGS, DEV, steps))
    assert out["before"] == {"awake": 1.0, "weights_offloaded": 0.0, "discard_all": 0.0}
    assert out["sleep"] == (200, {"status": "sleeping", "level": 1})
    assert out["is_sleeping"] == {"is_sleeping": True}
    assert out["health"] == 200  # the pod stays Ready, and keeps its GPU
    assert out["asleep"] == {"awake": 0.0, "weights_offloaded": 1.0, "discard_all": 0.0}
    assert out["done_while_asleep"] is False
    status, body, simulated = out["wake"]
    assert (status, body) == (200, {"status": "awake", "tags": None})
    assert simulated >= 1.137  # 16.06e9 B / 25.2e9 B/s + 0.5 s, on the simulated clock
    assert out["completion"] == 200
    assert out["after"] == {"awake": 1.0, "weights_offloaded": 0.0, "discard_all": 0.0}
    assert out["is_sleeping_after"] == {"is_sleeping": False}


def test_level_2_wake_reloads_the_weights_between_the_two_tags():
    async def steps(engine, s):
        out = {}
        async with s.post("/sleep", params={"level": "2"}) as r:
            out["sleep"] = await r.json()
        out["asleep"] = await _state(s)
        async with s.post("/collective_rpc", json={"method": "reload_weights"}) as r:
            out["reload_too_early"] = r.status
        timings = []
        for call in (("/wake_up", {"tags": "weights"}, None), ("/collective_rpc", None, {"method": "reload_weights"}),
                     ("/wake_up", {"tags": "kv_cache"}, None)):
            started = time.monotonic()
            async with s.post(call[0], params=call[1], json=call[2]) as r:
                timings.append((r.status, (time.monotonic() - started) * SCALE))
                if call[0] == "/wake_up":
                    out.setdefault("status", []).append((await r.json())["status"])
        out["timings"] = timings
        out["stale"] = engine.weights_stale
        return out

    out = asyncio.run(_session_run(ARGS, DEV, steps))
    assert out["sleep"] == {"status": "sleeping", "level": 2}
    assert out["asleep"] == {"awake": 0.0, "weights_offloaded": 0.0, "discard_all": 1.0}
    assert out["reload_too_early"] == 500
    assert out["status"] == ["sleeping", "awake"]  # fully awake only once the KV cache is back
    assert [status for status, _ in out["timings"]] == [200, 200, 200]
    assert out["timings"][1][1] >= 8.03 + 0.637  # read 16.06e9 B at 2e9 B/s, copy at 25.2e9 B/s
    assert out["timings"][2][1] >= 0.5
    assert out["stale"] is False


def test_sleep_is_refused_without_the_flag_and_absent_without_dev_mode():
    async def steps(engine, s):
        async with s.post("/sleep", params={"level": "1"}) as r:
            refused = (r.status, (await r.json())["error"]["message"])
        async with s.post("/sleep", params={"level": "3"}) as r:
            bad_level = (r.status, (await r.json())["detail"][0]["loc"])
        return refused, bad_level

    refused, bad_level = asyncio.run(_session_run(ARGS[:-1], DEV, steps))
    assert refused == (400, "kubesim: the engine was started without --enable-sleep-mode")
    assert bad_level == (422, ["query", "level"])

    async def absent(engine, s):
        async with s.post("/sleep") as r:
            return r.status

    assert asyncio.run(_session_run(ARGS, {}, absent)) == 404
