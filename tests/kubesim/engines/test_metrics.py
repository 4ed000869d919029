"""Engine expositions: exact families, types, labels and buckets of vLLM 0.33 and SGLang 0.5 (engines.md)."""

import asyncio

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from kubesim.engines.harness import pod_context, start
from tests.kubesim.cluster_support import sglang_argv
from tests.polling import until

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
FAST = {"kubesim.io/time-scale": "20"}

# Bucket bounds copied from engines.md section 1 and 2 (not from the code under test).
VLLM_TTFT = [
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1,
    2.5,
    5,
    7.5,
    10,
    20,
    40,
    80,
    160,
    640,
    2560,
]
VLLM_ITL = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80]
VLLM_LAT = [0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680]
SGLANG_TTFT = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400]
SGLANG_ITL = [
    0.002,
    0.004,
    0.006,
    0.008,
    0.01,
    0.015,
    0.02,
    0.025,
    0.03,
    0.035,
    0.04,
    0.06,
    0.08,
    0.1,
    0.2,
    0.4,
    0.6,
    0.8,
    1,
    2,
    4,
    6,
    8,
]


def families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def bucket_bounds(fam) -> list[float]:
    first = None
    bounds = []
    for s in fam.samples:
        if s.name.endswith("_bucket"):
            key = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
            first = first or key
            if key == first:
                bounds.append(float(s.labels["le"]))
    return bounds


def value(fam, suffix="", **labels) -> float:
    total = 0.0
    for s in fam.samples:
        if s.name == fam.name + suffix and all(s.labels.get(k) == v for k, v in labels.items()):
            total += s.value
    return total


async def serve_and_scrape(image, args, requests, env=None):
    w = await start(pod_context(image, args, annotations=FAST, env=env))
    usages = []
    try:
        async with aiohttp.ClientSession() as s:
            for body, chat in requests:
                path = "/v1/chat/completions" if chat else "/v1/completions"
                async with s.post(w.base_url + path, json=body) as r:
                    assert r.status == 200, await r.text()
                    if body.get("stream"):
                        text = await r.text()
                        import json

                        chunks = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]
                        usages.append(chunks[-1]["usage"])
                    else:
                        usages.append((await r.json())["usage"])
            async with s.get(w.base_url + "/metrics") as r:
                status, text = r.status, await r.text()
    finally:
        await w.stop()
    return status, text, usages


