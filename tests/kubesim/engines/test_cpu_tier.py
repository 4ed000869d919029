"""kubesim's second KV tier: a write-through LRU of host memory, loads at the host link's speed, and the
metric families vLLM (native offloading, LMCache) and SGLang (HiCache) export for it."""

import asyncio
import json

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from kubesim.engines import engine_spec_for
from kubesim.engines.cputier import CpuTier, TierConfig
from kubesim.engines.harness import pod_context, start
from tests.kubesim.cluster_support import sglang_argv
from tests.kubesim.engines.test_physics import scrape, words

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
VLLM = "vllm/vllm-openai:v0.33.0"
SGLANG = "lmsysorg/sglang:v0.5.23"
GIB = 1024**3
BLOCK_BYTES = 16 * 131072  # Llama-3.1-8B: 2 x 32 layers x 8 KV heads x 128 dims x 2 bytes = 131072 a token
L4_LINK = 31.5e9 * 0.8  # PCIe 4.0 x16 nominal, at the 80 % pinned copies reach


def key(name: str, **labels: str) -> str:
    """`scrape`'s key of one labelled sample of the Llama model."""
    return name + json.dumps({"model_name": LLAMA, **labels}, sort_keys=True)


def test_the_tier_is_a_write_through_lru_that_lookups_touch():
    tier = CpuTier(TierConfig(blocks=3, backend="native", block_bytes=100, ranks=1, link_bytes_per_s=1000))
    assert tier.store([1, 2, 3]) == (3, 0)
    assert tier.store([2]) == (0, 0)  # already held: refreshed, not written again
    # LRU order is now 1, 3, 2: block 4 evicts 1.
    assert tier.store([4]) == (1, 1)
    assert list(tier.lru) == [3, 2, 4]
    # A lookup from position 1 of [3, 2, 9, 4]: block 3 (GPU-resident) is touched, 2 is found, 9 stops the prefix.
    assert tier.lookup([3, 2, 9, 4], 1, 4) == 1
    assert list(tier.lru) == [4, 3, 2]
    assert tier.store([5]) == (1, 1) and list(tier.lru) == [3, 2, 5]  # 4 was least recently used
    # 7 blocks of 100 bytes at 1000 bytes/s: 0.7 s.
    assert tier.cfg.seconds(7) == 0.7
    assert (tier.stored_blocks, tier.evicted_blocks) == (5, 2)


def test_vllm_and_sglang_size_the_tier_from_their_own_flags():
    def tier_of(image, args, gpus=1):
        return engine_spec_for(pod_context(image, args, gpu_key="l4-24gb", gpu_count=gpus)).core.cpu_tier

    # vLLM: --kv-offloading-size is the total over TP ranks. 2 GiB at TP 2 is 1 GiB a rank; a rank holds 4 of the 8
    # KV heads, 65536 bytes a token, 1 MiB a block: 1024 blocks, each rank copying over its own link.
    tp2 = tier_of(VLLM, [LLAMA, "--max-model-len", "4096", "-tp", "2", "--kv-offloading-size", "2"], gpus=2)
    assert (tp2.blocks, tp2.block_bytes, tp2.ranks, tp2.backend) == (1024, 16 * 65536, 2, "native")
    assert tp2.link_bytes_per_s == L4_LINK
    assert tier_of(VLLM, [LLAMA, "--max-model-len", "4096"]) is None
    # SGLang: --hicache-size is whole GB a rank: 10^9 / 131072 = 7629 tokens, 476 whole 16-token blocks.
    hicache = tier_of(SGLANG, sglang_argv(LLAMA, "--enable-hierarchical-cache", "--hicache-size", "1"))
    assert (hicache.blocks, hicache.backend) == (476, "hicache")
    # Without a size, --hicache-ratio (2.0 by default) times the device pool: 2 x 4800 tokens = 600 blocks.
    ratio = tier_of(SGLANG, sglang_argv(LLAMA, "--max-total-tokens", "4800", "--enable-hierarchical-cache"))
    assert ratio.blocks == 600


async def _a_b_c_a(ctx):
    """Prompts a, b, c, then a again (2000 one-token words each, 4 tokens out): the families' text afterwards."""
    w = await start(ctx)
    try:
        async with aiohttp.ClientSession() as s:
            for tag in "abca":
                body = {"model": w.spec.served_names[0], "prompt": words(2000, tag), "max_tokens": 4, "ignore_eos": True}
                async with s.post(w.base_url + "/v1/completions", json=body) as r:
                    assert r.status == 200, await r.text()
            async with s.get(w.base_url + "/metrics") as r:
                return await r.text()
    finally:
        await w.stop()


def _vllm(*extra):
    # 300 GPU blocks (299 usable beside the null block) hold 4,784 tokens: a, b and c (125 blocks each) do not fit.
    args = [LLAMA, "--max-model-len", "4096", "--num-gpu-blocks-override", "300", *extra]
    ctx = pod_context(VLLM, args, gpu_key="l4-24gb", annotations={"kubesim.io/time-scale": "20"})
    return asyncio.run(_a_b_c_a(ctx))


