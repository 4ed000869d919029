"""Quantiles as PromQL's histogram_quantile computes them, from bucket increments between two scrapes.

Every expected number is worked out by hand in the comments: rank = q * observations; find the first
bucket whose cumulative count reaches the rank; interpolate linearly between that bucket's lower and
upper bound by (rank - count below) / (count in the bucket).
"""

import math

import pytest

from apps.telemetry.exposition import parse_snapshot
from apps.telemetry.figures import figures, figures_from_increments, histogram_quantile, increments, merge_increments
from tests.telemetry import expositions as ex

INF = math.inf


def vllm_snapshot(at, **kwargs):
    return parse_snapshot(ex.vllm(**kwargs), scraped_at=at)


# --- histogram_quantile on cumulative counts ---------------------------------------------------------


def test_quantiles_interpolate_linearly_inside_the_bucket():
    # Buckets: 10 observations ≤0.1, 20 in (0.1, 0.5], 10 in (0.5, 1], none above: 40 in total.
    buckets = {0.1: 10, 0.5: 30, 1.0: 40, INF: 40}
    # p50: rank 0.5*40 = 20 → bucket (0.1, 0.5] (cumulative 30 ≥ 20, 10 below): 0.1 + 0.4 * (20-10)/20 = 0.3
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.3)
    # p95: rank 38 → bucket (0.5, 1] (cumulative 40, 30 below): 0.5 + 0.5 * (38-30)/10 = 0.9
    assert histogram_quantile(0.95, buckets) == pytest.approx(0.9)
    # p99: rank 39.6 → same bucket: 0.5 + 0.5 * 9.6/10 = 0.98
    assert histogram_quantile(0.99, buckets) == pytest.approx(0.98)


def test_first_bucket_interpolates_from_zero():
    buckets = {0.1: 10, 0.5: 30, 1.0: 40, INF: 40}
    # p5: rank 2 → first bucket, lower bound 0: 0 + 0.1 * 2/10 = 0.02
    assert histogram_quantile(0.05, buckets) == pytest.approx(0.02)
    # p25: rank 10 → first bucket exactly full: 0.1 * 10/10 = 0.1
    assert histogram_quantile(0.25, buckets) == pytest.approx(0.1)


def test_rank_in_the_inf_bucket_returns_the_last_finite_bound():
    # 5 observations ≤0.1 and 5 above 1 s. p95: rank 9.5 > 5 lands in +Inf → the last finite bound, 1.0.
    buckets = {0.1: 5, 1.0: 5, INF: 10}
    assert histogram_quantile(0.95, buckets) == 1.0
    # p50: rank 5 → first bucket (cumulative 5 ≥ 5): 0.1 * 5/5 = 0.1
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.1)


def test_no_observations_no_inf_bucket_or_one_bucket_give_none():
    assert histogram_quantile(0.5, {0.1: 0, 1.0: 0, INF: 0}) is None
    assert histogram_quantile(0.5, {0.1: 3, 1.0: 4}) is None  # no +Inf bucket: PromQL returns NaN
    assert histogram_quantile(0.5, {INF: 4}) is None
    assert histogram_quantile(0.5, {}) is None


def test_non_monotonic_counts_are_repaired_with_the_running_maximum():
    # 0.5's count (4) below 0.1's (5) is read as 5, so the buckets are 5, 5, 10, 10.
    buckets = {0.1: 5, 0.5: 4, 1.0: 10, INF: 10}
    # p75: rank 7.5 → bucket (0.5, 1] (5 below, 5 inside): 0.5 + 0.5 * 2.5/5 = 0.75
    assert histogram_quantile(0.75, buckets) == pytest.approx(0.75)


def test_quantile_outside_zero_one_is_infinite_like_promql():
    buckets = {0.1: 1, INF: 1}
    assert histogram_quantile(-0.1, buckets) == -INF
    assert histogram_quantile(1.5, buckets) == INF


# --- Between two scrapes -----------------------------------------------------------------------------


def test_ttft_comes_from_increments_not_from_the_cumulative_counts():
    # Before: 4 requests ≤0.1 s, 6 in (0.1, 0.25]. After: 4 more in (0.1, 0.25] and 16 in (0.25, 0.5].
    prev = vllm_snapshot(100.0, ttft={0.1: 4, 0.25: 10})
    cur = vllm_snapshot(105.0, ttft={0.1: 4, 0.25: 14, 0.5: 30})
    got = figures(prev, cur)
    # Increments: ≤0.1: 0, ≤0.25: 4, ≤0.5: 20, … +Inf: 20 (20 requests in the interval).
    # p50: rank 10 → (0.25, 0.5] with 4 below, 16 inside: 0.25 + 0.25 * 6/16 = 0.34375
    assert got.ttft_p50_s == pytest.approx(0.34375)
    # p95: rank 19 → 0.25 + 0.25 * 15/16 = 0.484375
    assert got.ttft_p95_s == pytest.approx(0.484375)
    # p99: rank 19.8 → 0.25 + 0.25 * 15.8/16 = 0.496875
    assert got.ttft_p99_s == pytest.approx(0.496875)
    # Cumulative counts would have put p50 at rank 15 of 30 in (0.25, 0.5]: 0.25 + 0.25 * 1/16 ≈ 0.266.
    assert got.ttft_p50_s != pytest.approx(0.265625)


