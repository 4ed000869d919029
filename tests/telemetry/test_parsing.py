"""Parsing vLLM and SGLang expositions, and the engine-specific figures (hit rate, success, queues)."""

import json
import math

import pytest

from apps.telemetry.exposition import NotAnEngineExposition, Snapshot, parse_snapshot
from apps.telemetry.figures import figures
from tests.telemetry import expositions as ex

# A trimmed vLLM 0.33 /metrics as prometheus_client writes it (two data-parallel engines).
VLLM_TEXT = """\
# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 8573.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="llama-8b"} 3.0
vllm:num_requests_running{engine="1",model_name="llama-8b"} 4.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="llama-8b"} 1.0
vllm:num_requests_waiting{engine="1",model_name="llama-8b"} 0.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="llama-8b"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="llama-8b"} 0.75
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",engine="0",num_gpu_blocks="27000"} 1.0
# HELP vllm:engine_sleep_state Engine sleep state.
# TYPE vllm:engine_sleep_state gauge
vllm:engine_sleep_state{engine="0",model_name="llama-8b",sleep_state="awake"} 1.0
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="llama-8b"} 1200.0
vllm:prompt_tokens_total{engine="1",model_name="llama-8b"} 800.0
# HELP vllm:prompt_tokens_created Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_created gauge
vllm:prompt_tokens_created{engine="0",model_name="llama-8b"} 1.7649e+09
vllm:prompt_tokens_created{engine="1",model_name="llama-8b"} 1.7649e+09
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="llama-8b"} 2.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.25",model_name="llama-8b"} 5.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="llama-8b"} 6.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="llama-8b"} 6.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="llama-8b"} 1.1
# HELP http_requests_total Total number of requests by method, status and handler.
# TYPE http_requests_total counter
http_requests_total{handler="/v1/completions",method="POST",status="2xx"} 42.0
"""


def test_vllm_exposition_is_recognised_with_its_model_and_series():
    snap = parse_snapshot(VLLM_TEXT, scraped_at=12.5)
    assert snap.engine == "vllm"
    assert snap.model == "llama-8b"
    assert snap.scraped_at == 12.5
    # Prefix and _total are dropped from family names; each DP engine is its own series.
    engine0 = (("engine", "0"), ("model_name", "llama-8b"))
    assert snap.counters["prompt_tokens"][engine0] == 1200.0
    assert snap.gauges["num_requests_running"][engine0] == 3.0
    assert snap.histograms["time_to_first_token_seconds"][engine0] == {0.1: 2.0, 0.25: 5.0, math.inf: 6.0}
    # The _created gauges become restart markers, not gauges; unprefixed families are left out.
    assert snap.created[("prompt_tokens", engine0)] == 1.7649e09
    assert "prompt_tokens_created" not in snap.gauges
    assert "http_requests" not in snap.counters


def test_vllm_gauges_add_up_queues_and_average_kv_usage_over_dp_engines():
    got = figures(parse_snapshot(VLLM_TEXT, 0.0), parse_snapshot(VLLM_TEXT, 5.0))
    assert got.running == 7.0  # 3 + 4
    assert got.waiting == 1.0  # 1 + 0
    assert got.kv_cache_usage == pytest.approx(0.5)  # (0.25 + 0.75) / 2
    assert got.preemptions is None  # num_preemptions is not in this trimmed exposition


def test_vllm_prefix_cache_hit_rate_preemptions_and_success_rate():
    prev = parse_snapshot(
        ex.vllm(prefix_hits=1000, prefix_queries=4000, preemptions=2, success={"stop": 10, "abort": 1}), 0.0
    )
    cur = parse_snapshot(
        ex.vllm(
            prefix_hits=1600,
            prefix_queries=5000,
            preemptions=5,
            success={"stop": 25, "length": 3, "abort": 2, "error": 1},
        ),
        10.0,
    )
    got = figures(prev, cur)
    assert got.model == "meta-llama/Llama-3.1-8B-Instruct"
    # Hits +600 of queries +1000 in the interval: 0.6 (the lifetime ratio 1600/5000 = 0.32 is not it).
    assert got.prefix_cache_hit_rate == pytest.approx(0.6)
    # Preemptions in the interval: 5 - 2 = 3.
    assert got.preemptions == 3.0
    # Finished: stop +15, length +3, abort +1, error +1 = 20; successful 18: 0.9.
    assert got.success_rate == pytest.approx(0.9)


