"""Speculative decoding in the engine core (n-gram drafting, vLLM's `--speculative-config`): each decode step
verifies k drafted tokens with the last one and emits (1 - a^(k+1)) / (1 - a) tokens on average; the verify is
k + 1 tokens of compute at the sequence's context, so it is nearly free while decode is memory-bound (few
sequences) and costs more than it saves once compute dominates (many).

Hand figures for Llama 3.1 8B on one L4: weights 16.06e9 B read at 0.30e12 x 0.7 = 210e9 B/s (76.5 ms) plus 2 ms a
step; 16.06e9 FLOPs a token at 121e12 x 0.5 = 60.5e12 FLOP/s.
"""

from __future__ import annotations

import json

import pytest

from kubesim.engines import config, flags
from kubesim.engines.core import Request
from kubesim.engines.harness import pod_context
from kubesim.engines.virtual import VirtualEngine
from kubesim.workload import WorkloadExit


def core(*args, annotations=None):
    ctx = pod_context("vllm/vllm-openai:v0.33.0",
                      ["meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "8192", *args],
                      gpu_key="l4-24gb", fast_start=False, annotations=annotations or {})
    ns, _ = flags.parse_vllm(flags.command_line(ctx.container, ctx.env))
    return config.vllm_spec(ns, ctx).core


def ngram(k: int) -> list[str]:
    return ["--speculative-config", json.dumps({"method": "ngram", "num_speculative_tokens": k})]


def mean_itl(cfg, sequences: int) -> float:
    """`sequences` requests of 16 prompt tokens and 101 output tokens arriving together; their mean ITL."""
    engine = VirtualEngine(cfg)
    for i in range(sequences):
        engine.submit(Request(str(i), [i * 100 + t for t in range(16)], 101, 101), 0.0)
    engine.run_until(10_000)
    done = engine.take_finished()
    assert len(done) == sequences and all(r.generated == 101 for r in done)
    return sum((r.last_token - r.first_token) / (r.generated - 1) for r in done) / len(done)


def test_the_ngram_config_sets_the_drafts_and_the_assumed_acceptance():
    cfg = core(*ngram(3))
    assert (cfg.spec_tokens, cfg.spec_acceptance) == (3, 0.5)
    assert cfg.spec_yield() == pytest.approx((1 - 0.5**4) / (1 - 0.5))  # 1.875 tokens a step
    assert core(*ngram(3), annotations={"kubesim.io/spec-acceptance": "0.8"}).spec_acceptance == 0.8
    assert core().spec_yield() == 1.0 and cfg.spec_yield(1) == pytest.approx(1.5)  # fewer drafts where the step is full
    # A draft model's own passes are not modelled: the engine decodes as without it (and says so in its log).
    assert core("--speculative-config", json.dumps({"method": "draft_model", "model": "d",
                                                    "num_speculative_tokens": 3})).spec_tokens == 0
    with pytest.raises(WorkloadExit):
        core("--speculative-config", json.dumps({"method": "ngram", "num_speculative_tokens": 0}))


def test_one_sequence_decodes_faster_by_the_mean_yield():
    # Alone, a step verifying 4 tokens is as memory-bound as a plain one (64 GFLOP: 1 ms under 76.5 ms): 78.5 ms.
    # 100 tokens after the first at 1.875 a step (1, 2, 2, 2, 2, 2, 2, 2 per 8 steps, the fractions carried):
    # 6 x 8 steps for 90, then 1, 2, 2, 2, 2 and the last 1: 54 steps, 0.54 steps a token: 42.4 ms.
    plain, speculative = mean_itl(core(), 1), mean_itl(core(*ngram(3)), 1)
    assert plain == pytest.approx(16.06e9 / 210e9 + 0.002, rel=0.02)
    assert speculative == pytest.approx(54 / 100 * (16.06e9 / 210e9 + 0.002), rel=0.02)


def test_many_sequences_pay_more_for_the_verify_than_it_saves():
    # 128 sequences verifying 8 tokens each: 1,024 tokens x 16.06e9 FLOPs / 60.5e12 = 0.272 s a step (+2 ms) for
    # (1 - 0.5^8) / 0.5 = 1.99 tokens: 0.138 s a token, where plain decode stays memory-bound near 80 ms.
    plain, speculative = mean_itl(core(), 128), mean_itl(core(*ngram(7)), 128)
    assert plain < 0.1
    assert speculative == pytest.approx(0.274 / 1.992, rel=0.05)