def test_vllm_exposition_has_the_families_labels_and_buckets_of_vllm_0_33():
    reqs = [
        ({"model": LLAMA, "prompt": "one two three four five", "max_tokens": 7}, False),
        (
            {
                "model": LLAMA,
                "messages": [{"role": "user", "content": "hi there"}],
                "max_tokens": 4,
                "stream": True,
                "stream_options": {"include_usage": True},
            },
            True,
        ),
        ({"prompt": "alpha beta gamma", "max_tokens": 3, "ignore_eos": True}, False),
    ]
    status, text, usages = asyncio.run(
        serve_and_scrape("vllm/vllm-openai:v0.33.0", [LLAMA, "--max-model-len", "8192"], reqs)
    )
    assert status == 200
    fams = families(text)
    expected_types = {
        "vllm:num_requests_running": "gauge",
        "vllm:num_requests_waiting": "gauge",
        "vllm:kv_cache_usage_perc": "gauge",
        "vllm:cache_config_info": "gauge",
        "vllm:prefix_cache_queries": "counter",
        "vllm:prefix_cache_hits": "counter",
        "vllm:num_preemptions": "counter",
        "vllm:prompt_tokens": "counter",
        "vllm:generation_tokens": "counter",
        "vllm:request_success": "counter",
        "vllm:time_to_first_token_seconds": "histogram",
        "vllm:inter_token_latency_seconds": "histogram",
        "vllm:e2e_request_latency_seconds": "histogram",
        "vllm:request_queue_time_seconds": "histogram",
        "vllm:iteration_tokens_total": "histogram",
    }
    for name, kind in expected_types.items():
        assert fams[name].type == kind, name
    # Removed in 0.33 and must not appear.
    for gone in (
        "vllm:gpu_cache_usage_perc",
        "vllm:gpu_prefix_cache_queries",
        "vllm:num_requests_swapped",
        "vllm:time_per_output_token_seconds",
        "vllm:cpu_cache_usage_perc",
    ):
        assert gone not in fams
    running = fams["vllm:num_requests_running"].samples[0]
    assert running.labels == {"model_name": LLAMA, "engine": "0"}
    info = fams["vllm:cache_config_info"].samples[0]
    assert "model_name" not in info.labels
    assert info.labels["engine"] == "0" and info.labels["block_size"] == "16"
    assert info.labels["cache_dtype"] == "auto" and int(info.labels["num_gpu_blocks"]) > 0
    assert bucket_bounds(fams["vllm:time_to_first_token_seconds"]) == [*VLLM_TTFT, float("inf")]
    assert bucket_bounds(fams["vllm:inter_token_latency_seconds"]) == [*VLLM_ITL, float("inf")]
    assert bucket_bounds(fams["vllm:e2e_request_latency_seconds"]) == [*VLLM_LAT, float("inf")]
    assert bucket_bounds(fams["vllm:request_queue_time_seconds"]) == [*VLLM_LAT, float("inf")]
    # 1-2-5 up to max_model_len 8192
    assert bucket_bounds(fams["vllm:request_prompt_tokens"]) == [
        1,
        2,
        5,
        10,
        20,
        50,
        100,
        200,
        500,
        1000,
        2000,
        5000,
        float("inf"),
    ]
    assert bucket_bounds(fams["vllm:iteration_tokens_total"]) == [
        1,
        8,
        16,
        32,
        64,
        128,
        256,
        512,
        1024,
        2048,
        4096,
        8192,
        16384,
        float("inf"),
    ]
    # Consistency with what was served.
    assert value(fams["vllm:time_to_first_token_seconds"], "_count") == 3
    assert value(fams["vllm:e2e_request_latency_seconds"], "_count") == 3
    assert value(fams["vllm:request_success"], "_total") == 3
    assert value(fams["vllm:request_success"], "_total", finished_reason="length") == 3
    assert value(fams["vllm:prompt_tokens"], "_total") == sum(u["prompt_tokens"] for u in usages)
    assert value(fams["vllm:generation_tokens"], "_total") == sum(u["completion_tokens"] for u in usages)
    assert [u["completion_tokens"] for u in usages] == [7, 4, 3]
    # "one two three four five" is five words, one token each.
    assert usages[0]["prompt_tokens"] == 5
    # Every generated token after the first has one inter-token latency.
    assert value(fams["vllm:inter_token_latency_seconds"], "_count") == (7 - 1) + (4 - 1) + (3 - 1)
    assert value(fams["vllm:num_requests_running"]) == 0


def test_sglang_metrics_need_enable_metrics():
    status, _, _ = asyncio.run(serve_and_scrape("lmsysorg/sglang:v0.5.2", sglang_argv(LLAMA), []))
    assert status == 404


def test_sglang_exposition_has_the_families_labels_and_buckets_of_sglang_0_5():
    args = sglang_argv(LLAMA, "--enable-metrics", "--host", "0.0.0.0", "--context-length", "8192")
    reqs = [
        ({"prompt": "a b c d e f", "max_tokens": 5}, False),
        (
            {
                "messages": [{"role": "user", "content": "hello"}],
                "max_tokens": 6,
                "stream": True,
                "stream_options": {"include_usage": True},
            },
            True,
        ),
    ]
    status, text, usages = asyncio.run(serve_and_scrape("lmsysorg/sglang:v0.5.2", args, reqs))
    assert status == 200
    fams = families(text)
    for name in (
        "num_running_reqs",
        "num_queue_reqs",
        "token_usage",
        "cache_hit_rate",
        "gen_throughput",
        "max_total_num_tokens",
    ):
        fam = fams[f"sglang:{name}"]
        assert fam.type == "gauge", name
        assert set(fam.samples[0].labels) == {"model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank"}
    for name in ("prompt_tokens", "generation_tokens", "cached_tokens", "prefill_effective_tokens"):
        assert fams[f"sglang:{name}"].type == "counter", name
    ttft = fams["sglang:time_to_first_token_seconds"]
    assert ttft.type == "histogram"
    assert bucket_bounds(ttft) == [*SGLANG_TTFT, float("inf")]
    assert bucket_bounds(fams["sglang:inter_token_latency_seconds"]) == [*SGLANG_ITL, float("inf")]
    assert bucket_bounds(fams["sglang:e2e_request_latency_seconds"]) == [
        *SGLANG_TTFT,
        600,
        1200,
        1800,
        2400,
        float("inf"),
    ]
    assert {s.labels["is_streaming"] for s in ttft.samples} == {"true", "false"}
    assert value(ttft, "_count") == 2
    assert value(fams["sglang:prompt_tokens"], "_total") == sum(u["prompt_tokens"] for u in usages)
    assert value(fams["sglang:generation_tokens"], "_total") == 5 + 6
    assert value(fams["sglang:prompt_tokens"], "_total", is_streaming="false") == 6
    assert value(fams["sglang:num_running_reqs"]) == 0
    assert fams["sglang:num_running_reqs"].samples[0].labels["engine_type"] == "unified"


