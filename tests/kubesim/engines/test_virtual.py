"""The engine core on a virtual clock (bench/autoscale.py): the decode fast-forward gives exactly the times of
step-by-step execution, and the times follow the roofline of the live engine."""

from __future__ import annotations

import random

import pytest

from kubesim.engines import config, flags
from kubesim.engines.core import Request
from kubesim.engines.harness import pod_context
from kubesim.engines.virtual import VirtualEngine


def spec():
    ctx = pod_context("vllm/vllm-openai:v0.33.0", ["meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "8192"],
                      gpu_key="l4-24gb", fast_start=False)
    ns, _ = flags.parse_vllm(flags.command_line(ctx.container, ctx.env))
    return config.vllm_spec(ns, ctx)


def replay(fast_forward: bool) -> dict[str, tuple[float, float, int]]:
    cfg = spec().core
    engine = VirtualEngine(cfg, fast_forward=fast_forward)
    rng = random.Random(3)
    t, done = 0.0, []
    for i in range(60):
        t += rng.expovariate(2.0)
        engine.run_until(t)
        done += engine.take_finished()
        prompt = [rng.randrange(1000) for _ in range(rng.randint(50, 900))]
        n = rng.randint(20, 200)
        engine.submit(Request(str(i), prompt, n, n), t)
    engine.run_until(t + 600)
    done += engine.take_finished()
    return {r.request_id: (r.first_token, r.last_token, r.generated) for r in done}


def test_fast_forward_gives_the_times_of_step_by_step_execution():
    exact, fast = replay(False), replay(True)
    assert len(exact) == 60 and exact.keys() == fast.keys()
    for rid, (first, last, generated) in exact.items():
        assert fast[rid][2] == generated
        assert fast[rid][0] == pytest.approx(first, abs=1e-9)
        assert fast[rid][1] == pytest.approx(last, abs=1e-9)


def test_a_lone_decode_step_lasts_the_weights_read_over_the_achieved_bandwidth():
    # One request decoding alone on an L4: a step reads the 16.06e9 bytes of Llama-3.1-8B's bf16 weights (plus
    # a little KV) at 300e9 B/s x 0.7 achieved, plus the 2 ms step overhead: about 16.06e9 / 210e9 + 0.002.
    cfg = spec().core
    engine = VirtualEngine(cfg)
    engine.submit(Request("0", [1] * 16, 101, 101), 0.0)
    engine.run_until(1000)
    [req] = engine.take_finished()
    itl = (req.last_token - req.first_token) / (req.generated - 1)
    assert itl == pytest.approx(16.06e9 / 210e9 + 0.002, rel=0.02)
