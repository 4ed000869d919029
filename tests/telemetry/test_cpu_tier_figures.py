"""The CPU tier's figures (hit rate, fill, load rate) from two scrapes of kubesim's simulated engines."""

import asyncio

import aiohttp
from pytest import approx

from apps.telemetry.exposition import parse_snapshot
from apps.telemetry.figures import figures
from kubesim.engines.harness import pod_context, start
from tests.kubesim.cluster_support import sglang_argv
from tests.kubesim.engines.test_physics import words

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


async def _scrapes(ctx):
    """Two scrapes of the engine: before and after prompts a, b, c and a again (2000 tokens each, 4 out)."""
    w = await start(ctx)
    try:
        async with aiohttp.ClientSession() as s:
            async def scrape():
                async with s.get(w.base_url + "/metrics") as r:
                    return parse_snapshot(await r.text())

            before = await scrape()
            for tag in "abca":
                body = {"model": w.spec.served_names[0], "prompt": words(2000, tag), "max_tokens": 4, "ignore_eos": True}
                async with s.post(w.base_url + "/v1/completions", json=body) as r:
                    assert r.status == 200
            await asyncio.sleep(0.05)
            return before, await scrape()
    finally:
        await w.stop()


def _run(image, args):
    ctx = pod_context(image, args, gpu_key="l4-24gb", annotations={"kubesim.io/time-scale": "20"})
    return figures(*asyncio.run(_scrapes(ctx)))


def test_vllm_cpu_tier_figures():
    f = _run("vllm/vllm-openai:v0.33.0",
             [LLAMA, "--max-model-len", "4096", "--num-gpu-blocks-override", "300", "--kv-offloading-size", "1"])
    # The tier holds a, b and c once (375 blocks of 2 MiB) of its 1 GiB: 786,432,000 / 1,073,741,824.
    assert f.cpu_usage == 375 * 2 * 1024**2 / 1024**3
    # The second a finds 124 of its 125 blocks (1984 of the 8000 prompt tokens) in one tier or the other.
    assert f.prefix_cache_hit_rate + f.cpu_hit_rate == approx(1984 / 8000)
    assert f.cpu_hit_rate > 0 and f.cpu_load_tokens_per_s == approx(f.cpu_hit_rate * 8000 / f.interval_s)
    plain = _run("vllm/vllm-openai:v0.33.0", [LLAMA, "--max-model-len", "4096", "--num-gpu-blocks-override", "300"])
    assert (plain.cpu_hit_rate, plain.cpu_usage, plain.cpu_load_tokens_per_s) == (None, None, None)


def test_sglang_hicache_figures():
    base = sglang_argv(LLAMA, "--enable-metrics", "--max-total-tokens", "4800")
    f = _run("lmsysorg/sglang:v0.5.23", [*base, "--enable-hierarchical-cache", "--hicache-size", "1"])
    # 6000 tokens written of the host pool's 7616 (476 blocks of 16 in 10^9 bytes at 131,072 a token).
    assert f.cpu_usage == 6000 / 7616
    # SGLang's hit rate counts device and host hits; the host's share is the CPU tier's.
    assert f.prefix_cache_hit_rate == 1984 / 8000 and 0 < f.cpu_hit_rate < f.prefix_cache_hit_rate
    assert f.cpu_load_tokens_per_s == approx(f.cpu_hit_rate * 8000 / f.interval_s)
    plain = _run("lmsysorg/sglang:v0.5.23", base)
    assert (plain.cpu_hit_rate, plain.cpu_usage, plain.cpu_load_tokens_per_s) == (None, None, None)
