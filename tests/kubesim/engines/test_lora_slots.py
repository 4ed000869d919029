"""LoRA adapters in the simulated vLLM's scheduler: `--max-loras` slots per batch (a request for one more
adapter waits, keeping its place, while others are admitted) and the time to load an adapter that host memory
(`--max-cpu-loras` adapters, least recently used dropped) does not hold. Times worked by hand below."""

from __future__ import annotations

import pytest

from kubesim.engines import config, flags
from kubesim.engines.core import Request
from kubesim.engines.harness import pod_context
from kubesim.engines.virtual import VirtualEngine

# Llama-3.1-8B (32 layers, hidden 4096, bf16) at --max-lora-rank 16: q_proj and v_proj each an A and a B of
# 16 x 4096 per layer = 32 * 2 * 2 * 16 * 4096 * 2 bytes = 16,777,216 bytes, read at 2e9 B/s = 0.008388608 s,
# plus 0.02 s of overhead.
LOAD_S = 0.02 + 16_777_216 / 2e9


def engine(*extra: str) -> VirtualEngine:
    ctx = pod_context("vllm/vllm-openai:v0.32.0", ["meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "8192",
                                                   "--enable-lora", "--no-enable-prefix-caching", *extra],
                      gpu_key="l4-24gb", fast_start=False)
    ns, _ = flags.parse_vllm(flags.command_line(ctx.container, ctx.env))
    return VirtualEngine(config.vllm_spec(ns, ctx).core, fast_forward=False)


def request(rid: str, lora: str | None, first_token: int = 1, output: int = 20) -> Request:
    req = Request(rid, [first_token] * 64, output, output)
    req.lora = lora
    return req


def run_alone(eng: VirtualEngine, req: Request, at: float) -> float:
    """The request's time to first token, run with nothing else on the engine."""
    eng.submit(req, at)
    eng.run_until(at + 100)
    [done] = eng.take_finished()
    return done.first_token - at


def test_the_load_time_is_the_adapters_weights_over_the_storage_bandwidth():
    assert engine().core.cfg.lora_load_s == pytest.approx(LOAD_S)
    assert engine("--max-lora-rank", "64").core.cfg.lora_load_s == pytest.approx(0.02 + 4 * 16_777_216 / 2e9)


def test_an_adapter_host_memory_does_not_hold_adds_its_load_to_the_first_step_only():
    eng = engine("--max-loras", "1")
    first = run_alone(eng, request("1", "sql"), 0.0)
    again = run_alone(eng, request("2", "sql", first_token=2), 200.0)  # another prompt: no cache involved
    base = run_alone(eng, request("3", None, first_token=3), 400.0)
    assert first - again == pytest.approx(LOAD_S, abs=1e-9)
    assert again == pytest.approx(base, abs=1e-9)


def test_past_max_cpu_loras_the_least_recently_used_adapter_is_loaded_again():
    one, two = engine("--max-loras", "1"), engine("--max-loras", "1", "--max-cpu-loras", "2")
    for eng in (one, two):
        base = run_alone(eng, request("0", None), 0.0)
        ttfts = [run_alone(eng, request(str(i), name, first_token=i), 200.0 * i)
                 for i, name in enumerate(("a", "b", "a"), start=1)]
        loads = [round((t - base) / LOAD_S, 6) for t in ttfts]
        assert loads == ([1, 1, 1] if eng is one else [1, 1, 0])


def test_a_request_for_one_adapter_more_than_max_loras_waits_while_the_others_run():
    eng = engine("--max-loras", "1")
    a, b, base = request("a", "sql"), request("b", "chat"), request("base", None)
    for req in (a, b, base):
        eng.submit(req, 0.0)
    eng.run_until(0.001)  # the first step: "a" and the base model's request, "b" skipped
    assert [r.request_id for r in eng.core.running] == ["a", "base"]
    assert [r.request_id for r in eng.core.waiting] == ["b"]
    eng.run_until(100)
    done = {r.request_id: r for r in eng.take_finished()}
    assert done["b"].first_scheduled >= done["a"].last_token


def test_two_slots_run_two_adapters_together():
    eng = engine("--max-loras", "2")
    for req in (request("a", "sql"), request("b", "chat")):
        eng.submit(req, 0.0)
    eng.run_until(0.001)
    assert sorted(r.request_id for r in eng.core.running) == ["a", "b"]


def test_sglang_runs_at_most_max_loras_per_batch_adapters_and_loads_none_in_a_step():
    ctx = pod_context("lmsysorg/sglang:v0.5.2-cu126", command=[
        "python3", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen2.5-7B-Instruct", "--enable-lora",
        "--max-loras-per-batch", "1"], gpu_key="l4-24gb", fast_start=False)
    ns, _ = flags.parse_sglang(flags.command_line(ctx.container, ctx.env))
    eng = VirtualEngine(config.sglang_spec(ns, ctx).core, fast_forward=False)
    assert (eng.core.cfg.max_loras, eng.core.cfg.lora_load_s) == (1, 0.0)
    for req in (request("a", "sql"), request("b", "chat"), request("base", None)):
        eng.submit(req, 0.0)
    eng.run_until(0.001)
    assert [r.request_id for r in eng.core.running] == ["a", "base"]