SGLANG_TEXT = """\
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{engine_type="unified",model_name="qwen-7b",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 9.0
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{engine_type="unified",model_name="qwen-7b",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 2.0
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{engine_type="unified",model_name="qwen-7b",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 0.42
# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{engine_type="unified",is_streaming="true",model_name="qwen-7b"} 5000.0
sglang:generation_tokens_total{engine_type="unified",is_streaming="false",model_name="qwen-7b"} 1000.0
# HELP sglang:inter_token_latency_seconds Histogram of inter-token latency in seconds.
# TYPE sglang:inter_token_latency_seconds histogram
sglang:inter_token_latency_seconds_bucket{engine_type="unified",le="0.01",model_name="qwen-7b"} 10.0
sglang:inter_token_latency_seconds_bucket{engine_type="unified",le="+Inf",model_name="qwen-7b"} 12.0
sglang:inter_token_latency_seconds_count{engine_type="unified",model_name="qwen-7b"} 12.0
sglang:inter_token_latency_seconds_sum{engine_type="unified",model_name="qwen-7b"} 0.2
"""


def test_sglang_exposition_is_recognised_with_its_model_and_series():
    snap = parse_snapshot(SGLANG_TEXT, 0.0)
    assert snap.engine == "sglang"
    assert snap.model == "qwen-7b"
    assert sorted(snap.counters["generation_tokens"].values()) == [1000.0, 5000.0]
    got = figures(snap, parse_snapshot(SGLANG_TEXT, 1.0))
    assert got.running == 9.0
    assert got.waiting == 2.0
    assert got.kv_cache_usage == pytest.approx(0.42)
    assert got.generation_tokens_per_s == 0.0
    assert got.preemptions is None  # SGLang exports no preemption counter


def test_sglang_figures_use_the_windowed_hit_rate_not_the_last_batch_gauge():
    prev = parse_snapshot(
        ex.sglang(
            effective={"input": 1000, "device_hit": 500},
            requests=10,
            aborted=1,
            prompt_tokens=2000,
            generation_tokens=400,
            last_batch_hit_rate=0.1,
        ),
        0.0,
    )
    cur = parse_snapshot(
        ex.sglang(
            effective={"input": 1600, "device_hit": 800, "host_hit": 100},
            requests=30,
            aborted=3,
            prompt_tokens=4500,
            generation_tokens=1400,
            running=6,
            queued=4,
            token_usage=0.8,
            last_batch_hit_rate=0.9,
            ttft={0.2: 0, 0.4: 10, 0.6: 20},
            itl={0.02: 100},
        ),
        5.0,
    )
    got = figures(prev, cur)
    assert got.engine == "sglang"
    assert got.model == "Qwen/Qwen2.5-7B-Instruct"
    # Interval: input +600, device_hit +300, host_hit +100, storage_hit 0 → hits 400 of 1000: 0.4.
    assert got.prefix_cache_hit_rate == pytest.approx(0.4)
    # Requests +20, aborted +2 → 18 of 20 succeeded.
    assert got.success_rate == pytest.approx(0.9)
    # Tokens: prompt +2500, generation +1000 over 5 s.
    assert got.prompt_tokens_per_s == pytest.approx(500.0)
    assert got.generation_tokens_per_s == pytest.approx(200.0)
    assert (got.running, got.waiting, got.kv_cache_usage) == (6.0, 4.0, 0.8)
    # TTFT: 10 requests in (0.2, 0.4], 10 in (0.4, 0.6]. p50: rank 10 → (0.2, 0.4] full: 0.4.
    # p95: rank 19 → (0.4, 0.6] with 10 below: 0.4 + 0.2 * 9/10 = 0.58.
    assert got.ttft_p50_s == pytest.approx(0.4)
    assert got.ttft_p95_s == pytest.approx(0.58)
    # ITL: 100 tokens in (0.015, 0.02]. p50: rank 50 → 0.015 + 0.005 * 50/100 = 0.0175.
    assert got.itl_p50_s == pytest.approx(0.0175)


