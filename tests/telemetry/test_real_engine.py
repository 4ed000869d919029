"""The real vLLM (the session's engine on a kubesim cpu-real node) against what the product reads and simulates.

The simulated vLLM must export every family the product reads with the real one's type, label names and
histogram buckets, and every family the real one exports but the simulation lacks must be listed, with its
reason, in kubesim.engines.metrics.NOT_MODELLED. Telemetry's parsing and figures read the real exposition,
scraped through the API server's pod proxy as the workers scrape, into TTFT, ITL, KV-cache and queue figures.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from apps.telemetry.exposition import ENGINES, EXTRA_FAMILIES, VLLM, parse_snapshot
from apps.telemetry.figures import figures, increments
from bench.real_engine import families
from enginevocab.vllm import IMAGE_REF
from kubesim.engines import workload_for
from kubesim.engines.harness import pod_context
from kubesim.engines.metrics import NOT_MODELLED
from tests.realengine import ENGINE_ARGS, MODEL
from tests.telemetry.test_simulated_engines import complete


def product_reads() -> set[str]:
    """The vLLM families telemetry reads (exposition.ENGINES and EXTRA_FAMILIES), with their prefix."""
    names = ENGINES[VLLM]
    fields = [getattr(names, f) for f in names.__dataclass_fields__ if f != "prefix"]
    return {names.prefix + name for name in [*fields, *EXTRA_FAMILIES[VLLM]] if name}


@pytest.fixture(scope="module")
def simulated_text() -> str:
    """The simulated vLLM's exposition, with the session engine's arguments, after one completion."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    workload = workload_for(pod_context(IMAGE_REF, ["meta-llama/Llama-3.1-8B-Instruct", *ENGINE_ARGS],
                                        gpu_key="l4-24gb"))
    asyncio.run_coroutine_threadsafe(workload.start(), loop).result(30)
    try:
        deadline = time.monotonic() + 30
        while not workload.ready() and time.monotonic() < deadline:
            time.sleep(0.05)
        complete(workload.base_url, MODEL, "kubesim", max_tokens=4)
        import urllib.request

        with urllib.request.urlopen(workload.base_url + "/metrics", timeout=30) as response:
            return response.read().decode()
    finally:
        asyncio.run_coroutine_threadsafe(workload.stop(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)


def test_the_simulation_exports_what_the_product_reads_as_the_real_vllm_does(real_engine, simulated_text):
    complete(real_engine.url, MODEL, "kubesim", max_tokens=4)  # every histogram has a sample
    real, sim = families(real_engine.get("/metrics")), families(simulated_text)
    read = product_reads() & set(real)
    # TTFT, ITL, KV usage, running, waiting, preemptions, tokens, lengths, queue time, successes, prefix cache
    assert len(read) >= 14, sorted(read)
    assert {name: sim.get(name) for name in sorted(read)} == {name: real[name] for name in sorted(read)}
    # The rest of the real exposition: the same in the simulation, or listed with a reason.
    assert sorted(set(real) - set(sim)) == sorted(NOT_MODELLED)
    assert all(NOT_MODELLED.values())
    assert [name for name in sorted(set(real) & set(sim)) if real[name] != sim[name]] == []


def test_telemetry_reads_a_real_engine_into_ttft_itl_kv_and_queue_figures(real_engine):
    first = parse_snapshot(real_engine.get("/metrics"), time.time())
    usages = [complete(real_engine.url, MODEL, f"kubesim request {i}", max_tokens=6) for i in range(3)]
    second = parse_snapshot(real_engine.get("/metrics"), time.time())
    assert (first.engine, second.model) == (VLLM, MODEL)
    inc = increments(first, second)
    generated = sum(sum(by_key.values()) for name, by_key in inc.counters.items() if name == "generation_tokens")
    assert generated == sum(u["completion_tokens"] for u in usages)
    seen = figures(first, second)
    assert seen.ttft_p50_s is not None and seen.ttft_p50_s > 0
    assert seen.itl_p50_s is not None and seen.itl_p50_s > 0
    assert seen.kv_cache_usage is not None and 0 <= seen.kv_cache_usage <= 1
    assert (seen.running, seen.waiting) == (0, 0)  # nothing in flight between the requests
    assert seen.queue_time_p95_s is not None
    assert seen.requests_per_s is not None and seen.requests_per_s > 0
