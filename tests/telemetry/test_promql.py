"""The Prometheus source: query text, response parsing, and figures from a fake Prometheus HTTP API."""

import json

import pytest

from apps.telemetry.promql import (
    PodSelector,
    PrometheusClient,
    PrometheusError,
    figure_queries,
    parse_query_response,
    query_figures,
)
from tests.ports import closed_port
from tests.telemetry.servers import serving_app

SERVICE = PodSelector("team-a", pods=["llama-0", "llama-1"])
TTFT_BUCKETS = 'vllm:time_to_first_token_seconds_bucket{namespace="team-a",pod=~"llama-0|llama-1"}'


# --- Query text ----------------------------------------------------------------------------------------


def test_vllm_quantiles_sum_bucket_rates_by_le_before_histogram_quantile():
    queries = figure_queries("vllm", SERVICE, window_s=30)
    assert queries["ttft_p95_s"] == f"histogram_quantile(0.95, sum by (le) (rate({TTFT_BUCKETS}[30s])))"
    assert queries["ttft_p50_s"].startswith("histogram_quantile(0.5, ")
    assert queries["ttft_p99_s"].startswith("histogram_quantile(0.99, ")
    assert "rate(vllm:inter_token_latency_seconds_bucket{" in queries["itl_p95_s"]
    with pytest.raises(ValueError, match="at least one second"):
        figure_queries("vllm", SERVICE, window_s=0)


def test_vllm_ratios_and_gauges():
    queries = figure_queries("vllm", SERVICE, window_s=30)
    sel = 'namespace="team-a",pod=~"llama-0|llama-1"'
    assert queries["prefix_cache_hit_rate"] == (
        f"sum (rate(vllm:prefix_cache_hits_total{{{sel}}}[30s]))"
        f" / sum (rate(vllm:prefix_cache_queries_total{{{sel}}}[30s]))"
    )
    assert queries["success_rate"] == (
        f'sum (rate(vllm:request_success_total{{{sel},finished_reason!~"abort|error"}}[30s]))'
        f" / sum (rate(vllm:request_success_total{{{sel}}}[30s]))"
    )
    assert queries["kv_cache_usage"] == f"avg (vllm:kv_cache_usage_perc{{{sel}}})"
    assert queries["running"] == f"sum (vllm:num_requests_running{{{sel}}})"
    assert queries["waiting"] == f"sum (vllm:num_requests_waiting{{{sel}}})"
    assert queries["prompt_tokens_per_s"] == f"sum (rate(vllm:prompt_tokens_total{{{sel}}}[30s]))"
    assert queries["preemptions"] == f"sum (increase(vllm:num_preemptions_total{{{sel}}}[30s]))"
    # The autoscaler's signals: queue time and prompt-length p95, requests finished, prompt tokens waiting.
    assert queries["queue_time_p95_s"] == (
        f"histogram_quantile(0.95, sum by (le) (rate(vllm:request_queue_time_seconds_bucket{{{sel}}}[30s])))")
    assert queries["prompt_tokens_p95"].startswith("histogram_quantile(0.95, sum by (le) (rate(vllm:request_prompt_")
    assert queries["requests_per_s"] == f"sum (rate(vllm:request_success_total{{{sel}}}[30s]))"
    assert queries["waiting_prompt_tokens"] == (
        f"sum (vllm:num_requests_waiting{{{sel}}}) * (sum (rate(vllm:request_prompt_tokens_sum{{{sel}}}[30s]))"
        f" / sum (rate(vllm:request_prompt_tokens_count{{{sel}}}[30s])))")


def test_sglang_uses_its_own_names_and_the_windowed_hit_rate():
    queries = figure_queries("sglang", PodSelector("team-b"))
    sel = 'namespace="team-b"'
    assert queries["kv_cache_usage"] == f"avg (sglang:token_usage{{{sel}}})"
    assert queries["running"] == f"sum (sglang:num_running_reqs{{{sel}}})"
    assert queries["waiting"] == f"sum (sglang:num_queue_reqs{{{sel}}})"
    assert queries["prefix_cache_hit_rate"] == (
        f'sum (rate(sglang:prefill_effective_tokens_total{{{sel},mode=~".*_hit"}}[60s]))'
        f" / sum (rate(sglang:prefill_effective_tokens_total{{{sel}}}[60s]))"
    )
    assert "sglang:num_aborted_requests_total" in queries["success_rate"]
    assert "preemptions" not in queries  # SGLang exports no preemption counter


