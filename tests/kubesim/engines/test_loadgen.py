"""The load generator: arrival patterns, prompt shapes, and a run against a simulated engine."""

import asyncio
import random

import pytest

from kubesim import loadgen
from kubesim.engines.harness import pod_context, start

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


@pytest.mark.parametrize("pattern", ["constant", "poisson", "bursty", "diurnal"])
def test_arrival_patterns_have_the_requested_mean_rate(pattern):
    times = loadgen.arrival_times(pattern, 50.0, 200.0, random.Random(4))
    assert all(0 <= t < 200 for t in times) and times == sorted(times)
    assert len(times) == pytest.approx(50 * 200, rel=0.05)


def test_bursty_traffic_is_silent_between_bursts_and_diurnal_peaks_mid_run():
    bursty = loadgen.arrival_times("bursty", 10.0, 100.0, random.Random(1))
    assert all((t % 10.0) < 2.5 for t in bursty)
    diurnal = loadgen.arrival_times("diurnal", 10.0, 100.0, random.Random(1))
    middle = sum(1 for t in diurnal if 40 <= t < 60)
    edges = sum(1 for t in diurnal if t < 10 or t >= 90)
    assert middle > 3 * edges


def test_distributions_parse_and_reject_nonsense():
    rng = random.Random(0)
    assert loadgen.parse_dist("300")(rng) == 300
    assert all(100 <= loadgen.parse_dist("uniform:100:200")(rng) <= 200 for _ in range(50))
    with pytest.raises(Exception, match="invalid distribution"):
        loadgen.parse_dist("zipf:1")


def test_target_becomes_the_service_proxy_url():
    assert loadgen.base_url_for("team-a/llama:8000", "http://127.0.0.1:6443") == (
        "http://127.0.0.1:6443/api/v1/namespaces/team-a/services/llama:8000/proxy"
    )
    assert loadgen.base_url_for("http://x:1/", "ignored") == "http://x:1"


def test_a_run_against_an_engine_reports_every_request_and_the_cached_prefix():
    async def go():
        w = await start(
            pod_context(
                "vllm/vllm-openai:v0.33.0",
                [LLAMA, "--max-model-len", "8192"],
                annotations={"kubesim.io/time-scale": "5"},
            )
        )
        try:
            cfg = loadgen.LoadConfig(
                base_url=w.base_url,
                rate=40,
                duration=1.0,
                pattern="constant",
                prompt_tokens=loadgen.parse_dist("400"),
                output_tokens=loadgen.parse_dist("20"),
                shared_prefix=0.5,
                sessions=2,
                seed=3,
            )
            return await loadgen.run(cfg)
        finally:
            await w.stop()

    results = asyncio.run(go())
    summary = loadgen.summarise(results, 1.0)
    assert summary["requests"] == 40 and summary["errors"] == 0
    assert all(r.completion_tokens == 20 and len(r.itls) == 19 for r in results)
    assert summary["prompt_tokens"] == 40 * 400
    # Two sessions share 200-token prefixes (12 full blocks = 192 tokens); after each session's first
    # request the cache holds them (requests may overlap, so at least most of them hit).
    assert summary["cached_prompt_tokens"] >= (40 - 2 - 4) * 192
    assert summary["ttft_p50"] is not None and summary["ttft_p50"] <= summary["ttft_p99"]
    assert "requests 40  errors 0" in loadgen.format_summary(summary)