def test_vllm_data_parallel_engines_are_labelled_by_rank_and_share_the_load():
    async def go():
        w = await start(
            pod_context(
                "vllm/vllm-openai:v0.33.0",
                [LLAMA, "--max-model-len", "8192", "-dp", "2"],
                gpu_count=2,
                annotations=FAST,
            )
        )
        try:
            async with aiohttp.ClientSession() as s:
                bodies = [
                    {"prompt": f"request {i} " + "x " * 300, "max_tokens": 20, "ignore_eos": True} for i in range(6)
                ]
                await asyncio.gather(*[s.post(w.base_url + "/v1/completions", json=b) for b in bodies])
                async with s.get(w.base_url + "/metrics") as r:
                    return await r.text()
        finally:
            await w.stop()

    fams = families(asyncio.run(go()))
    per_engine = {
        s.labels["engine"]: s.value
        for s in fams["vllm:request_success"].samples
        if s.name.endswith("_total") and s.labels["finished_reason"] == "length"
    }
    assert set(per_engine) == {"0", "1"}
    assert sum(per_engine.values()) == 6 and min(per_engine.values()) >= 1
    assert {s.labels["engine"] for s in fams["vllm:cache_config_info"].samples} == {"0", "1"}


def test_a_full_waiting_queue_rejects_with_503_and_counts_the_rejection():
    args = [LLAMA, "--max-model-len", "8192", "--max-num-seqs", "1", "--max-num-queued-reqs", "2"]

    async def go():
        w = await start(pod_context("vllm/vllm-openai:v0.33.0", args, annotations=FAST))
        try:
            async with aiohttp.ClientSession() as s:
                body = {"prompt": "x " * 100, "max_tokens": 200, "ignore_eos": True}
                # One runs, two wait; the next ones find the queue full.
                answers = []
                for i in range(5):
                    answers.append(asyncio.create_task(s.post(w.base_url + "/v1/completions", json=body)))
                    if i < 3:  # admitted in order before the next one arrives
                        await until(lambda n=i + 1: w.load() == n, message=f"{i + 1} requests in the engine")
                statuses = sorted([(await a).status for a in answers])
                async with s.get(w.base_url + "/metrics") as r:
                    return statuses, await r.text()
        finally:
            await w.stop()

    statuses, text = asyncio.run(go())
    assert statuses == [200, 200, 200, 503, 503]
    fams = families(text)
    assert value(fams["vllm:admission_rejections"], "_total", reason="max_num_queued_reqs") == 2
    assert value(fams["vllm:request_success"], "_total") == 3


def test_disable_log_stats_removes_the_engine_families():
    status, text, usages = asyncio.run(
        serve_and_scrape(
            "vllm/vllm-openai:v0.33.0",
            [LLAMA, "--max-model-len", "8192", "--disable-log-stats"],
            [({"prompt": "hello", "max_tokens": 2}, False)],
        )
    )
    assert status == 200 and usages[0]["completion_tokens"] == 2
    assert not [name for name in families(text) if name.startswith("vllm:")]