def test_the_cpu_tier_figures_read_the_engines_tier_families():
    sel = 'namespace="team-b"'
    vllm = figure_queries("vllm", PodSelector("team-b"), window_s=30)
    hits = f"sum (rate(vllm:external_prefix_cache_hits_total{{{sel}}}[30s]))"
    assert vllm["cpu_hit_rate"] == f"{hits} / sum (rate(vllm:external_prefix_cache_queries_total{{{sel}}}[30s]))"
    assert vllm["cpu_load_tokens_per_s"] == hits
    assert "cpu_usage" not in vllm  # the tier's size is only a label of cache_config_info

    sglang = figure_queries("sglang", PodSelector("team-b"), window_s=30, by=("pod",))
    effective = f"sum by (pod) (rate(sglang:prefill_effective_tokens_total{{{sel}}}[30s]))"
    host = f'sum by (pod) (rate(sglang:prefill_effective_tokens_total{{{sel},mode="host_hit"}}[30s]))'
    total = f"sum by (pod) (sglang:hicache_host_total_tokens{{{sel}}})"
    # Zero before the first host hit, nothing at all on a pod without HiCache.
    assert sglang["cpu_hit_rate"] == f"({host} or {effective} * 0) / {effective} and on (pod) {total}"
    assert sglang["cpu_usage"] == f"sum by (pod) (sglang:hicache_host_used_tokens{{{sel}}}) / {total}"
    assert sglang["cpu_load_tokens_per_s"] == f"sum by (pod) (rate(sglang:load_back_tokens_total{{{sel}}}[30s]))"


def test_per_pod_queries_group_by_pod_and_keep_le_for_quantiles():
    queries = figure_queries("vllm", SERVICE, by=("pod",))
    assert queries["ttft_p50_s"].startswith("histogram_quantile(0.5, sum by (pod, le) (rate(")
    assert queries["running"].startswith("sum by (pod) (")
    assert queries["kv_cache_usage"].startswith("avg by (pod) (")
    assert queries["model"].startswith("group by (pod, model_name) (")


def test_selector_values_are_escaped():
    selector = PodSelector('ns"x', pods=["a.b"], labels={"app": "back\\slash"})
    # The quote and backslash are string-escaped; the regex dot is escaped, then its backslash too.
    assert selector.matchers() == 'namespace="ns\\"x",pod=~"a\\\\.b",app="back\\\\slash"'


# --- Response parsing -----------------------------------------------------------------------------------


def test_vector_response_gives_labels_and_values_with_nan_as_none():
    payload = {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [
                {"metric": {"pod": "llama-0"}, "value": [1764000000.0, "0.25"]},
                {"metric": {"pod": "llama-1"}, "value": [1764000000.0, "NaN"]},
                {"metric": {"pod": "llama-2"}, "value": [1764000000.0, "+Inf"]},
            ],
        },
    }
    samples = parse_query_response(payload)
    assert [(s.labels, s.value) for s in samples] == [
        ({"pod": "llama-0"}, 0.25),
        ({"pod": "llama-1"}, None),
        ({"pod": "llama-2"}, None),
    ]


def test_scalar_and_empty_responses():
    scalar = {"status": "success", "data": {"resultType": "scalar", "result": [1764000000.0, "3"]}}
    assert [(s.labels, s.value) for s in parse_query_response(scalar)] == [({}, 3.0)]
    empty = {"status": "success", "data": {"resultType": "vector", "result": []}}
    assert parse_query_response(empty) == []


def test_error_and_range_responses_raise():
    error = {"status": "error", "errorType": "bad_data", "error": 'parse error: unexpected "}"'}
    with pytest.raises(PrometheusError, match='bad_data: parse error: unexpected "}"'):
        parse_query_response(error)
    matrix = {"status": "success", "data": {"resultType": "matrix", "result": []}}
    with pytest.raises(PrometheusError, match="matrix"):
        parse_query_response(matrix)