def test_inter_token_latency_p50_and_p95():
    # 100 tokens in the interval: 50 in (0.01, 0.025], 40 in (0.025, 0.05], 10 in (0.05, 0.075].
    prev = vllm_snapshot(0.0, itl={0.01: 7, 0.025: 7})
    cur = vllm_snapshot(5.0, itl={0.01: 7, 0.025: 57, 0.05: 97, 0.075: 107})
    got = figures(prev, cur)
    # Increments: ≤0.01: 0, ≤0.025: 50, ≤0.05: 90, ≤0.075: 100.
    # p50: rank 50 → (0.01, 0.025] exactly full: 0.01 + 0.015 * 50/50 = 0.025
    assert got.itl_p50_s == pytest.approx(0.025)
    # p95: rank 95 → (0.05, 0.075] with 90 below, 10 inside: 0.05 + 0.025 * 5/10 = 0.0625
    assert got.itl_p95_s == pytest.approx(0.0625)


def test_counter_reset_uses_the_current_values_as_the_increase():
    # The engine restarted: before, 50 requests and 10 000 prompt tokens; after, a new process with 8.
    # (_created is left unchanged, so only the decrease tells: Prometheus' own rule.)
    prev = vllm_snapshot(0.0, ttft={0.25: 10, 0.5: 40, INF: 50}, prompt_tokens=10_000, generation_tokens=900)
    cur = vllm_snapshot(5.0, ttft={0.25: 2, 0.5: 6, 1.0: 8}, prompt_tokens=300, generation_tokens=1000)
    got = figures(prev, cur)
    # Buckets went down (10 → 2), so the increase is the new process' counts:
    # ≤0.25: 2, ≤0.5: 6, ≤0.75: 6, ≤1: 8, +Inf: 8.
    # p50: rank 4 → (0.25, 0.5] with 2 below, 4 inside: 0.25 + 0.25 * 2/4 = 0.375
    assert got.ttft_p50_s == pytest.approx(0.375)
    # p95: rank 7.6 → (0.75, 1] with 6 below, 2 inside: 0.75 + 0.25 * 1.6/2 = 0.95
    assert got.ttft_p95_s == pytest.approx(0.95)
    # prompt tokens 10 000 → 300 is a reset: 300 new tokens in 5 s = 60/s.
    assert got.prompt_tokens_per_s == pytest.approx(60.0)
    # generation tokens 900 → 1000 is an ordinary increase: 100 in 5 s = 20/s.
    assert got.generation_tokens_per_s == pytest.approx(20.0)


def test_restart_is_detected_from_created_even_when_counts_grew():
    # Before: 1 request ≤0.25, 1 in (0.25, 0.5], 500 prompt tokens. A new process (created later) has
    # since served 4 requests ≤0.25 and 800 prompt tokens: more than before, so no counter went down.
    prev = vllm_snapshot(0.0, ttft={0.25: 1, 0.5: 2}, prompt_tokens=500, created=1000.0)
    cur = vllm_snapshot(5.0, ttft={0.25: 4}, prompt_tokens=800, created=2000.0)
    got = figures(prev, cur)
    # Increase = current counts: ≤0.1: 0, ≤0.25: 4. p50: rank 2 → 0.1 + 0.15 * 2/4 = 0.175
    assert got.ttft_p50_s == pytest.approx(0.175)
    # 800 new prompt tokens in 5 s = 160/s (not (800 - 500)/5 = 60/s).
    assert got.prompt_tokens_per_s == pytest.approx(160.0)


def test_same_created_and_growing_counts_are_not_a_reset():
    prev = vllm_snapshot(0.0, ttft={0.25: 1, 0.5: 2}, created=1000.0)
    cur = vllm_snapshot(5.0, ttft={0.25: 4, 0.5: 5}, created=1000.0)
    # Increments: ≤0.25: 3, ≤0.5: 3. p50: rank 1.5 → (0.1, 0.25]: 0.1 + 0.15 * 1.5/3 = 0.175
    # p95: rank 2.85 → same bucket: 0.1 + 0.15 * 2.85/3 = 0.2425
    got = figures(prev, cur)
    assert got.ttft_p50_s == pytest.approx(0.175)
    assert got.ttft_p95_s == pytest.approx(0.2425)