def test_a_prefix_the_gpu_evicted_is_loaded_from_the_cpu_tier_instead_of_recomputed():
    without = scrape(_vllm())
    text = _vllm("--kv-offloading-size", "1")
    m = scrape(text)
    # The tier (1 GiB / 2 MiB = 512 blocks) holds all 375 blocks a, b and c wrote, so the second a finds its whole
    # prefix in one tier or the other: (2000 - 1) // 16 = 124 blocks, 1984 tokens (one token is always computed).
    gpu, cpu = m["vllm:prefix_cache_hits_total"], m["vllm:external_prefix_cache_hits_total"]
    assert gpu + cpu == 1984
    assert cpu > 0 and gpu == without["vllm:prefix_cache_hits_total"]  # the GPU pool behaves as without a tier
    assert without["vllm:external_prefix_cache_hits_total"] == 0
    assert m["vllm:external_prefix_cache_queries_total"] == 4 * 2000  # every prompt token is a query
    # Loads: the CPU hits' blocks at 2 MiB each over the L4's link; stores: 3 x 125 blocks written through once.
    loaded = cpu / 16 * BLOCK_BYTES
    assert m["vllm:kv_offload_load_bytes_total"] == loaded
    assert abs(m["vllm:kv_offload_load_time_total"] - loaded / L4_LINK) < 1e-9
    assert m["vllm:kv_offload_store_bytes_total"] == 375 * BLOCK_BYTES
    assert m[key("vllm:kv_offload_total_bytes_total", engine="0", transfer_type="CPU_to_GPU")] == loaded
    assert m[key("vllm:prompt_tokens_cached_by_source_total", engine="0", source="host")] == cpu
    # The same three first requests, so the TTFT sums differ by the last one. Without the tier its step computes the
    # CPU hits' tokens after the GPU's prefix: 2 x 8.03e9 FLOP a token plus attention (4 x 32 layers x 4096 x the
    # pairs attended) at half of the L4's 121 TFLOP/s. With it the step computes the last 16 tokens, which the
    # weights' read bounds (16.06 GB plus the 2000 tokens' KV at 70 % of 300 GB/s), plus the load.
    n = cpu
    flops = 2 * 8.03e9 * n + 4 * 32 * 4096 * n * (gpu + n / 2)
    weights_read = (8.03e9 * 2 + 2000 * 131072) / (0.30e12 * 0.7)
    expected = flops / (121e12 * 0.5) - weights_read - loaded / L4_LINK
    saved = without["vllm:time_to_first_token_seconds_sum"] - m["vllm:time_to_first_token_seconds_sum"]
    assert abs(saved - expected) < 0.005


def _families(text: str) -> dict[str, str]:
    return {f.name: f.type for f in text_string_to_metric_families(text)}


def test_each_backend_exports_its_engines_families_with_their_types():
    native = _families(_vllm("--kv-offloading-size", "1"))
    for name in ("vllm:kv_offload_load_bytes", "vllm:kv_offload_load_time", "vllm:kv_offload_store_bytes",
                 "vllm:kv_offload_store_time", "vllm:kv_offload_total_bytes", "vllm:kv_offload_total_time",
                 "vllm:external_prefix_cache_queries", "vllm:external_prefix_cache_hits"):
        assert native[name] == "counter", name
    assert native["vllm:kv_offload_load_size"] == native["vllm:kv_offload_size"] == "histogram"
    assert not [n for n in native if n.startswith("lmcache:")]

    text = _vllm("--kv-offloading-size", "1", "--kv-offloading-backend", "lmcache")
    lm = _families(text)
    assert not [n for n in lm if n.startswith("vllm:kv_offload")]
    assert lm["lmcache:num_hit_tokens"] == lm["lmcache:num_lookup_hits"] == "counter"
    assert lm["lmcache:local_cache_usage"] == lm["lmcache:retrieve_hit_rate"] == "gauge"
    assert lm["lmcache:time_to_retrieve"] == "histogram"
    m = scrape(text)
    labels = key("", role="worker", served_model_name=LLAMA, worker_id="0")
    # Lookups find both tiers' prefix of the last a (1984 tokens); LMCache retrieves only what vLLM lacks.
    assert m["lmcache:num_lookup_hits_total" + labels] == 1984
    assert m["lmcache:num_hit_tokens_total"] == m["vllm:external_prefix_cache_hits_total"] > 0
    assert m["lmcache:num_stored_tokens_total"] == 375 * 16
    assert m["lmcache:local_cache_usage"] == 375 * BLOCK_BYTES

    plain = _families(_vllm())
    assert not [n for n in plain if n.startswith(("vllm:kv_offload", "lmcache:"))]


def test_sglang_hicache_reports_host_hits_and_the_host_pool():
    def run(*extra):
        args = sglang_argv(LLAMA, "--enable-metrics", "--max-total-tokens", "4800", *extra)
        ctx = pod_context(SGLANG, args, gpu_key="l4-24gb", annotations={"kubesim.io/time-scale": "20"})
        return asyncio.run(_a_b_c_a(ctx))

    text = run("--enable-hierarchical-cache", "--hicache-size", "1")
    fams, m = _families(text), scrape(text)
    assert fams["sglang:hicache_host_used_tokens"] == fams["sglang:hicache_host_total_tokens"] == "gauge"
    assert fams["sglang:evicted_tokens"] == fams["sglang:load_back_tokens"] == "counter"
    assert fams["sglang:load_back_duration_seconds"] == "histogram"
    assert m["sglang:hicache_host_total_tokens"] == 7616  # 476 blocks of 16 (see the sizing test)
    assert m["sglang:hicache_host_used_tokens"] == 3 * 2000  # a, b and c written through, deduplicated
    device = m[key("sglang:cached_tokens_total", cache_source="device", engine_type="unified")]
    host = m[key("sglang:cached_tokens_total", cache_source="host", engine_type="unified")]
    assert device + host == 1984 and host > 0
    assert m["sglang:load_back_tokens_total"] == host
    plain = _families(run())
    assert "sglang:hicache_host_used_tokens" not in plain and "sglang:load_back_tokens" not in plain
