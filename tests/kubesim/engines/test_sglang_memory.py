"""kubesim's simulated SGLang releases and resumes its GPU memory over HTTP (`--enable-memory-saver`): requests that
arrive while released wait; a resume with the weights' CPU backup takes their copy back over the host link plus the
KV cache's reallocation, the same arithmetic as vLLM's level 1 wake; without the memory saver a release is refused."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from kubesim.engines.harness import pod_context, start

SGLANG = "lmsysorg/sglang:v0.5.23"
LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"
LAUNCH = ["python3", "-m", "sglang.launch_server", "--model-path", LLAMA_8B, "--context-length", "4096",
          "--enable-metrics"]
SAVER = ["--enable-memory-saver", "--enable-weights-cpu-backup"]
SCALE = 10.0  # simulated seconds per wall second


async def _run(args, steps):
    ctx = pod_context(SGLANG, args, gpu_key="l4-24gb", annotations={"kubesim.io/time-scale": str(SCALE)})
    engine = await start(ctx)
    try:
        async with aiohttp.ClientSession(base_url=engine.base_url) as s:
            return await steps(engine, s)
    finally:
        await engine.stop()


def test_a_release_holds_requests_until_the_resume_which_takes_the_weights_copy():
    async def steps(engine, s):
        out = {}
        async with s.post("/release_memory_occupation", json={}) as r:
            out["release"] = (r.status, await r.json())
        async with s.get("/health") as r:
            out["health"] = r.status
        request = asyncio.ensure_future(s.post("/v1/completions", json={"model": LLAMA_8B, "prompt": "hi",
                                                                        "max_tokens": 2}))
        await asyncio.sleep(0.2)
        out["done_while_released"] = request.done()
        started = time.monotonic()
        async with s.post("/resume_memory_occupation", json={}) as r:
            out["resume"] = (r.status, await r.json(), (time.monotonic() - started) * SCALE)
        response = await request
        out["completion"] = response.status
        response.release()
        async with s.get("/metrics") as r:
            out["metrics"] = await r.text()
        return out

    out = asyncio.run(_run([*LAUNCH, *SAVER], steps))
    assert out["release"] == (200, None)
    assert out["health"] == 200  # the pod stays Ready and keeps its GPU
    assert out["done_while_released"] is False
    status, body, simulated = out["resume"]
    assert (status, body) == (200, None)
    # Llama-3.1-8B's 16.06 GB back over the L4's PCIe 4 x16 at 80 %: 16.06 / 25.2 = 0.637 s, + 0.5 s for the KV cache.
    assert simulated == pytest.approx(1.137, abs=0.25)
    assert out["completion"] == 200
    assert "sleep_state" not in out["metrics"]  # SGLang exposes no sleep state


def test_tags_release_and_resume_part_of_the_memory_and_bad_tags_are_refused():
    async def steps(engine, s):
        out = {}
        async with s.post("/release_memory_occupation", json={"tags": ["kv_cache", "optimizer"]}) as r:
            out["bad"] = (r.status, (await r.json())["message"])
        async with s.post("/release_memory_occupation", json={"tags": ["kv_cache"]}) as r:
            out["kv"] = r.status
        started = time.monotonic()
        async with s.post("/resume_memory_occupation", json={"tags": ["kv_cache"]}) as r:
            out["resume_kv"] = (r.status, (time.monotonic() - started) * SCALE)
        async with s.post("/v1/completions", json={"model": LLAMA_8B, "prompt": "hi", "max_tokens": 2}) as r:
            out["completion"] = r.status
        return out

    out = asyncio.run(_run([*LAUNCH, *SAVER], steps))
    assert out["bad"] == (400, "kubesim: tags must be a list of weights, kv_cache")
    assert out["kv"] == 200
    status, simulated = out["resume_kv"]
    assert status == 200 and simulated == pytest.approx(0.5, abs=0.2)  # the KV cache only: no weights to copy
    assert out["completion"] == 200


def test_without_the_memory_saver_a_release_is_refused_and_nothing_changes():
    async def steps(engine, s):
        async with s.post("/release_memory_occupation", json={}) as r:
            refused = (r.status, (await r.json())["message"])
        async with s.post("/v1/completions", json={"model": LLAMA_8B, "prompt": "hi", "max_tokens": 2}) as r:
            return refused, r.status

    refused, completion = asyncio.run(_run(LAUNCH, steps))
    assert refused == (400, "kubesim: the engine was started without --enable-memory-saver")
    assert completion == 200


def test_without_a_cpu_backup_the_weights_come_back_empty_with_a_warning():
    async def steps(engine, s):
        async with s.post("/release_memory_occupation", json={}) as r:
            assert r.status == 200
        started = time.monotonic()
        async with s.post("/resume_memory_occupation", json={}) as r:
            assert r.status == 200
        return (time.monotonic() - started) * SCALE, engine.logs()

    simulated, logs = asyncio.run(_run([*LAUNCH, "--enable-memory-saver"], steps))
    assert simulated == pytest.approx(0.5, abs=0.2)  # nothing copied back: only the KV cache's reallocation
    assert "[INFO] Release memory occupation: kv_cache, weights (no CPU backup of the weights)" in logs
    assert logs[-1] == "WARNING kubesim: weights resumed without a CPU backup: their memory is empty"