def test_empty_interval_has_no_latency_and_zero_throughput():
    text = dict(ttft={0.25: 10}, itl={0.05: 300}, prompt_tokens=5000, generation_tokens=700, running=0, kv=0.125)
    got = figures(vllm_snapshot(0.0, **text), vllm_snapshot(5.0, **text))
    assert got.ttft_p50_s is None
    assert got.ttft_p99_s is None
    assert got.itl_p95_s is None
    assert got.prefix_cache_hit_rate is None  # no prefix-cache queries in the interval
    assert got.success_rate is None  # no finished requests
    assert got.prompt_tokens_per_s == 0.0
    assert got.generation_tokens_per_s == 0.0
    assert got.kv_cache_usage == pytest.approx(0.125)  # a gauge is a value now, not an increase


def test_everything_in_the_inf_bucket_gives_the_last_finite_bound():
    # 3 requests took longer than vLLM's last finite TTFT bucket (2560 s).
    prev = vllm_snapshot(0.0, ttft={INF: 1})
    cur = vllm_snapshot(5.0, ttft={INF: 4})
    got = figures(prev, cur)
    assert got.ttft_p50_s == 2560.0
    assert got.ttft_p95_s == 2560.0
    assert got.ttft_p99_s == 2560.0


# --- Merging pods -----------------------------------------------------------------------------------


def test_merging_two_pods_sums_bucket_increments_instead_of_averaging_percentiles():
    # Pod A: 10 requests in (0.1, 0.25]; pod B: 10 requests in (0.5, 0.75]; same 5 s interval.
    a = increments(
        vllm_snapshot(0.0),
        vllm_snapshot(5.0, ttft={0.25: 10}, prefix_hits=100, prefix_queries=400, kv=0.2, running=3),
    )
    b = increments(
        vllm_snapshot(0.0),
        vllm_snapshot(5.0, ttft={0.5: 0, 0.75: 10}, prefix_hits=300, prefix_queries=400, kv=0.6, running=5),
    )
    # Alone: A's p50 = 0.1 + 0.15 * 5/10 = 0.175; B's p50 = 0.5 + 0.25 * 5/10 = 0.625.
    assert figures_from_increments(a).ttft_p50_s == pytest.approx(0.175)
    assert figures_from_increments(b).ttft_p50_s == pytest.approx(0.625)
    merged = figures_from_increments(merge_increments([a, b]))
    # Together: ≤0.25: 10, ≤0.5: 10, ≤0.75: 20. p50: rank 10 → (0.1, 0.25] exactly full: 0.25
    # (the average of the two p50s, 0.4, would be wrong).
    assert merged.ttft_p50_s == pytest.approx(0.25)
    # p95: rank 19 → (0.5, 0.75] with 10 below, 10 inside: 0.5 + 0.25 * 9/10 = 0.725
    assert merged.ttft_p95_s == pytest.approx(0.725)
    # Hit rate: (100 + 300) / (400 + 400) = 0.5; KV usage is the pods' mean (0.2 + 0.6)/2 = 0.4;
    # running requests add up: 3 + 5 = 8.
    assert merged.prefix_cache_hit_rate == pytest.approx(0.5)
    assert merged.kv_cache_usage == pytest.approx(0.4)
    assert merged.running == 8
    assert merged.pods == 2


def test_merged_throughput_is_the_sum_of_each_pods_rate():
    # Pod A made 500 prompt tokens in 5 s (100/s); pod B, scraped 10 s apart, 300 in 10 s (30/s).
    a = increments(vllm_snapshot(0.0), vllm_snapshot(5.0, prompt_tokens=500))
    b = increments(vllm_snapshot(0.0), vllm_snapshot(10.0, prompt_tokens=300))
    merged = figures_from_increments(merge_increments([a, b]))
    # 100/s + 30/s = 130/s (summing counts over a mean interval would give 800 / 7.5 ≈ 106.7).
    assert merged.prompt_tokens_per_s == pytest.approx(130.0)


def test_merging_requires_the_same_engine_and_something_to_merge():
    v = increments(vllm_snapshot(0.0), vllm_snapshot(5.0))
    s = increments(parse_snapshot(ex.sglang(), 0.0), parse_snapshot(ex.sglang(), 5.0))
    with pytest.raises(ValueError, match="different engines"):
        merge_increments([v, s])
    with pytest.raises(ValueError, match="nothing to merge"):
        merge_increments([])


def test_scrapes_out_of_order_are_refused():
    with pytest.raises(ValueError, match="later"):
        increments(vllm_snapshot(5.0), vllm_snapshot(5.0))
