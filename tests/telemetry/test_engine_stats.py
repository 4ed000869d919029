"""`manage.py engine_stats` end to end against a real local HTTP server serving two successive scrapes."""

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from tests.ports import closed_port
from tests.telemetry import expositions as ex
from tests.telemetry.servers import serving

REPO = Path(__file__).resolve().parents[2]
KEYS = [
    "engine",
    "model",
    "ttft_p50_s",
    "ttft_p95_s",
    "ttft_p99_s",
    "itl_p50_s",
    "itl_p95_s",
    "kv_cache_usage",
    "running",
    "waiting",
    "prefix_cache_hit_rate",
    "prompt_tokens_per_s",
    "generation_tokens_per_s",
]

VLLM_BEFORE = ex.vllm(
    ttft={0.1: 4, 0.25: 10},
    itl={0.025: 100},
    prompt_tokens=1000,
    generation_tokens=200,
    prefix_hits=100,
    prefix_queries=400,
    running=2,
    waiting=1,
    kv=0.3,
)
VLLM_AFTER = ex.vllm(
    ttft={0.1: 4, 0.25: 14, 0.5: 30},
    itl={0.025: 100, 0.05: 140, 0.075: 150},
    prompt_tokens=1600,
    generation_tokens=500,
    prefix_hits=300,
    prefix_queries=1000,
    running=5,
    waiting=3,
    kv=0.65,
)


def engine_stats(*args):
    out = io.StringIO()
    call_command("engine_stats", *args, stdout=out)
    return out.getvalue()


@pytest.mark.parametrize("path", ["", "/", "/metrics"])
def test_json_figures_of_a_vllm_engine_over_the_interval(path):
    with serving({"/metrics": [VLLM_BEFORE, VLLM_AFTER]}) as (base, requests):
        data = json.loads(engine_stats(base + path, "--interval", "0.5", "--json"))
    assert requests == ["/metrics", "/metrics"]  # two scrapes, both of /metrics
    assert list(data) == KEYS
    assert data["engine"] == "vllm"
    assert data["model"] == "meta-llama/Llama-3.1-8B-Instruct"
    # TTFT increments: 4 in (0.1, 0.25], 16 in (0.25, 0.5]; 20 in all.
    # p50: rank 10 → 0.25 + 0.25 * 6/16 = 0.34375; p95: rank 19 → 0.25 + 0.25 * 15/16 = 0.484375;
    # p99: rank 19.8 → 0.25 + 0.25 * 15.8/16 = 0.496875.
    assert data["ttft_p50_s"] == pytest.approx(0.34375)
    assert data["ttft_p95_s"] == pytest.approx(0.484375)
    assert data["ttft_p99_s"] == pytest.approx(0.496875)
    # ITL increments: 40 in (0.025, 0.05], 10 in (0.05, 0.075]; 50 in all.
    # p50: rank 25 → 0.025 + 0.025 * 25/40 = 0.040625; p95: rank 47.5 → 0.05 + 0.025 * 7.5/10 = 0.06875.
    assert data["itl_p50_s"] == pytest.approx(0.040625)
    assert data["itl_p95_s"] == pytest.approx(0.06875)
    # Gauges from the second scrape.
    assert (data["kv_cache_usage"], data["running"], data["waiting"]) == (0.65, 5.0, 3.0)
    # Prefix cache: hits +200 of queries +600.
    assert data["prefix_cache_hit_rate"] == pytest.approx(200 / 600)
    # Tokens: prompt +600, generation +300 over the measured interval, at least the 0.5 s slept.
    assert 600 / 2.0 < data["prompt_tokens_per_s"] <= 600 / 0.5
    assert data["generation_tokens_per_s"] == pytest.approx(data["prompt_tokens_per_s"] / 2)


def test_json_has_nulls_where_an_idle_sglang_engine_had_no_data():
    idle = ex.sglang(running=0, queued=0, token_usage=0.05, prompt_tokens=100, generation_tokens=50)
    with serving({"/metrics": [idle, idle]}) as (base, _):
        data = json.loads(engine_stats(base, "--interval", "0.1", "--json"))
    assert list(data) == KEYS
    assert data["engine"] == "sglang"
    assert data["model"] == "Qwen/Qwen2.5-7B-Instruct"
    for key in ("ttft_p50_s", "ttft_p95_s", "ttft_p99_s", "itl_p50_s", "itl_p95_s", "prefix_cache_hit_rate"):
        assert data[key] is None, key
    assert data["kv_cache_usage"] == 0.05
    assert data["prompt_tokens_per_s"] == 0.0


def test_a_metrics_url_behind_a_proxy_path_is_used_as_given():
    path = "/api/v1/namespaces/team-a/pods/llama-0:8000/proxy/metrics"
    with serving({path: [VLLM_BEFORE, VLLM_AFTER]}) as (base, requests):
        data = json.loads(engine_stats(base + path, "--interval", "0.1", "--json"))
    assert requests == [path, path]
    assert data["running"] == 5.0


def test_table_output_names_the_engine_and_the_figures():
    with serving({"/metrics": [VLLM_BEFORE, VLLM_AFTER]}) as (base, _):
        text = engine_stats(base, "--interval", "0.1")
    assert "vllm · meta-llama/Llama-3.1-8B-Instruct" in text
    assert "TTFT p50" in text
    assert "343.8 ms" in text  # 0.34375 s
    assert "KV-cache usage" in text
    assert "65.0 %" in text
    assert "33.3 %" in text  # prefix-cache hit rate 200/600


def test_unreachable_url_is_a_command_error():
    with closed_port() as port, pytest.raises(CommandError, match="cannot scrape metrics"):
        engine_stats(f"http://127.0.0.1:{port}", "--interval", "0.1")


def test_not_an_engine_is_a_command_error():
    html = {"/metrics": ["<html>hello</html>"]}
    with (
        serving(html, content_type="text/html") as (base, _),
        pytest.raises(CommandError, match="not a vLLM or SGLang metrics endpoint"),
    ):
        engine_stats(base, "--interval", "0.1")
    with serving({"/other": ["x"]}) as (base, _), pytest.raises(CommandError, match="HTTP 404"):
        engine_stats(base, "--interval", "0.1")
    with pytest.raises(CommandError, match="not an http"):
        engine_stats("ftp://example.com/metrics", "--interval", "0.1")


def test_manage_py_exits_non_zero_with_the_reason_on_stderr():
    with closed_port() as port:
        url = f"http://127.0.0.1:{port}/metrics"
        result = subprocess.run(
            [sys.executable, "manage.py", "engine_stats", url, "--interval", "0.1", "--json"],
            cwd=REPO,
            env={**os.environ, "DEBUG": "1"},
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode != 0
    assert result.stdout == ""
    assert "cannot scrape metrics" in result.stderr
    assert url in result.stderr


@pytest.mark.parametrize("interval", ["0", "-1", "soon", "inf"])
def test_interval_must_be_a_positive_number(interval):
    with pytest.raises(CommandError, match="positive number of seconds"):
        engine_stats("http://127.0.0.1:1/", "--interval", interval)