# --- Against a fake Prometheus server -------------------------------------------------------------------


def vector(pairs, extra=None):
    return {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [
                {"metric": {"pod": pod, **(extra or {})}, "value": [1764000000.0, value]} for pod, value in pairs
            ],
        },
    }


# Answers by the start of the query; the fake answers what a Prometheus scraping two vLLM pods would.
ANSWERS = [
    (
        "histogram_quantile(0.5, sum by (pod, le) (rate(vllm:time_to_first_token",
        [("llama-0", "0.2"), ("llama-1", "NaN")],
    ),
    ("histogram_quantile(0.95, sum by (pod, le) (rate(vllm:time_to_first_token", [("llama-0", "0.4")]),
    ("avg by (pod) (vllm:kv_cache_usage_perc", [("llama-0", "0.5"), ("llama-1", "0.125")]),
    ("sum by (pod) (vllm:num_requests_running", [("llama-0", "7"), ("llama-1", "0")]),
    ("sum by (pod) (rate(vllm:prompt_tokens_total", [("llama-0", "120.5"), ("llama-1", "0")]),
    ("sum by (pod) (rate(vllm:prefix_cache_hits_total", [("llama-0", "0.75")]),
    ("count by (pod) (group by (pod)", [("llama-0", "1"), ("llama-1", "1")]),
]


def fake_prometheus(path, params):
    if path != "/api/v1/query":
        return 404, "text/plain", "404 page not found"
    query = params["query"]
    if query.startswith("group by (pod, model_name)"):
        payload = vector([("llama-0", "1"), ("llama-1", "1")], {"model_name": "llama-8b"})
        return 200, "application/json", json.dumps(payload)
    for start, pairs in ANSWERS:
        if query.startswith(start):
            return 200, "application/json", json.dumps(vector(pairs))
    return 200, "application/json", json.dumps(vector([]))


def test_query_figures_per_pod_from_a_prometheus_server():
    with serving_app(fake_prometheus) as (base, requests):
        result = query_figures(PrometheusClient(base), "vllm", SERVICE, window_s=60, by=("pod",), at=1764000000.0)
    assert set(result) == {("llama-0",), ("llama-1",)}
    pod0, pod1 = result[("llama-0",)], result[("llama-1",)]
    assert (pod0.engine, pod0.model, pod0.interval_s, pod0.pods) == ("vllm", "llama-8b", 60.0, 1)
    assert (pod0.ttft_p50_s, pod0.ttft_p95_s) == (0.2, 0.4)
    assert (pod0.kv_cache_usage, pod0.running, pod0.prompt_tokens_per_s) == (0.5, 7.0, 120.5)
    assert pod0.prefix_cache_hit_rate == 0.75
    assert pod0.itl_p50_s is None  # the server had no answer for it
    assert pod1.ttft_p50_s is None  # NaN: no requests in the window
    assert pod1.ttft_p95_s is None  # absent from the result
    assert (pod1.kv_cache_usage, pod1.running) == (0.125, 0.0)
    # One query per figure, all evaluated at the same instant.
    assert len(requests) == len(figure_queries("vllm", SERVICE, by=("pod",)))
    assert all("time=1764000000.000" in r for r in requests)


def test_prometheus_errors_surface_as_prometheus_error():
    def bad_query(_path, _params):
        body = {"status": "error", "errorType": "bad_data", "error": "invalid parameter 'query'"}
        return 400, "application/json", json.dumps(body)

    with serving_app(bad_query) as (base, _), pytest.raises(PrometheusError, match="bad_data"):
        PrometheusClient(base).query("up{")
    gateway = serving_app(lambda _p, _q: (502, "text/html", "<html>bad gateway</html>"))
    with gateway as (base, _), pytest.raises(PrometheusError, match="HTTP 502"):
        PrometheusClient(base).query("up")
    with closed_port() as port, pytest.raises(PrometheusError):
        PrometheusClient(f"http://127.0.0.1:{port}").query("up")
    with pytest.raises(PrometheusError, match="not an http"):
        PrometheusClient("prometheus:9090")
