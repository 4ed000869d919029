"""`manage.py engine_stats` against kubesim's simulated vLLM and SGLang engines, started standalone.

Completions are sent between the command's two scrapes; the figures must agree with what the engine
told each client (prompt and completion tokens, cached tokens) over the measured interval.
"""

import asyncio
import io
import json
import math
import threading
import time
import urllib.request

import pytest
from django.core.management import call_command

from apps.telemetry.exposition import parse_snapshot
from apps.telemetry.scrape import fetch_metrics
from kubesim.engines import workload_for
from kubesim.workload import PodContext
from tests.telemetry import expositions as ex
from tests.telemetry.servers import serving_app

INTERVAL_S = 2.0
ENGINES = {
    "vllm": ("vllm/vllm-openai:v0.33.0", ["--model", "meta-llama/Llama-3.1-8B-Instruct"]),
    "sglang": (
        "lmsysorg/sglang:latest",
        ["python3", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen2.5-7B-Instruct", "--enable-metrics"],
    ),
}


@pytest.fixture
def event_loop_thread():
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


@pytest.fixture
def engine(request, event_loop_thread):
    """A simulated engine of the parametrised kind, ready, on a loopback port."""
    image, args = ENGINES[request.param]
    ctx = PodContext(
        namespace="team-a",
        pod_name=f"{request.param}-0",
        labels={},
        annotations={},
        container={"name": "engine", "image": image, "args": args},
        env={},
        gpu_key="h100-sxm-80gb",
        gpu_count=1,
        seed=7,
        fast_start=True,
    )
    workload = workload_for(ctx)
    asyncio.run_coroutine_threadsafe(workload.start(), event_loop_thread).result(30)
    deadline = time.monotonic() + 30
    while not workload.ready() and time.monotonic() < deadline:
        time.sleep(0.05)
    yield request.param, workload
    asyncio.run_coroutine_threadsafe(workload.stop(), event_loop_thread).result(30)


def complete(base_url, model, prompt, max_tokens=12):
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens}).encode()
    req = urllib.request.Request(f"{base_url}/v1/completions", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as response:
        return json.loads(response.read())["usage"]


@pytest.mark.parametrize("engine", ["vllm", "sglang"], indirect=True)
def test_engine_stats_against_a_simulated_engine(engine):
    kind, workload = engine
    model = workload.spec.served_names[0]
    scraped = threading.Event()
    scrapes, texts = [], []

    # A pass-through in front of the engine's /metrics (as the pod proxy would be) that tells the test
    # when the first scrape happened, so the completions fall between the two scrapes.
    def proxy(path, _query):
        text = fetch_metrics(workload.base_url + path)
        scrapes.append(time.monotonic())
        texts.append(text)
        scraped.set()
        return 200, "text/plain; version=0.0.4", text

    out = io.StringIO()
    with serving_app(proxy) as (base, _):
        command = threading.Thread(
            target=call_command,
            args=("engine_stats", base, "--interval", str(INTERVAL_S), "--json"),
            kwargs={"stdout": out},
        )
        command.start()
        assert scraped.wait(10)
        shared = "You are a helpful assistant. Answer briefly and precisely. " * 8
        usages = [complete(workload.base_url, model, shared + f"Question {i}: what is {i} + {i}?") for i in range(6)]
        command.join(30)
    assert len(scrapes) == 2

    data = json.loads(out.getvalue())
    assert data["engine"] == kind
    assert data["model"] == model
    # Every request finished inside the interval, so the latency figures exist and are ordered.
    assert 0 < data["ttft_p50_s"] <= data["ttft_p95_s"] <= data["ttft_p99_s"] < 10
    assert 0 < data["itl_p50_s"] <= data["itl_p95_s"] < 1
    # Token rates: what the engine reported to the clients, over an interval of at least INTERVAL_S
    # (the command's sleep) and at most the gap between the proxy's two scrapes plus a margin.
    prompt = sum(u["prompt_tokens"] for u in usages)
    generated = sum(u["completion_tokens"] for u in usages)
    longest = scrapes[1] - scrapes[0] + 0.5
    assert prompt / longest <= data["prompt_tokens_per_s"] <= prompt / INTERVAL_S
    assert generated / longest <= data["generation_tokens_per_s"] <= generated / INTERVAL_S
    # The shared preamble is cached after the first request: the hit rate is the cached share of prompts.
    cached = sum((u.get("prompt_tokens_details") or {}).get("cached_tokens", 0) for u in usages)
    assert cached > 0
    assert data["prefix_cache_hit_rate"] == pytest.approx(cached / prompt, abs=0.02)
    # Idle again when the second scrape came.
    assert (data["running"], data["waiting"]) == (0.0, 0.0)
    assert 0 <= data["kv_cache_usage"] <= 1

    # The exposition itself: the engine's real TTFT and ITL bucket bounds (engines.md), one series each.
    snap = parse_snapshot(texts[1], all_families=True)
    bounds = {"vllm": (ex.VLLM_TTFT, ex.VLLM_ITL), "sglang": (ex.SGLANG_TTFT, ex.SGLANG_ITL)}[kind]
    for family, expected in zip(("time_to_first_token_seconds", "inter_token_latency_seconds"), bounds, strict=True):
        (series,) = snap.histograms[family].values()
        assert sorted(series) == [*expected, math.inf]