@pytest.mark.parametrize(
    "text",
    [
        "<html><body>Not found</body></html>",
        "# TYPE node_load1 gauge\nnode_load1 0.5\n",
        "",
        '# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name="m" 1\n',
    ],
    ids=["html", "other-exporter", "empty", "broken-engine-line"],
)
def test_anything_but_an_engine_exposition_is_refused(text):
    with pytest.raises(NotAnEngineExposition):
        parse_snapshot(text)


def test_scrapes_of_different_engines_cannot_be_compared():
    with pytest.raises(ValueError, match="engine changed"):
        figures(parse_snapshot(VLLM_TEXT, 0.0), parse_snapshot(SGLANG_TEXT, 5.0))


def test_only_the_families_the_figures_need_are_kept_unless_all_are_asked_for():
    snap = parse_snapshot(VLLM_TEXT)
    assert "engine_sleep_state" not in snap.gauges
    # cache_config_info is kept: its kv_offloading_size label is the CPU tier's size.
    assert "cache_config_info" in snap.gauges
    full = parse_snapshot(VLLM_TEXT, all_families=True)
    assert full.gauges["engine_sleep_state"]
    info = (("block_size", "16"), ("cache_dtype", "auto"), ("engine", "0"), ("num_gpu_blocks", "27000"))
    assert full.gauges["cache_config_info"][info] == 1.0
    # The figures are the same either way.
    prev = ex.vllm(ttft={0.25: 3}, prefix_hits=10, prefix_queries=40, success={"stop": 2}, preemptions=1)
    cur = ex.vllm(ttft={0.25: 5, 0.5: 9}, prefix_hits=30, prefix_queries=90, success={"stop": 7}, preemptions=4)
    trimmed = figures(parse_snapshot(prev, 0.0), parse_snapshot(cur, 5.0))
    complete = figures(parse_snapshot(prev, 0.0, all_families=True), parse_snapshot(cur, 5.0, all_families=True))
    assert trimmed == complete
    assert trimmed.prefix_cache_hit_rate == pytest.approx(20 / 50)
    assert trimmed.preemptions == 3.0


def test_a_snapshot_survives_a_json_round_trip():
    snap = parse_snapshot(ex.sglang(ttft={0.4: 3}, effective={"input": 9, "device_hit": 1}, running=2), 42.0)
    again = Snapshot.from_dict(json.loads(json.dumps(snap.to_dict())))
    assert again == snap
    assert again.histograms["time_to_first_token_seconds"]
    assert math.inf in next(iter(again.histograms["time_to_first_token_seconds"].values()))


def test_nan_samples_are_no_figure():
    text = ex.vllm(kv=math.nan, running=2)
    got = figures(parse_snapshot(text, 0.0), parse_snapshot(text, 5.0))
    assert got.kv_cache_usage is None
    assert got.running == 2.0
    json.dumps(got.as_dict(), allow_nan=False)  # valid JSON


def test_a_fresh_sglang_engine_exports_counters_without_series_and_idles_at_zero():
    # Before the first request SGLang's labelled families have HELP and TYPE lines but no samples.
    fresh = (
        "# HELP sglang:prompt_tokens_total Number of prefill tokens processed.\n"
        "# TYPE sglang:prompt_tokens_total counter\n"
        "# HELP sglang:time_to_first_token_seconds Histogram of time to first token in seconds.\n"
        "# TYPE sglang:time_to_first_token_seconds histogram\n"
        "# HELP sglang:num_running_reqs The number of running requests.\n"
        "# TYPE sglang:num_running_reqs gauge\n"
        'sglang:num_running_reqs{engine_type="unified",model_name="qwen-7b",tp_rank="0"} 0.0\n'
    )
    got = figures(parse_snapshot(fresh, 0.0), parse_snapshot(fresh, 5.0))
    assert got.prompt_tokens_per_s == 0.0
    assert got.generation_tokens_per_s is None  # not exported at all
    assert got.ttft_p50_s is None
    assert got.running == 0.0
