"""The engine physics: KV pool arithmetic, queueing, replicas, prefix caching, disaggregation."""

import asyncio
import json

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from kubesim.engines.harness import pod_context, start
from tests.kubesim.cluster_support import sglang_argv
from tests.polling import until

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
VLLM = "vllm/vllm-openai:v0.33.0"
GIB = 1024**3


def scrape(text: str) -> dict[str, float]:
    """Sample name (with sorted labels for labelled ones) -> value; plain names summed over labels."""
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[s.name] = out.get(s.name, 0.0) + s.value
            if s.labels:
                key = s.name + json.dumps(s.labels, sort_keys=True)
                out[key] = s.value
    return out


def cache_info(text: str) -> dict[str, str]:
    for fam in text_string_to_metric_families(text):
        if fam.name == "vllm:cache_config_info":
            return fam.samples[0].labels
    raise AssertionError("no cache_config_info")


async def metrics_text(w) -> str:
    async with aiohttp.ClientSession() as s, s.get(w.base_url + "/metrics") as r:
        return await r.text()


def words(n: int, tag: str) -> str:
    """n one-token words (<= 6 letters each), distinct per tag."""
    return " ".join(f"{tag}{i % 997}"[:6] for i in range(n))


async def complete(session, base_url, prompt, max_tokens, **extra):
    body = {"prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True, **extra}
    async with session.post(base_url + "/v1/completions", json=body) as r:
        assert r.status == 200, await r.text()
        return await r.json()


def blocks_of(args, gpu_count=1):
    async def go():
        w = await start(pod_context(VLLM, args, gpu_count=gpu_count, annotations={"kubesim.io/time-scale": "20"}))
        try:
            return cache_info(await metrics_text(w))
        finally:
            await w.stop()

    return asyncio.run(go())


def test_kv_blocks_follow_paged_attention_arithmetic_for_bf16_fp8_and_tp2():
    # H100 80 GB = 80 GiB; utilisation 0.92; Llama-3.1-8B: 8.03e9 params, 32 layers, 8 KV heads, head dim 128.
    # vLLM budget = memory x util - weights - activations (8192 batched tokens x 4096 hidden x 32 B) - 0.5 GiB.
    memory = 80 * GIB * 0.92
    activations = 8192 * 4096 * 32
    overhead = GIB // 2
    per_token_bf16 = 2 * 32 * 8 * 128 * 2  # K and V, 32 layers, 8 KV heads, 128 dims, 2 bytes = 131072
    tp1_budget = int(memory - 8.03e9 * 2 - activations - overhead)
    tp2_budget = int(memory - 8.03e9 * 2 / 2 - activations - overhead)
    expect_bf16 = tp1_budget // (16 * per_token_bf16)
    expect_fp8 = tp1_budget // (16 * per_token_bf16 // 2)
    expect_tp2 = tp2_budget // (16 * per_token_bf16 // 2)  # each rank holds 4 of the 8 KV heads
    assert (expect_bf16, expect_fp8, expect_tp2) == (29257, 58514, 66172)

    bf16 = blocks_of([LLAMA])
    fp8 = blocks_of([LLAMA, "--kv-cache-dtype", "fp8"])
    tp2 = blocks_of([LLAMA, "-tp", "2"], gpu_count=2)
    assert int(bf16["num_gpu_blocks"]) == expect_bf16
    assert int(fp8["num_gpu_blocks"]) == expect_fp8
    assert int(tp2["num_gpu_blocks"]) == expect_tp2
    assert int(bf16["kv_cache_size_tokens"]) == expect_bf16 * 16
    assert fp8["cache_dtype"] == "fp8" and bf16["cache_dtype"] == "auto"
    # FP8 KV doubles token capacity.
    assert int(fp8["kv_cache_size_tokens"]) / int(bf16["kv_cache_size_tokens"]) == 2.0


def test_sglang_token_pool_follows_mem_fraction_static():
    async def go(extra):
        args = sglang_argv(LLAMA, "--enable-metrics", "--mem-fraction-static", "0.85", *extra)
        w = await start(pod_context("lmsysorg/sglang:latest", args, annotations={"kubesim.io/time-scale": "20"}))
        try:
            return scrape(await metrics_text(w))
        finally:
            await w.stop()

    bf16 = asyncio.run(go([]))
    fp8 = asyncio.run(go(["--kv-cache-dtype", "fp8_e4m3"]))
    # (0.85 x 80 GiB - 8.03e9 x 2 bytes) / 131072 bytes per token, page size 1.
    expect = int((0.85 * 80 * GIB - 8.03e9 * 2) // 131072)
    assert bf16["sglang:max_total_num_tokens"] == expect
    assert fp8["sglang:max_total_num_tokens"] == int((0.85 * 80 * GIB - 8.03e9 * 2) // 65536)


async def _burst(engines, n, prompt_words, out_tokens):
    """n concurrent requests spread round robin over the engines; returns the mean TTFT over all engines."""
    async with aiohttp.ClientSession() as s:
        await asyncio.gather(
            *[
                complete(s, engines[i % len(engines)].base_url, words(prompt_words, f"q{i}"), out_tokens)
                for i in range(n)
            ]
        )
    total = count = 0.0
    for w in engines:
        m = scrape(await metrics_text(w))
        total += m["vllm:time_to_first_token_seconds_sum"]
        count += m["vllm:time_to_first_token_seconds_count"]
    return total / count


def test_queueing_raises_ttft_and_a_second_replica_lowers_it():
    args = [LLAMA, "--max-model-len", "8192", "--max-num-seqs", "4"]
    fast = {"kubesim.io/time-scale": "10"}

    async def run(n_requests, n_replicas):
        engines = [await start(pod_context(VLLM, args, annotations=fast, name=f"e{i}")) for i in range(n_replicas)]
        try:
            return await _burst(engines, n_requests, 500, 40)
        finally:
            for w in engines:
                await w.stop()

    alone = asyncio.run(run(1, 1))
    queued = asyncio.run(run(24, 1))
    two = asyncio.run(run(24, 2))
    # 24 requests through 4 sequence slots wait for ~5 earlier waves of 40 decode steps each.
    assert queued > 10 * alone
    assert two < 0.7 * queued


def test_shared_prefix_with_caching_cuts_ttft_and_counts_hits():
    shared = words(2000, "s")

    async def run(extra):
        w = await start(
            pod_context(VLLM, [LLAMA, "--max-model-len", "8192", *extra], annotations={"kubesim.io/time-scale": "10"})
        )
        try:
            async with aiohttp.ClientSession() as s:
                usages = []
                for i in range(6):
                    body = await complete(s, w.base_url, shared + " " + words(50, f"u{i}"), 4)
                    usages.append(body["usage"])
            return scrape(await metrics_text(w)), usages
        finally:
            await w.stop()

    cached, usages = asyncio.run(run([]))
    uncached, _ = asyncio.run(run(["--no-enable-prefix-caching"]))
    assert all(u["prompt_tokens"] == 2050 for u in usages)
    # Requests 2..6 find the 2000 shared tokens (125 full blocks of 16) in the cache.
    assert cached["vllm:prefix_cache_hits_total"] == 5 * 2000
    assert cached["vllm:prefix_cache_queries_total"] == 6 * 2050
    assert uncached["vllm:prefix_cache_hits_total"] == 0
    assert [u.get("prompt_tokens_details", {}).get("cached_tokens", 0) for u in usages] == [0] + [2000] * 5
    # One request at a time on an idle engine: nothing queues, so TTFT is the modelled prefill alone, in
    # simulated seconds whatever the CPU load (the event loop's wake-up delay is not the model's).
    for m in (cached, uncached):
        assert m["vllm:request_queue_time_seconds_sum"] == pytest.approx(0, abs=1e-9)
        assert m["vllm:time_to_first_token_seconds_sum"] == pytest.approx(m["vllm:request_prefill_time_seconds_sum"])
    ttft = lambda m: m["vllm:time_to_first_token_seconds_sum"] / m["vllm:time_to_first_token_seconds_count"]  # noqa: E731
    assert ttft(cached) < 0.5 * ttft(uncached)


def test_preemption_by_recompute_when_blocks_run_out():
    # 40 blocks of 16 tokens; four requests that each grow to 300 tokens cannot all stay resident.
    args = [LLAMA, "--max-model-len", "512", "--num-gpu-blocks-override", "40", "--max-num-seqs", "8"]

    async def go():
        w = await start(pod_context(VLLM, args, annotations={"kubesim.io/time-scale": "20"}))
        try:
            async with aiohttp.ClientSession() as s:
                bodies = await asyncio.gather(*[complete(s, w.base_url, words(100, f"p{i}"), 200) for i in range(4)])
            return scrape(await metrics_text(w)), bodies
        finally:
            await w.stop()

    m, bodies = asyncio.run(go())
    assert all(b["usage"]["completion_tokens"] == 200 for b in bodies)
    assert m["vllm:num_preemptions_total"] >= 1
    assert m["vllm:request_success_total"] == 4


def test_long_prompts_stall_colocated_decodes_but_not_disaggregated_ones():
    fast = {"kubesim.io/time-scale": "10"}
    base = [LLAMA, "--max-model-len", "16384"]

    async def decodes_and_long_prompts(engine, long_prompt):
        async with aiohttp.ClientSession() as s:
            decodes = [asyncio.create_task(complete(s, engine.base_url, words(100, f"d{i}"), 300)) for i in range(8)]
            await until(lambda: engine.load() >= 8, message="the eight decodes in the engine")
            for i in range(4):
                await long_prompt(s, words(8000, f"L{i}"))
            await asyncio.gather(*decodes)

    async def colocated():
        w = await start(pod_context(VLLM, base, annotations=fast))
        try:
            await decodes_and_long_prompts(w, lambda s, p: complete(s, w.base_url, p, 1))
            return scrape(await metrics_text(w))
        finally:
            await w.stop()

    async def disaggregated():
        p_cfg = '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}'
        d_cfg = '{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}'
        pre = await start(pod_context(VLLM, [*base, "--kv-transfer-config", p_cfg], annotations=fast, name="p"))
        dec = await start(pod_context(VLLM, [*base, "--kv-transfer-config", d_cfg], annotations=fast, name="d"))

        async def long_prompt(s, prompt):
            first = await complete(s, pre.base_url, prompt, 1, kv_transfer_params={"do_remote_decode": True})
            await complete(s, dec.base_url, prompt, 1, kv_transfer_params=first["kv_transfer_params"])

        async def decode_only(s, prompt, n):
            return await complete(s, dec.base_url, prompt, n, kv_transfer_params={"do_remote_prefill": True})

        try:
            async with aiohttp.ClientSession() as s:
                decodes = [asyncio.create_task(decode_only(s, words(100, f"d{i}"), 300)) for i in range(8)]
                await until(lambda: dec.load() >= 8, message="the eight decodes in the decode engine")
                for i in range(4):
                    await long_prompt(s, words(8000, f"L{i}"))
                await asyncio.gather(*decodes)
            return scrape(await metrics_text(dec))
        finally:
            await pre.stop()
            await dec.stop()

    def slow_itls(m):
        fast_ones = m[
            'vllm:inter_token_latency_seconds_bucket{"engine": "0", "le": "0.1", '
            '"model_name": "meta-llama/Llama-3.1-8B-Instruct"}'
        ]
        return m["vllm:inter_token_latency_seconds_count"] - fast_ones

    co = asyncio.run(colocated())
    dis = asyncio.run(disaggregated())
    # An 8000-token prefill takes ~0.3 s on an H100; every decode sharing that step waits for it.
    assert slow_itls(co) >= 8
    assert slow_itls(dis) == 0
    assert dis["vllm:inter_token_latency_seconds_count"] == 8 * 299


def test_step_time_is_the_roofline_of_the_batch():
    from kubesim.engines import config, flags

    def core_for(args, gpu="h100-sxm-80gb", gpus=1):
        ctx = pod_context(VLLM, args, gpu_key=gpu, gpu_count=gpus)
        ns, _ = flags.parse_vllm(flags.command_line(ctx.container, ctx.env))
        from kubesim.engines.core import Clock, EngineCore

        return EngineCore(config.vllm_spec(ns, ctx).core, Clock())

    core = core_for([LLAMA, "--max-model-len", "8192"])
    # Decode of one sequence at 1000 tokens of context: weights 16.06 GB + KV 1000 x 131072 B read at
    # 70% of 3.35 TB/s, plus 2 ms of step overhead.
    expected = (8.03e9 * 2 + 1000 * 131072) / (0.7 * 3.35e12) + 0.002
    assert core.step_time([], [1000]) == pytest.approx(expected, rel=1e-9)
    # Prefill of 4000 tokens: 2 x 8.03e9 x 4000 FLOPs + attention 4 x 32 x 4096 x 4000 x 2000 at 50% of 989 TF.
    flops = 2 * 8.03e9 * 4000 + 4 * 32 * 4096 * 4000 * 2000
    assert core.step_time([(0, 4000)], []) == pytest.approx(flops / (0.5 * 989e12) + 0.002, rel=1e-9)
    # The same decode on an L4 reads the same bytes at 0.30 TB/s.
    l4 = core_for([LLAMA, "--max-model-len", "4096"], gpu="l4-24gb")
    l4_expected = (8.03e9 * 2 + 1000 * 131072) / (0.7 * 0.30e12) + 0.002
    assert l4.step_time([], [1000]) == pytest.approx(l4_expected, rel=1e-9)
    # TP 2 halves the bytes per GPU but adds the all-reduces over NVLink.
    tp2 = core_for([LLAMA, "--max-model-len", "8192", "-tp", "2"], gpus=2)
    assert 0.5 < tp2.step_time([], [1000]) / core.step_time([], [1000]) < 0.75
